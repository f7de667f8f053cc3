#!/usr/bin/env bash
# `make run` stopped with Ctrl-C exits 0. A real terminal (a private tmux
# server) runs `make run` on spare ports (base $MAKE_RUN_PORT_BASE, else a random hundred of 21000-21899) and
# a temp data dir, waits for the api's /readyz, presses Ctrl-C, and checks
# make's exit status and that make printed no error.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v tmux >/dev/null 2>&1; then
  echo "make-run: tmux not found (make deps installs it)"; echo "make-run: 0 passed, 1 failed"; exit 1
fi
# A random hundred of 21000-21899 unless given: two runs on one machine rarely meet.
base=${MAKE_RUN_PORT_BASE:-$((21000 + RANDOM % 9 * 100))}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/make-run-test.XXXXXX")
sock=waitroom-make-run-$$
cleanup() {
  # A stack still up (a failed run): Ctrl-C it again before closing the terminal.
  if [ ! -e "$tmp/rc" ]; then
    tmux -L "$sock" send-keys -t 0 C-c 2>/dev/null
    for _ in $(seq 1 300); do [ -e "$tmp/rc" ] && break; sleep 0.1; done
  fi
  tmux -L "$sock" kill-server 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL $*"
  echo "--- make run's stdout:"; tail -n 20 "$tmp/log" 2>/dev/null
  echo "--- the terminal:"; tmux -L "$sock" capture-pane -p -t 0 -S -40 2>/dev/null | grep -v '^$' 
  echo "make-run: 0 passed, 1 failed"; exit 1
}

if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$((base + 80))/readyz" 2>/dev/null; then
  echo "make-run: port $((base + 80)) already serves a stack; stop it or set MAKE_RUN_PORT_BASE"
  echo "make-run: 0 passed, 1 failed"; exit 1
fi

cat >"$tmp/run.sh" <<RUN
cd "$root"
export WR_DEV_DATA_DIR="$tmp/data" WR_DEV_KAFKA_PORTS=$((base + 92)),$((base + 93)),$((base + 94)) \
  WR_DEV_REDIS_PORT=$((base + 79)) WR_API_ADDR=127.0.0.1:$((base + 80)) WR_CONSUMER_ADDR=127.0.0.1:$((base + 81)) \
  WR_DEV_SCHEDULER_ADDRS=127.0.0.1:$((base + 82)),127.0.0.1:$((base + 83)),127.0.0.1:$((base + 84)) \
  WR_NOTIFIER_ADDR=127.0.0.1:$((base + 90)) WR_DEV_FRONT_ADDR=127.0.0.1:$((base + 0)) \
  WR_DEV_PPROF_ADDR=127.0.0.1:$((base + 60)) WR_LOG_LEVEL=warn
# stdout (the build line, the banner) to a file; stderr stays the terminal, as
# for a person: job control takes its terminal from there.
make --no-print-directory run >"$tmp/log"
echo \$? >"$tmp/rc"
RUN
tmux -L "$sock" new-session -d -x 200 -y 50 "bash $tmp/run.sh; sleep 60" || fail "tmux did not start"

ready=""
for _ in $(seq 1 600); do # building bin/waitroom-dev cold takes a while
  if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$((base + 80))/readyz" 2>/dev/null; then ready=1; break; fi
  [ -e "$tmp/rc" ] && fail "make run ended before the stack was ready (rc $(<"$tmp/rc"))"
  sleep 0.5
done
[ -n "$ready" ] || fail "the stack was not ready in 300 s"

tmux -L "$sock" send-keys -t 0 C-c
for _ in $(seq 1 600); do [ -e "$tmp/rc" ] && break; sleep 0.1; done
[ -e "$tmp/rc" ] || fail "make run reported no exit status within 60 s of Ctrl-C (make itself was interrupted, or the stack hung)"
rc=$(<"$tmp/rc")
[ "$rc" = 0 ] || fail "make run exited $rc after Ctrl-C, want 0"
grep -q 'waitroom is running' "$tmp/log" || fail "no banner on make run's stdout"
tmux -L "$sock" capture-pane -p -t 0 -S -2000 >"$tmp/pane"
grep -q 'make: \*\*\*' "$tmp/pane" && fail "make printed an error"
echo "ok   make run exits 0 on Ctrl-C, no make error"
echo "make-run: 1 passed, 0 failed"
