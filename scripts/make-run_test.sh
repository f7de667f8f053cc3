#!/usr/bin/env bash
# `make run` stopped with Ctrl-C exits 0, and make prints no error. A real
# terminal (a private tmux server) runs `make run` on spare ports (base
# $MAKE_RUN_PORT_BASE, else a random hundred of 21000-21899) and a temp data
# dir, and presses Ctrl-C in two moments:
#   running:  after the banner, with the api ready;
#   starting: as soon as the stack logs its first line (Redis starting), before
#             the banner: a stop during start-up is no failure either.
# And once it sends no Ctrl-C but `kill -TERM <make's pid>`, as a script would:
#   killed:   every process under make ends and no port of the stack is held.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v tmux >/dev/null 2>&1; then
  echo "make-run: tmux not found (make deps installs it)"; echo "make-run: 0 passed, 1 failed"; exit 1
fi
base=${MAKE_RUN_PORT_BASE:-$((21000 + RANDOM % 9 * 100))}
top=$(mktemp -d "${TMPDIR:-/tmp}/make-run-test.XXXXXX")
sock=waitroom-make-run-$$
passed=0 failed=0 tmp=""

stop_terminal() {
  # A stack still up (a failed case): Ctrl-C it again before closing the terminal.
  if [ -n "$tmp" ] && [ ! -e "$tmp/rc" ]; then
    tmux -L "$sock" send-keys -t 0 C-c 2>/dev/null
    for _ in $(seq 1 300); do [ -e "$tmp/rc" ] && break; sleep 0.1; done
  fi
  tmux -L "$sock" kill-server 2>/dev/null
}
trap 'stop_terminal; rm -rf "$top"' EXIT

# descendants PID: every process under PID (from /proc: no procps needed).
descendants() {
  local f st pid ppid rest todo=("$1")
  while [ ${#todo[@]} -gt 0 ]; do
    local parent=${todo[0]}
    todo=("${todo[@]:1}")
    for f in /proc/[0-9]*/stat; do
      st=$(cat "$f" 2>/dev/null) || continue
      pid=${st%% *}
      rest=${st##*) } # past "pid (comm) ": the comm may hold spaces
      ppid=${rest#* }; ppid=${ppid%% *}
      [ "$ppid" = "$parent" ] && { echo "$pid"; todo+=("$pid"); }
    done
  done
}
alive() { local p n=""; for p in "$@"; do [ -e "/proc/$p" ] && n="$n $p"; done; echo "${n# }"; }
ports() { echo "$base" $((base + 60)) $((base + 79)) $((base + 80)) $((base + 81)) $((base + 82)) $((base + 83)) $((base + 84)) $((base + 90)) $((base + 92)) $((base + 93)) $((base + 94)); }
held() { local p n=""; for p in $(ports); do (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && n="$n $p"; done; echo "${n# }"; }

pane() { tmux -L "$sock" capture-pane -p -t 0 -S -2000 2>/dev/null; }
fail() {
  failed=$((failed + 1))
  echo "FAIL $case: $*"
  echo "--- make run's stdout:"; tail -n 20 "$tmp/log" 2>/dev/null
  echo "--- the terminal:"; pane | grep -v '^$' | tail -n 30
}

# run_case NAME: starts make run, waits for the moment NAME, presses Ctrl-C.
run_case() {
  case=$1
  tmp=$top/$case
  mkdir -p "$tmp"
  if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$((base + 80))/readyz" 2>/dev/null; then
    fail "port $((base + 80)) already serves a stack; stop it or set MAKE_RUN_PORT_BASE"; return
  fi
  cat >"$tmp/run.sh" <<RUN
echo \$\$ >"$tmp/shell.pid"
cd "$root"
export WR_DEV_DATA_DIR="$tmp/data" WR_DEV_KAFKA_PORTS=$((base + 92)),$((base + 93)),$((base + 94)) \
  WR_DEV_REDIS_PORT=$((base + 79)) WR_API_ADDR=127.0.0.1:$((base + 80)) WR_CONSUMER_ADDR=127.0.0.1:$((base + 81)) \
  WR_DEV_SCHEDULER_ADDRS=127.0.0.1:$((base + 82)),127.0.0.1:$((base + 83)),127.0.0.1:$((base + 84)) \
  WR_NOTIFIER_ADDR=127.0.0.1:$((base + 90)) WR_DEV_FRONT_ADDR=127.0.0.1:$((base + 0)) \
  WR_DEV_PPROF_ADDR=127.0.0.1:$((base + 60)) WR_LOG_LEVEL=info
# stdout (the build line, the banner) to a file; stderr (the logs) stays the
# terminal, as for a person: job control takes its terminal from there.
make --no-print-directory run >"$tmp/log"
echo \$? >"$tmp/rc"
RUN
  tmux -L "$sock" new-session -d -x 200 -y 50 "bash $tmp/run.sh; sleep 600" || { fail "tmux did not start"; return; }

  local moment=""
  for _ in $(seq 1 3000); do # up to 300 s: building bin/waitroom-dev cold takes a while
    [ -e "$tmp/rc" ] && { fail "make run ended before Ctrl-C (rc $(<"$tmp/rc"))"; stop_terminal; return; }
    case $case in
    running) grep -q 'waitroom is running' "$tmp/log" 2>/dev/null &&
      curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$((base + 80))/readyz" 2>/dev/null && moment=1 ;;
    starting) pane | grep -q 'kafka: embedded' && moment=1 ;;
    killed) grep -q 'waitroom is running' "$tmp/log" 2>/dev/null &&
      curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$((base + 80))/readyz" 2>/dev/null && moment=1 ;;
    esac
    [ -n "$moment" ] && break
    sleep 0.1
  done
  [ -n "$moment" ] || { fail "the moment to press Ctrl-C never came"; stop_terminal; return; }
  [ "$case" = starting ] && grep -q 'waitroom is running' "$tmp/log" && echo "note $case: the banner was already out"

  if [ "$case" = killed ]; then kill_make; stop_terminal; return; fi
  tmux -L "$sock" send-keys -t 0 C-c
  for _ in $(seq 1 600); do [ -e "$tmp/rc" ] && break; sleep 0.1; done
  if [ ! -e "$tmp/rc" ]; then
    fail "make run reported no exit status within 60 s of Ctrl-C (make itself was interrupted, or the stack hung)"
  elif [ "$(<"$tmp/rc")" != 0 ]; then
    fail "make run exited $(<"$tmp/rc") after Ctrl-C, want 0"
  elif pane | grep -q 'make: \*\*\*\|make\[[0-9]*\]: \*\*\*'; then
    fail "make printed an error"
  else
    passed=$((passed + 1))
    echo "ok   $case: make run exits 0 on Ctrl-C, no make error"
  fi
  stop_terminal
}

# kill_make sends SIGTERM to make alone (not its group, not the stack) and
# checks that make ends and leaves nothing behind: no process that was under
# it, no port of the stack held.
kill_make() {
  local mk="" p under left ports_held
  for p in $(descendants "$(<"$tmp/shell.pid")"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = make ] && { mk=$p; break; }
  done
  [ -n "$mk" ] || { fail "make's pid not found under the terminal's shell"; return; }
  under=$(descendants "$mk")
  echo "$under" | grep -q . || { fail "no process under make (pid $mk)"; return; }
  [ -n "$(held)" ] || { fail "the stack holds none of its ports before the kill"; return; }
  kill -TERM "$mk"
  for _ in $(seq 1 600); do [ -e "$tmp/rc" ] && [ -z "$(alive $under)" ] && [ -z "$(held)" ] && break; sleep 0.1; done
  left=$(alive $under) ports_held=$(held)
  if [ ! -e "$tmp/rc" ]; then
    fail "make did not end within 60 s of SIGTERM"
  elif [ -n "$left" ]; then
    fail "processes left after make was killed: $left"
    kill -TERM $left 2>/dev/null # ours: the stack this case started
  elif [ -n "$ports_held" ]; then
    fail "ports still held after make was killed: $ports_held"
  else
    passed=$((passed + 1))
    echo "ok   $case: kill -TERM <make> stops the stack: no process left ($(echo $under | wc -w) were under make), no port held"
  fi
}

run_case running
run_case starting
run_case killed
echo "make-run: $passed passed, $failed failed"
[ "$failed" = 0 ]
