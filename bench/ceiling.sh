#!/usr/bin/env bash
# bench/ceiling.sh: register and status on the waitroom api, side by side with
# the ceiling (bench/ceiling: a plain net/http server answering a fixed 202),
# with the same wrk settings in the same run, and prints each as a ratio to
# the ceiling plus the CPU µs per request of each server process.
#
# The api runs as its own process (bin/waitroom-api), so its CPU is its own.
# Kafka (kfake, 3 brokers), Redis, the schedulers and the notifier come from
# a dev stack (bin/waitroom-dev) on ports of their own (19092-19094, 16379,
# 181xx), so neither `make run` nor bench/run.sh is disturbed. The dev stack's
# own api is idle; the measured api is on 18080. The consumer runs as its own
# process (bin/waitroom-consumer, WR_DEV_CONSUMER=false in the stack), so its
# CPU per record applied is its own too: after each register run of an api,
# the script waits until the consumer has applied every record and prints
# that CPU over the records (waitroom_consumer_applied_total) on a
# "consumer" row. With STACK=1 the consumer stays inside the stack, as in
# `make run`, and has no row.
#
# Knobs (environment): DUR (wrk duration, 10s), THREADS (2), CONNS (64),
# TOKENS (waiting registrations the status run cycles through, 1000),
# ITEM (ceiling-bench), PPROF=1 (take a CPU profile of the api and of the dev
# stack during each run into $OUT/{register,status}-N.prof and
# $OUT/stack-{register,status}-N.prof, and of the consumer apart during each
# register run of an api into $OUT/consumer-register-N.prof; the profiles
# cost a little CPU),
# OUT (where logs and profiles go: a temp dir, printed), ROUNDS (1: each
# pair of runs repeated, ceiling and api alternating), API_ENV (more
# environment for the api, e.g. API_ENV="WR_STATUS_EXACT_EVERY=0": every
# status read exact), CONSUMER_ENV (more environment for the consumer apart,
# e.g. CONSUMER_ENV="WR_CONSUMER_FETCH_MIN_BYTES=1": a fetch answered as
# soon as one record is there, not gathered), PORT_BASE (every port the
# script opens moved into PORT_BASE..PORT_BASE+999, for a shared machine:
# PORT_BASE=25000 puts the api on 25080), OPENLOOP (fixed-rate runs after the wrk rounds, e.g.
# OPENLOOP="status:5000 register:3000": bench/openloop at that rate for DUR
# against the ceiling then the api, latency counted from when each request
# was due), WRK=0 (skip the wrk rounds: only the OPENLOOP runs),
# STACK=1 (the OPENLOOP runs also go to the dev stack's own api on
# PORT_BASE+180: the configuration of `make run`, every service in one
# process, whose CPU per request is then the whole process's; API_ENV is
# given to the dev stack too, so its api reads the same settings),
# BASE_API (the path of a waitroom-api built from another tree, e.g. the
# commit before a change: started beside the api on PORT_BASE+81 with the
# same environment, and measured in every run right after the api, as
# "base", so a before/after pair comes from the same minutes), and with
# PPROF=1 each OPENLOOP run of an api also takes a CPU profile and a 5 s
# runtime trace of it, TRACE_SECONDS long (5), and its heap profile at the
# end ($OUT/open-<server>-<path>-<rate>-<round>.{prof,trace,heap}; read the
# trace with `go tool trace`), PIN=1 (on a 2-core machine: the servers
# measured, the ceiling and the apis, run on CPU 1 alone, and everything else,
# the dev stack with kfake and Redis, wrk and openloop, on CPU 0, so a
# server's CPU per request is not shared with the broker's or the load
# generator's; Go then runs each measured server with GOMAXPROCS=1),
# HOLD (e.g. HOLD=1ms: a second ceiling, "held", that answers each request
# that long after reading it, as a handler waiting for a broker's ack does,
# measured in the register wrk rounds right after the ceiling, and each api's CPU
# per request also given over the held ceiling's: what waiting itself costs
# a plain server, apart from the api's own work), FASTHTTP=1 (the same
# ceiling, and with HOLD the held one too, also served by fasthttp, as
# "fast" and "fastheld" in the register rounds: what another HTTP/1.1
# server costs a request and what waiting costs it, beside net/http's; a
# comparison only, the api runs on net/http and gin).
#
# "make run" at a fixed rate (status 5,000/s, register 3,000/s), beside the
# ceiling and the api as its own process (the status bucket raised: at its
# default 5/s, 1,000 tokens allow 5,000 reads a second, no more):
#
#   STACK=1 WRK=0 DUR=20s OPENLOOP="status:5000 register:3000" \
#     API_ENV="WR_THROTTLE_STATUS_RATE=100000 WR_THROTTLE_STATUS_BURST=100000" bench/ceiling.sh
#
# Redis commands per request come from INFO commandstats (every command,
# those run inside scripts included) around each run: "gross" is all of
# Redis's commands during the api's run over its requests, "net" subtracts
# what Redis ran during the ceiling's run of the same length (the dev stack's
# own background: schedulers, view watchers).
#
#   bench/ceiling.sh                 # ~1 min: build, start, 2 paths x 2 servers x 10 s
#   DUR=5s ROUNDS=3 bench/ceiling.sh # three alternating rounds of 5 s
#   WRK=0 DUR=20s OPENLOOP="status:5000 register:3000" bench/ceiling.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

DUR=${DUR:-10s}
THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
TOKENS=${TOKENS:-1000}
ITEM=${ITEM:-ceiling-bench}
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/waitroom-ceiling.XXXXXX")}
mkdir -p "$OUT"
PB=${PORT_BASE:-18000}
API_ADDR=127.0.0.1:$((PB + 80))
BASE_ADDR=127.0.0.1:$((PB + 81))
STACK_API_ADDR=127.0.0.1:$((PB + 180))
BASE_PPROF_ADDR=127.0.0.1:$((PB + 62))
CEIL_ADDR=127.0.0.1:$((PB + 99))
HELD_ADDR=127.0.0.1:$((PB + 98))
FAST_ADDR=127.0.0.1:$((PB + 97))
FASTHELD_ADDR=127.0.0.1:$((PB + 96))
PPROF_ADDR=127.0.0.1:$((PB + 60))
STACK_PPROF_ADDR=127.0.0.1:$((PB + 61))
CONSUMER_PPROF_ADDR=127.0.0.1:$((PB + 63))
REDIS_PORT=$([ -n "${PORT_BASE:-}" ] && echo $((PB + 379)) || echo 16379)
KAFKA_PORTS=$([ -n "${PORT_BASE:-}" ] && echo $((PB + 92)),$((PB + 93)),$((PB + 94)) || echo 19092,19093,19094)
KAFKA_BROKERS=$(echo "$KAFKA_PORTS" | sed 's/\([0-9]*\)/127.0.0.1:\1/g')

log() { echo "ceiling: $*" >&2; }
pin_sut=() pin_rest=()
if [ "${PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null || { log "PIN=1 needs taskset (util-linux)"; exit 1; }
  pin_sut=(taskset -c 1) pin_rest=(taskset -c 0)
fi
command -v wrk >/dev/null || { log "wrk is missing (apt-get install -y wrk)"; exit 1; }
command -v redis-cli >/dev/null || { log "redis-cli is missing"; exit 1; }

log "building into $OUT/bin"
mkdir -p "$OUT/bin"
go build -o "$OUT/bin/waitroom-dev" ./services/dev
go build -o "$OUT/bin/waitroom-api" ./services/api
go build -o "$OUT/bin/waitroom-consumer" ./services/consumer
go build -o "$OUT/bin/waitroomctl" ./services/ctl
(cd bench/ceiling && GOWORK=off go build -o "$OUT/bin/ceiling" .)
(cd bench/openloop && GOWORK=off go build -o "$OUT/bin/openloop" .)

# shellcheck source=bench/procs.sh
. "$root/bench/procs.sh"

apart=1 # the consumer as its own process
stack_env=()
[ "${STACK:-0}" = 1 ] && apart=0 && read -r -a stack_env <<<"${API_ENV:-}"
log "starting the dev stack (Kafka, Redis, schedulers, notifier$([ $apart = 0 ] && echo ", consumer"))"
env "${stack_env[@]}" WR_DEV_CONSUMER=$([ $apart = 1 ] && echo false || echo true) WR_TOKEN_KEY=$TOKEN_KEY WR_ADMISSION_KEY=$ADMISSION_KEY WR_LOG_LEVEL=warn WR_DEV_DATA_DIR="$OUT/data" WR_DEV_KAFKA_PORTS=$KAFKA_PORTS \
  WR_DEV_REDIS_PORT=$REDIS_PORT WR_DEV_PPROF_ADDR=$([ "${PPROF:-0}" = 1 ] && echo $STACK_PPROF_ADDR) WR_API_ADDR=$STACK_API_ADDR \
  WR_CONSUMER_ADDR=127.0.0.1:$((PB + 181)) WR_DEV_SCHEDULER_ADDRS=127.0.0.1:$((PB + 182)),127.0.0.1:$((PB + 183)) \
  WR_NOTIFIER_ADDR=127.0.0.1:$((PB + 190)) WR_DEV_FRONT_ADDR=127.0.0.1:$((PB + 100)) \
  "${pin_rest[@]}" "$OUT/bin/waitroom-dev" >"$OUT/dev.log" 2>&1 &
stack_pid=$!
pids+=($stack_pid)
CONSUMER_URL=http://127.0.0.1:$((PB + 181))
consumer_pid=
if [ $apart = 1 ]; then
  wait_http http://$STACK_API_ADDR/healthz 120 # Kafka's topics and Redis are there
  log "starting the consumer as its own process on ${CONSUMER_URL#http://}"
  env WR_LOG_LEVEL=warn WR_CONSUMER_ADDR=${CONSUMER_URL#http://} WR_KAFKA_BROKERS=$KAFKA_BROKERS \
    WR_REDIS_ADDR=127.0.0.1:$REDIS_PORT WR_PPROF_ADDR=$([ "${PPROF:-0}" = 1 ] && echo $CONSUMER_PPROF_ADDR) ${CONSUMER_ENV:-} "${pin_rest[@]}" "$OUT/bin/waitroom-consumer" >"$OUT/consumer.log" 2>&1 &
  consumer_pid=$!
  pids+=($consumer_pid)
fi
wait_http http://$STACK_API_ADDR/readyz 120 || { [ $apart = 1 ] && tail -3 "$OUT/consumer.log" >&2; exit 1; }
redis_pid=$(redis-cli -p $REDIS_PORT info server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')

log "an item that admits nobody during the run: $ITEM"
WR_ADMIN_URL=http://127.0.0.1:$((PB + 182)) WR_ADMIN_TOKEN=dev-admin-token \
  "$OUT/bin/waitroomctl" items set "$ITEM" --enabled --stock 1000000 --rate 0.001 --max-active 1000 >"$OUT/items.log" 2>&1

log "starting the api on $API_ADDR and the ceiling on $CEIL_ADDR"
# start_api ADDR PPROF_ADDR BINARY LOG: an api process on ADDR (its pid in api_started)
start_api() {
  local pprof_env=()
  [ "${PPROF:-0}" = 1 ] && pprof_env=(WR_PPROF_ADDR=$2)
  env ${API_ENV:-} WR_LOG_LEVEL=warn WR_API_ADDR=$1 WR_KAFKA_BROKERS=$KAFKA_BROKERS \
    WR_REDIS_ADDR=127.0.0.1:$REDIS_PORT WR_TOKEN_KEY=$TOKEN_KEY \
    WR_ADMISSION_KEY=$ADMISSION_KEY "${pprof_env[@]}" \
    "${pin_sut[@]}" "$3" >"$4" 2>&1 &
  api_started=$!
  pids+=($api_started)
}
start_api "$API_ADDR" "${PPROF_ADDR:-}" "$OUT/bin/waitroom-api" "$OUT/api.log"
api_pid=$api_started
base_pid=
if [ -n "${BASE_API:-}" ]; then
  log "starting the base api ($BASE_API) on $BASE_ADDR"
  start_api "$BASE_ADDR" "${BASE_PPROF_ADDR:-}" "$BASE_API" "$OUT/base.log"
  base_pid=$api_started
fi
"${pin_sut[@]}" "$OUT/bin/ceiling" -addr $CEIL_ADDR >"$OUT/ceiling.log" 2>&1 &
ceil_pid=$!
pids+=($ceil_pid)
held_pid=
if [ -n "${HOLD:-}" ]; then
  "${pin_sut[@]}" "$OUT/bin/ceiling" -addr $HELD_ADDR -hold "$HOLD" >"$OUT/held.log" 2>&1 &
  held_pid=$!
  pids+=($held_pid)
fi
# The register rounds' other plain servers, measured after the ceiling:
# "NAME PID ADDR NOTE" each.
others=()
[ -n "$held_pid" ] && others+=("held $held_pid $HELD_ADDR answers-after-$HOLD")
if [ "${FASTHTTP:-0}" = 1 ]; then
  "${pin_sut[@]}" "$OUT/bin/ceiling" -server fasthttp -addr $FAST_ADDR >"$OUT/fast.log" 2>&1 &
  pids+=($!)
  others+=("fast $! $FAST_ADDR the-ceiling-on-fasthttp")
  if [ -n "$held_pid" ]; then
    "${pin_sut[@]}" "$OUT/bin/ceiling" -server fasthttp -addr $FASTHELD_ADDR -hold "$HOLD" >"$OUT/fastheld.log" 2>&1 &
    pids+=($!)
    others+=("fastheld $! $FASTHELD_ADDR the-held-ceiling-on-fasthttp")
  fi
fi
wait_http http://$API_ADDR/readyz 60
wait_http http://$CEIL_ADDR/ 10
for o in "${others[@]}"; do wait_http "http://$(echo "$o" | cut -d' ' -f3)/" 10; done
[ -n "$base_pid" ] && wait_http http://$BASE_ADDR/readyz 60
for addr in $API_ADDR ${base_pid:+$BASE_ADDR} $([ "${STACK:-0}" = 1 ] && echo $STACK_API_ADDR); do
  for _ in $(seq 1 100); do # each api's item cache has the bench item
    code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "http://$addr/api/v1/items/$ITEM/registrations" -d '{"userId":"probe"}')
    [ "$code" = 202 ] && break
    sleep 0.1
  done
done

log "registering $TOKENS waiting users for the status run"
: >"$OUT/tokens.txt"
for i in $(seq "$TOKENS"); do
  echo "url = \"http://$API_ADDR/api/v1/items/$ITEM/registrations\""
  echo "data = \"{\\\"userId\\\":\\\"reader-$i\\\"}\""
  echo 'write-out = "\n"'
  echo 'silent'
  echo 'next'
done | sed '$d' >"$OUT/curl.cfg" # no "next" after the last
curl -K "$OUT/curl.cfg" | sed -n 's/.*"token":"\([^"]*\)".*/'"$ITEM"' \1/p' >"$OUT/tokens.txt"
[ "$(wc -l <"$OUT/tokens.txt")" -eq "$TOKENS" ] || { log "got $(wc -l <"$OUT/tokens.txt") tokens, not $TOKENS"; exit 1; }
sleep 1 # the consumer applies them (status answers WAITING, not PENDING)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# sys_counts PID: the process's read and write system calls (every thread's,
# /proc/PID/io) and its threads' context switches, voluntary and not.
sys_counts() {
  echo "$(awk '/^syscr|^syscw/ {printf "%s ", $2}' "/proc/$1/io")$(cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n + 0}')"
}
# applied: the records the consumer apart has applied (every outcome) and
# the batches it applied them in.
applied() {
  curl -fs "$CONSUMER_URL/metrics" | awk '/^waitroom_consumer_applied_total/ {n += $2}
    /^waitroom_consumer_enqueue_batch_size_count/ {b += $2} END {printf "%d %d\n", n, b}'
}
# settled: the consumer's counts once they stop moving (every record
# applied; read every 200 ms, at most 30 s).
settled() {
  local last now
  last=$(applied)
  for _ in $(seq 150); do
    sleep 0.2
    now=$(applied)
    [ "$now" = "$last" ] && break
    last=$now
  done
  echo "$last"
}
redis_calls() { redis-cli -p $REDIS_PORT info commandstats | sed -n 's/.*:calls=\([0-9]*\),.*/\1/p' | awk '{n += $1} END {print n + 0}'; }
hz=$(getconf CLK_TCK)

# run NAME PID URL SCRIPT [ARGS]: one wrk run; prints "rate p99 us_per_req
# redis_calls stack/redis/wrk_us_per_req rd/wr/cs consumer requests errors"
# (the CPU of the dev stack's process, kfake among it, of redis-server and
# of wrk itself, over the same requests; consumer is
# "records/µs-per-record/records-per-batch" of the consumer apart for an
# api's register run, from the run's start until it applied the last
# record, else "-").
run() {
  local name=$1 pid=$2 url=$3 script=$4
  shift 4
  local before after rbefore rafter sbefore safter dbefore dafter out rate p99 n bad prof="" paddr=$PPROF_ADDR
  local rdb wrb csb rda wra csa cons=- cbefore cafter abefore aafter bbefore bafter
  local an_api=0 # the api or the base api: profiled, and the consumer counted on register
  [ "$pid" = "$api_pid" ] || [ "$pid" = "$base_pid" ] && an_api=1
  [ "$pid" = "$base_pid" ] && paddr=$BASE_PPROF_ADDR
  if [ "${PPROF:-0}" = 1 ] && [ $an_api = 1 ]; then
    curl -s -o "$OUT/$name.prof" "http://$paddr/debug/pprof/profile?seconds=$((${DUR%s} - 1))" &
    prof=$!
    curl -s -o "$OUT/stack-$name.prof" "http://$STACK_PPROF_ADDR/debug/pprof/profile?seconds=$((${DUR%s} - 1))" &
    prof="$prof $!"
  fi
  rbefore=$(redis_calls)
  redis-cli -p $REDIS_PORT info commandstats >"$OUT/$name.redis-before.txt"
  before=$(cpu_ticks "$pid")
  read -r rdb wrb csb <<<"$(sys_counts "$pid")"
  sbefore=$(cpu_ticks "$stack_pid")
  dbefore=$(cpu_ticks "$redis_pid")
  local counted=0 # an api's register run: what the consumer applies is its
  [[ $name == *register* ]] && [ -n "$consumer_pid" ] && [ $an_api = 1 ] && counted=1
  if [ $counted = 1 ]; then
    cbefore=$(cpu_ticks "$consumer_pid")
    read -r abefore bbefore <<<"$(applied)"
    if [ "${PPROF:-0}" = 1 ]; then
      curl -s -o "$OUT/consumer-$name.prof" "http://$CONSUMER_PPROF_ADDR/debug/pprof/profile?seconds=$((${DUR%s} - 1))" &
      prof="$prof $!"
    fi
  fi
  out=$({ TIMEFORMAT='%U %S'; time "${pin_rest[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DUR" -s "$script" "$url" ${1:+-- "$@"}; } 2>"$OUT/$name.wrk-cpu")
  after=$(cpu_ticks "$pid")
  read -r rda wra csa <<<"$(sys_counts "$pid")"
  safter=$(cpu_ticks "$stack_pid")
  dafter=$(cpu_ticks "$redis_pid")
  rafter=$(redis_calls)
  redis-cli -p $REDIS_PORT info commandstats >"$OUT/$name.redis-after.txt"
  if [ $counted = 1 ]; then
    read -r aafter bafter <<<"$(settled)"
    cafter=$(cpu_ticks "$consumer_pid")
    cons=$(awk -v t=$((cafter - cbefore)) -v hz="$hz" -v n=$((aafter - abefore)) -v b=$((bafter - bbefore)) \
      'BEGIN{if (n > 0 && b > 0) printf "%d/%.1f/%.1f", n, t / hz * 1e6 / n, n / b; else print "0/-/-"}')
  fi
  [ -n "$prof" ] && wait $prof
  echo "$out" >"$OUT/$name.txt"
  rate=$(echo "$out" | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p')
  n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in .*/\1/p')
  p99=$(echo "$out" | sed -n 's/.*p99=\([0-9.]*\)ms.*/\1/p')
  bad=$(echo "$out" | sed -n 's/^errors *\(.*\)/\1/p')
  us() { awk -v t="$1" -v hz="$hz" -v n="$n" 'BEGIN{printf "%.1f", t / hz * 1e6 / n}'; }
  local wrk_us
  wrk_us=$(awk -v n="$n" '{printf "%.1f", ($1 + $2) * 1e6 / n}' "$OUT/$name.wrk-cpu")
  local sys
  sys=$(awk -v n="$n" -v r=$((rda - rdb)) -v w=$((wra - wrb)) -v c=$((csa - csb)) 'BEGIN{printf "%.2f/%.2f/%.2f", r / n, w / n, c / n}')
  echo "$rate $p99 $(us $((after - before))) $((rafter - rbefore)) $(us $((safter - sbefore)))/$(us $((dafter - dbefore)))/$wrk_us $sys $cons $n $bad"
}

echo "(Redis cmd/req of the api: gross/net, see the header)"
echo "(stack/redis/wrk: CPU µs per request of the dev stack's process, kfake among it$([ $apart = 0 ] && echo " and the consumer"), of redis-server and of wrk)"
[ $apart = 1 ] && echo "(consumer: the consumer process's CPU µs per record applied, from the api's register run's start until it applied the last record)"
echo "(rd/wr/cs: the server's read and write system calls and its threads' context switches per request)"
printf '%-8s %-8s %12s %9s %10s %14s %18s %16s  %s\n' path server "req/s" "p99 ms" "CPU µs/req" "Redis cmd/req" "stack/redis/wrk" "rd/wr/cs" errors
for r in $(seq "$ROUNDS"); do
  [ "${WRK:-1}" = 0 ] && break
  for path in register status; do
    if [ $path = register ]; then args=(services/ctl/wrk/register.lua "$ITEM"); else args=(services/ctl/wrk/status.lua "$OUT/tokens.txt"); fi
    read -r crate cp99 ccpu credis cothers csys _ cn cerr <<<"$(run "ceiling-$path-$r" "$ceil_pid" "http://$CEIL_ADDR" "${args[0]}" "${args[1]}")" || true
    printf '%-8s %-8s %12s %9s %10s %14s %18s %16s  %s\n' "$path" ceiling "$crate" "$cp99" "$ccpu" "($credis in all)" "$cothers" "$csys" "(the ceiling's answers are not checked)"
    hcpu=
    for o in "${others[@]}"; do
      [ "$path" = register ] || break
      read -r oname opid oaddr onote <<<"$o"
      read -r orate op99 ocpu _ oothers osys _ <<<"$(run "$oname-$path-$r" "$opid" "http://$oaddr" "${args[0]}" "${args[1]}")" || true
      printf '%-8s %-8s %12s %9s %10s %14s %18s %16s  %s\n' "$path" "$oname" "$orate" "$op99" "$ocpu" "" "$oothers" "$osys" "(${onote//-/ })"
      [ "$oname" = held ] && hcpu=$ocpu
    done
    for who in api ${base_pid:+base}; do
      if [ $who = api ]; then pid=$api_pid addr=$API_ADDR name=$path-$r; else pid=$base_pid addr=$BASE_ADDR name=base-$path-$r; fi
      read -r arate ap99 acpu aredis aothers asys acons an aerr <<<"$(run "$name" "$pid" "http://$addr" "${args[0]}" "${args[1]}")" || true
      printf '%-8s %-8s %12s %9s %10s %14s %18s %16s  %s\n' "$path" $who "$arate" "$ap99" "$acpu" \
        "$(awk -v a="$aredis" -v c="$credis" -v n="$an" 'BEGIN{printf "%.3f/%.3f", a / n, (a - c) / n}')" "$aothers" "$asys" "$aerr"
      awk -v a="$arate" -v c="$crate" -v ac="$acpu" -v cc="$ccpu" -v p="$path" -v w=$who \
        'BEGIN{printf "%-8s ratio    %12.2f %9s %10.2f  (%s / ceiling: throughput, CPU per request)\n", p, a / c, "", ac / cc, w}'
      if [ "$acons" != - ]; then
        IFS=/ read -r crec cus cbatch <<<"$acons"
        printf '%-8s %-8s %12s %9s %10s  %s\n' "$path" consumer "$crec rec" "" "$cus" \
          "(the consumer apart: CPU µs per record applied during $who's run, $cbatch records a batch)"
      fi
      if [ -n "$hcpu" ]; then
        awk -v ac="$acpu" -v hc="$hcpu" -v p="$path" -v w=$who \
          'BEGIN{printf "%-8s held     %12s %9s %10.2f  (%s / held ceiling: CPU per request)\n", p, "", "", ac / hc, w}'
      fi
    done
  done
done
# open RATE_SPEC PID URL NAME [PPROF_ADDR]: one fixed-rate run
# (bench/openloop); prints its line with the server's CPU µs per request
# appended. With PPROF=1 and a PPROF_ADDR, a CPU profile of the run and a 5 s
# runtime trace from 1 s after the warm-up go to $OUT/open-NAME-PATH-RATE.*.
open_run() {
  local spec=$1 pid=$2 url=$3 name=$4 paddr=${5:-} path=${1%%:*} rate=${1##*:} before after out n prof=""
  local args=(-item "$ITEM") f=$OUT/open-${4%%-*}-${1%%:*}-${1##*:}-${4##*-}
  [ "$path" = status ] && args=(-tokens "$OUT/tokens.txt")
  if [ "${PPROF:-0}" = 1 ] && [ -n "$paddr" ]; then
    curl -s -o "$f.prof" "http://$paddr/debug/pprof/profile?seconds=$((${DUR%s} + 1))" &
    prof=$!
    (sleep 3 && curl -s -o "$f.trace" "http://$paddr/debug/pprof/trace?seconds=${TRACE_SECONDS:-5}") &
    prof="$prof $!"
  fi
  before=$(cpu_ticks "$pid")
  out=$("${pin_rest[@]}" "$OUT/bin/openloop" -url "$url" -rate "$rate" -dur "$DUR" -label "$name" "${args[@]}")
  after=$(cpu_ticks "$pid")
  if [ -n "$prof" ]; then
    wait $prof
    curl -s -o "$f.heap" "http://$paddr/debug/pprof/heap"
  fi
  n=$(echo "$out" | sed -n 's/.* sent=\([0-9]*\) .*/\1/p')
  echo "$out cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$n" 'BEGIN{printf "%.1f", t / hz * 1e6 / n}')us/req"
}
if [ -n "${OPENLOOP:-}" ]; then
  echo "(fixed rate: latency from when each request was due; cpu: the server process's CPU µs per request sent, warm-up included; load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for r in $(seq "$ROUNDS"); do
    for spec in $OPENLOOP; do
      open_run "$spec" "$ceil_pid" "http://$CEIL_ADDR" "ceiling-$r"
      open_run "$spec" "$api_pid" "http://$API_ADDR" "api-$r" "$PPROF_ADDR"
      [ -n "$base_pid" ] && open_run "$spec" "$base_pid" "http://$BASE_ADDR" "base-$r" "$BASE_PPROF_ADDR"
      [ "${STACK:-0}" = 1 ] && open_run "$spec" "$stack_pid" "http://$STACK_API_ADDR" "stack-$r" "$STACK_PPROF_ADDR"
    done
  done
fi
log "logs, wrk outputs and profiles in $OUT"
