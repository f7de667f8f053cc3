#!/usr/bin/env bash
# README.md's quick start, run as printed against `make run`. A private tmux
# server (make run's job control wants a terminal, as scripts/make-run_test.sh
# explains) runs `make run` on spare ports (base $README_PORT_BASE, else a
# random hundred of 22000-22899) and a temp data dir; the README's addresses
# are rewritten to those ports (8000 -> base, 8080 -> base+80, 8082 -> base+82)
# and nothing else of a line is changed. Then it checks:
#   - the quick start's first block names `make run` and `make test`, and
#     `make -n test` knows the target (running the whole suite inside the
#     suite would recurse);
#   - the page and console URLs the quick start prints answer 200;
#   - each demo item whose row says "registering answers `NNN CODE`" does;
#   - the four curl lines, in one shell as a person would paste them: the
#     register gives a token, the status a live status, the stream through
#     the front door at least one event, the leave LEFT.
# It stops the stack with Ctrl-C in its own terminal and ends its own tmux
# server; it ends no other process.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
readme=$root/README.md
if ! command -v tmux >/dev/null 2>&1; then
  echo "readme: tmux not found (make deps installs it)"; echo "readme: 0 passed, 1 failed"; exit 1
fi
base=${README_PORT_BASE:-$((22000 + RANDOM % 9 * 100))}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/readme-test.XXXXXX")
sock=waitroom-readme-$$
passed=0 failed=0

stop_terminal() {
  if [ -e "$tmp/run.sh" ] && [ ! -e "$tmp/rc" ]; then
    tmux -L "$sock" send-keys -t 0 C-c 2>/dev/null
    for _ in $(seq 1 600); do [ -e "$tmp/rc" ] && break; sleep 0.1; done
  fi
  tmux -L "$sock" kill-server 2>/dev/null
}
trap 'stop_terminal; rm -rf "$tmp"' EXIT

ok() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "readme: $passed passed, $failed failed"; [ "$failed" = 0 ]; exit; }

# The quick start: from its heading to the next "## ".
awk '/^## Quick start/{on=1; next} on && /^## /{exit} on' "$readme" >"$tmp/quickstart.md"
[ -s "$tmp/quickstart.md" ] || { fail "README.md has no '## Quick start' section"; finish; }
# Its sh blocks, each in a file of its own: block1.sh, block2.sh...
awk -v dir="$tmp" '/^```sh$/{n++; on=1; next} /^```$/{on=0; next} on{print > (dir "/block" n ".sh")}' "$tmp/quickstart.md"
[ -s "$tmp/block1.sh" ] && [ -s "$tmp/block2.sh" ] || { fail "the quick start needs two sh blocks (the commands, the curl lines)"; finish; }
ports() { sed -e "s/localhost:8000/127.0.0.1:$base/g; s/127\.0\.0\.1:8000/127.0.0.1:$base/g" \
  -e "s/127\.0\.0\.1:8080/127.0.0.1:$((base + 80))/g; s/127\.0\.0\.1:8082/127.0.0.1:$((base + 82))/g"; }

# 1. The two commands.
if grep -q '^make run\b' "$tmp/block1.sh" && grep -q '^make test\b' "$tmp/block1.sh"; then
  if (cd "$root" && make -n test >/dev/null 2>"$tmp/make-n.err"); then ok "make run and make test are the quick start's commands; make -n test knows the target"
  else fail "make -n test: $(tail -n 3 "$tmp/make-n.err")"; fi
else fail "the first block does not give 'make run' and 'make test': $(cat "$tmp/block1.sh")"; fi

# 2. make run, on spare ports, in a terminal of its own.
cat >"$tmp/run.sh" <<RUN
cd "$root"
export WR_DEV_DATA_DIR="$tmp/data" WR_DEV_KAFKA_PORTS=$((base + 92)),$((base + 93)),$((base + 94)) \
  WR_DEV_REDIS_PORT=$((base + 79)) WR_API_ADDR=127.0.0.1:$((base + 80)) WR_CONSUMER_ADDR=127.0.0.1:$((base + 81)) \
  WR_DEV_SCHEDULER_ADDRS=127.0.0.1:$((base + 82)),127.0.0.1:$((base + 83)),127.0.0.1:$((base + 84)) \
  WR_NOTIFIER_ADDR=127.0.0.1:$((base + 90)) WR_DEV_FRONT_ADDR=127.0.0.1:$((base + 0)) \
  WR_DEV_PPROF_ADDR=127.0.0.1:$((base + 60))
make --no-print-directory run >"$tmp/log"
echo \$? >"$tmp/rc"
RUN
if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$base/readyz" 2>/dev/null; then
  fail "port $base already serves a stack; set README_PORT_BASE"; finish
fi
tmux -L "$sock" new-session -d -x 200 -y 50 "bash $tmp/run.sh; sleep 600" || { fail "tmux did not start"; finish; }
up=""
for _ in $(seq 1 3000); do # up to 300 s: building bin/waitroom-dev cold takes a while
  [ -e "$tmp/rc" ] && break
  grep -q 'waitroom is running' "$tmp/log" 2>/dev/null &&
    curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$base/readyz" 2>/dev/null && up=1 && break
  sleep 0.1
done
if [ -z "$up" ]; then
  fail "make run did not come up (rc $(cat "$tmp/rc" 2>/dev/null || echo none)):"
  tail -n 20 "$tmp/log"; tmux -L "$sock" capture-pane -p -t 0 | grep -v '^$' | tail -n 20
  finish
fi
ok "make run is up on the front door 127.0.0.1:$base"

# 3. The URLs the quick start prints.
for u in $(grep -o 'http://127\.0\.0\.1:80[0-9][0-9]/[^` )]*' "$tmp/quickstart.md" | sort -u); do
  t=$(echo "$u" | ports)
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$t")
  if [ "$code" = 200 ]; then ok "$u answers 200"; else fail "$u ($t) answers $code, want 200"; fi
done

# 4. The demo items' rows.
n=0
while IFS=$'\t' read -r item want code; do
  n=$((n + 1))
  got=$(curl -s -o "$tmp/item.json" -w '%{http_code}' --max-time 5 -XPOST "http://127.0.0.1:$base/api/v1/items/$item/registrations")
  if [ "$got" = "$want" ] && grep -q "\"code\":\"$code\"" "$tmp/item.json"; then ok "demo item $item: $want $code"
  else fail "demo item $item: got $got $(cat "$tmp/item.json"), the README says $want $code"; fi
done < <(sed -n 's/^| `\([a-z0-9-]*\)` |.*registering answers `\([0-9]*\) \([A-Z_]*\)`.*/\1\t\2\t\3/p' "$tmp/quickstart.md")
[ "$n" -gt 0 ] || fail "no demo item row says what registering answers"
for item in $(sed -n 's/^| `\([a-z0-9-]*\)` |.*/\1/p' "$tmp/quickstart.md" | grep -v -f <(cut -f1 <(sed -n 's/^| `\([a-z0-9-]*\)` |.*registering answers.*/\1/p' "$tmp/quickstart.md"))); do
  got=$(curl -s -o "$tmp/item.json" -w '%{http_code}' --max-time 5 -XPOST "http://127.0.0.1:$base/api/v1/items/$item/registrations")
  [ "$got" = 202 ] && ok "demo item $item: 202" || fail "demo item $item: registering answers $got $(cat "$tmp/item.json"), want 202"
done

# 5. The four curl lines, pasted into one shell; each line's output apart.
lines=$(grep -c . "$tmp/block2.sh")
[ "$lines" = 4 ] || fail "the curl block has $lines lines, the README promises four"
{
  echo 'i=0'
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    printf 'i=$((i + 1)); { %s ; } >"%s/out.$i" 2>&1; echo $? >"%s/rc.$i"\n' "$(echo "$line" | ports)" "$tmp" "$tmp"
  done <"$tmp/block2.sh"
  echo "printf '%s' \"\$TOKEN\" >\"$tmp/token\""
} >"$tmp/curl.sh"
(cd "$tmp" && timeout 60 bash "$tmp/curl.sh")
tok=$(cat "$tmp/token" 2>/dev/null)
if [[ "$tok" =~ ^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$ ]]; then ok "register: TOKEN is a queue token"
else fail "register: TOKEN is '$tok', not a token"; fi
if [ "$(cat "$tmp/rc.2")" = 0 ] && grep -Eq '"status":"(PENDING|WAITING|ADMITTED)"' "$tmp/out.2"; then ok "status: $(grep -o '"status":"[A-Z_]*"' "$tmp/out.2")"
else fail "status: rc $(cat "$tmp/rc.2"), $(head -c 300 "$tmp/out.2")"; fi
# --max-time ends a stream still open (curl's 28): the events matter, not how it ended.
if grep -Eq '^event: (pre_queue|position|admitted)$' "$tmp/out.3" && grep -q '^data: {' "$tmp/out.3"; then
  ok "events through the front door: $(grep '^event:' "$tmp/out.3" | tr '\n' ' ')"
else fail "events: rc $(cat "$tmp/rc.3"), $(head -c 300 "$tmp/out.3")"; fi
if [ "$(cat "$tmp/rc.4")" = 0 ] && grep -q '"status":"LEFT"' "$tmp/out.4"; then ok "leave: LEFT"
else fail "leave: rc $(cat "$tmp/rc.4"), $(head -c 300 "$tmp/out.4")"; fi

# 6. Ctrl-C stops it, as the quick start says, with exit 0.
tmux -L "$sock" send-keys -t 0 C-c
for _ in $(seq 1 600); do [ -e "$tmp/rc" ] && break; sleep 0.1; done
if [ "$(cat "$tmp/rc" 2>/dev/null)" = 0 ]; then ok "Ctrl-C stops make run, exit 0"
else fail "make run after Ctrl-C: rc $(cat "$tmp/rc" 2>/dev/null || echo none)"; fi
stop_terminal
finish
