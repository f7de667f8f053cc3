# bench/procs.sh: what bench/ceiling.sh and bench/capacity.sh share, sourced
# after each has defined log(): the processes it started (pids, ended by PID
# on exit, SIGINT first, SIGKILL after 10 s), waiting for an HTTP endpoint,
# and fresh signing keys (a deployed api refuses the development keys
# published in the source).
# shellcheck shell=bash

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

wait_http() { # url seconds
  for _ in $(seq 1 $(($2 * 10))); do
    curl -fs -o /dev/null "$1" && return 0
    sleep 0.1
  done
  log "$1 did not answer in $2 s"; return 1
}

TOKEN_KEY=$(openssl rand -base64 48)
ADMISSION_KEY=$(openssl rand -base64 32)
