#!/usr/bin/env bash
# bench/run.sh spike|soak [extra k6 args]
#
# Starts a fresh dev stack (its own data dir under a temp dir, logs at warn),
# waits for the api's /readyz, runs k6/<spike|soak>.js with bin/k6 (built
# from k6/ when missing), stops the stack with SIGINT and waits for it. The
# summary (JSON + text) lands in $RESULTS_DIR (bench/results). Exit code:
# k6's (99 = a threshold failed), or 1 when k6 passed but the ledger (every
# 202 is admitted or still waiting, counted on the server) does not balance.
#
# Sizes come from the environment, read by the script (see the header of
# k6/spike.js and k6/soak.js), e.g.
#   VUS=50 RAMP=5s HOLD=10s bench/run.sh spike     # the CI flavour, ~30 s
#   DURATION=30s RATE=50 bench/run.sh soak         # the CI soak
# Other knobs: K6 (the k6 binary), EVENTS_URL (default http://127.0.0.1:8090,
# the notifier; the scripts poll status when it does not answer),
# BUSY_WAIT (seconds to wait for another stack to free the ports, 300),
# KEEP_STACK_LOG=1 (copy the stack's log next to the results), KEEP_DATA=1
# (keep the temp dir: the stack's Kafka and Redis data and its log, for a
# post-mortem of a ledger that does not balance).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() { echo "usage: bench/run.sh spike|soak [extra k6 args]" >&2; exit 2; }
[ $# -ge 1 ] || usage
kind=$1
shift
case "$kind" in spike | soak) ;; *) usage ;; esac

K6=${K6:-$root/bin/k6}
RESULTS_DIR=${RESULTS_DIR:-$root/bench/results}
BUSY_WAIT=${BUSY_WAIT:-300}
export EVENTS_URL=${EVENTS_URL:-http://127.0.0.1:8090}
export RESULTS_DIR K6_NO_USAGE_REPORT=true # k6 must not phone home

log() { echo "bench: $*" >&2; }

if [ ! -x "$K6" ]; then
  log "building $K6 (k6 with k6/x/sse; the first build takes a few minutes)"
  (cd k6 && GOWORK=off go build -o "$K6" ./cmd/k6)
fi
log "building bin/waitroom-dev"
mkdir -p bin "$RESULTS_DIR"
go build -o bin/waitroom-dev ./services/dev

tmp=$(mktemp -d "${TMPDIR:-/tmp}/waitroom-bench.XXXXXX")
stack_pid=""

stop_stack() {
  [ -n "$stack_pid" ] || return 0
  if kill -0 "$stack_pid" 2>/dev/null; then
    log "stopping the stack (pid $stack_pid)"
    kill -INT "$stack_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      kill -0 "$stack_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$stack_pid" 2>/dev/null; then
      log "the stack did not stop in 30 s; killing its process group"
      kill -KILL -- "-$stack_pid" 2>/dev/null || true
    fi
  fi
  wait "$stack_pid" 2>/dev/null || true
  stack_pid=""
}

cleanup() {
  local rc=$?
  stop_stack
  if [ "${KEEP_STACK_LOG:-}" = 1 ] && [ -f "$tmp/stack.log" ]; then
    cp "$tmp/stack.log" "$RESULTS_DIR/$kind-stack.log"
  fi
  if [ "${KEEP_DATA:-}" = 1 ]; then
    log "kept the stack's data and log in $tmp (KEEP_DATA=1)"
  else
    rm -rf "$tmp"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The dev stack's ports; another engineer's stack may hold them: wait, never kill it.
ports="8000 8080 8081 8082 8083 8084 8090 9092 9093 9094 6379"
waited=0
while :; do
  busy=""
  for p in $ports; do listening "$p" && busy="$busy $p"; done
  [ -z "$busy" ] && break
  if [ "$waited" -ge "$BUSY_WAIT" ]; then
    log "ports$busy still busy after ${BUSY_WAIT}s (another stack?); giving up"
    exit 1
  fi
  [ "$waited" -eq 0 ] && log "ports$busy are busy (another stack?); waiting up to ${BUSY_WAIT}s"
  sleep 5
  waited=$((waited + 5))
done

log "starting the dev stack (data in $tmp/data)"
# setsid: the stack and its redis-server get their own process group, so a
# stack that ignores SIGINT can be killed whole without touching anything else.
WR_LOG_LEVEL=${WR_LOG_LEVEL:-warn} WR_DEV_DATA_DIR="$tmp/data" \
  setsid bin/waitroom-dev >"$tmp/stack.log" 2>&1 &
stack_pid=$!

ready=0
for _ in $(seq 1 600); do
  if ! kill -0 "$stack_pid" 2>/dev/null; then
    log "the stack exited before it was ready:"
    tail -n 40 "$tmp/stack.log" >&2
    exit 1
  fi
  if curl -fsS -o /dev/null --max-time 1 http://127.0.0.1:8080/readyz 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.1
done
if [ "$ready" != 1 ]; then
  log "the stack was not ready in 60 s:"
  tail -n 40 "$tmp/stack.log" >&2
  exit 1
fi
log "stack ready; running k6/$kind.js (EVENTS_URL=$EVENTS_URL, results in $RESULTS_DIR)"

rm -f "$RESULTS_DIR/$kind.txt" "$RESULTS_DIR/$kind.json"
set +e
"$K6" run --address "" "$@" "k6/$kind.js"
rc=$?
set -e

stop_stack
if [ "$rc" -eq 0 ] && ! grep -q '^ledger: .* OK, every registration' "$RESULTS_DIR/$kind.txt" 2>/dev/null; then
  log "k6 passed but the ledger did not balance (see $RESULTS_DIR/$kind.txt)"
  rc=1
fi
log "k6 exit code $rc; summary in $RESULTS_DIR/$kind.txt"
exit "$rc"
