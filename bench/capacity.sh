#!/usr/bin/env bash
# bench/capacity.sh: the CPU each service spends per unit of work when every
# service, the broker and Redis run as processes of their own, and from it the
# cores a sale needs (docs/capacity.md).
#
# It starts waitroom-kafka (kfake, 3 brokers), a redis-server, and one
# waitroom-consumer, -scheduler, -notifier and -api, each its own process, and
# measures each one's utime + stime (/proc/PID/stat) over six phases, one
# after the other on one item:
#   idle      nothing to do (the schedulers' ticks, the view watchers): each
#             process's CPU per second with no work, subtracted from the rest
#   register  wrk -c$CONNS register.lua for $DUR, until the consumer has
#             applied the last one (the item's seq stops moving); units: the
#             registrations applied
#   status    wrk status.lua over $TOKENS waiting registrations for $DUR;
#             units: the reads wrk completed
#   streams   $STREAMS event streams on the notifier (bench/capacity's
#             client), held for $HOLD with nothing happening; units: streams
#             (the sizing divides by their seconds held)
#   updates   the item admits $ADMIT_RATE a second for $DUR while the
#             streams are open (they are the front of the line: each gets
#             its positions, then its admitted event); units: the events the
#             streams received; "admitted-streams" is the same window with
#             the people admitted (the scheduler's
#             waitroom_scheduler_admitted_total) as units
#   admit     once every stream has ended, the same rate for $DUR with no
#             stream open; units: the people admitted (the sizing takes
#             their cost out of the updates window's)
# The consumer runs with WR_SNAPSHOT_INTERVAL=0: a snapshot of the line
# (each minute by default, ~0.8 µs of Redis a waiting place) would land in
# whichever phase it fell in.
# It writes $OUT/measured.txt (a line a phase: wall seconds, units, CPU
# seconds of api, consumer, scheduler, notifier, redis-server, the broker)
# and runs `capacity size` on it: the CPU per unit net of the idle rate, and
# the cores for a sale of $PEOPLE (SIZE_ARGS: more flags for `capacity
# size`, e.g. SIZE_ARGS="-poll 10s -share 0.5 -admit 2000").
#
# The load generators (wrk and the stream client) run on the same machine;
# their CPU is not counted. The broker's figure is kfake's, not Kafka's.
#
# Knobs: DUR (10s), IDLE (20s), HOLD (30s), CONNS (64), TOKENS (2000),
# STREAMS (TOKENS), ADMIT_RATE (200), ITEM (capacity-bench), PEOPLE
# (1000000), OUT (a temp dir, printed), BIN (where the binaries are
# built, $OUT/bin), NOBUILD=1 (use those already in $BIN), PORT_BASE (17000: every port is
# PORT_BASE+0..99).
#
#   bench/capacity.sh                           # ~2 min after the build
#   PORT_BASE=22300 DUR=15s bench/capacity.sh
#   (cd bench/capacity && GOWORK=off go run . size -measured $OUT/measured.txt -share 0.5)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

DUR=${DUR:-10s}
IDLE=${IDLE:-20s}
HOLD=${HOLD:-30s}
CONNS=${CONNS:-64}
TOKENS=${TOKENS:-2000}
STREAMS=${STREAMS:-$TOKENS}
ADMIT_RATE=${ADMIT_RATE:-200}
ITEM=${ITEM:-capacity-bench}
PEOPLE=${PEOPLE:-1000000}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/waitroom-capacity.XXXXXX")}
mkdir -p "$OUT"
PB=${PORT_BASE:-17000}
KAFKA_PORTS=$((PB + 92)),$((PB + 93)),$((PB + 94))
BROKERS=127.0.0.1:$((PB + 92)),127.0.0.1:$((PB + 93)),127.0.0.1:$((PB + 94))
REDIS_PORT=$((PB + 79))
API=127.0.0.1:$((PB + 80))
CONSUMER=127.0.0.1:$((PB + 81))
SCHEDULER=127.0.0.1:$((PB + 82))
NOTIFIER=127.0.0.1:$((PB + 90))
ADMIN_TOKEN=$(openssl rand -base64 32)

log() { echo "capacity: $*" >&2; }
for tool in wrk redis-server redis-cli curl openssl; do
  command -v $tool >/dev/null || { log "$tool is missing"; exit 1; }
done
[ "$STREAMS" -le "$TOKENS" ] || { log "STREAMS ($STREAMS) must be at most TOKENS ($TOKENS)"; exit 1; }

BIN=${BIN:-$OUT/bin}
if [ -z "${NOBUILD:-}" ]; then
  log "building into $BIN"
  mkdir -p "$BIN"
  for s in api consumer scheduler notifier; do go build -o "$BIN/waitroom-$s" ./services/$s; done
  go build -o "$BIN/waitroom-kafka" ./services/dev/cmd/waitroom-kafka
  go build -o "$BIN/waitroomctl" ./services/ctl
  (cd bench/capacity && GOWORK=off go build -o "$BIN/capacity" .)
fi

# shellcheck source=bench/procs.sh
. "$root/bench/procs.sh"
common=(WR_LOG_LEVEL=warn WR_KAFKA_BROKERS=$BROKERS WR_REDIS_ADDR=127.0.0.1:$REDIS_PORT)

log "starting the broker, redis-server and the four services (ports $PB-$((PB + 99)))"
WR_LOG_LEVEL=warn WR_KAFKA_PORTS=$KAFKA_PORTS WR_KAFKA_DATA_DIR="$OUT/kafka" "$BIN/waitroom-kafka" >"$OUT/kafka.log" 2>&1 &
kafka_pid=$!
pids+=($kafka_pid)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" >"$OUT/redis.log" 2>&1 &
redis_pid=$!
pids+=($redis_pid)
for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
for _ in $(seq 1 100); do
  WR_KAFKA_BROKERS=$BROKERS "$BIN/waitroomctl" topics ensure >"$OUT/topics.log" 2>&1 && break
  sleep 0.2
done
start() { # name env...: starts bin/waitroom-<name> with the common env; sets started_pid
  local name=$1
  shift
  env "${common[@]}" "$@" "$BIN/waitroom-$name" >"$OUT/$name.log" 2>&1 &
  started_pid=$!
  pids+=($started_pid)
}
start consumer WR_CONSUMER_ADDR=$CONSUMER WR_CONSUMER_INSTANCE_ID=consumer-1 WR_SNAPSHOT_INTERVAL=0
consumer_pid=$started_pid
start scheduler WR_SCHEDULER_ADDR=$SCHEDULER WR_ADMIN_TOKEN=$ADMIN_TOKEN
scheduler_pid=$started_pid
start notifier WR_NOTIFIER_ADDR=$NOTIFIER WR_TOKEN_KEY="$TOKEN_KEY" WR_ADMISSION_KEY="$ADMISSION_KEY"
notifier_pid=$started_pid
start api WR_API_ADDR=$API WR_TOKEN_KEY="$TOKEN_KEY" WR_ADMISSION_KEY="$ADMISSION_KEY"
api_pid=$started_pid
for a in $CONSUMER $SCHEDULER $NOTIFIER $API; do wait_http "http://$a/readyz" 120; done

ctl() { WR_ADMIN_URL=http://$SCHEDULER WR_ADMIN_TOKEN=$ADMIN_TOKEN "$BIN/waitroomctl" "$@" >>"$OUT/ctl.log" 2>&1; }
log "an item that admits nobody until the admit phase: $ITEM"
ctl items set "$ITEM" --enabled --stock 100000000 --rate 0.001 --max-active 10000000 --session-ttl 30m
for _ in $(seq 1 100); do # the api's item cache has the item
  code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "http://$API/api/v1/items/$ITEM/registrations" -d '{"userId":"probe"}')
  [ "$code" = 202 ] && break
  sleep 0.1
done

log "registering $TOKENS waiting users (the front of the line: status reads, streams)"
for i in $(seq "$TOKENS"); do
  printf 'url = "http://%s/api/v1/items/%s/registrations"\ndata = "{\\"userId\\":\\"holder-%d\\"}"\nwrite-out = "\\n"\nsilent\nnext\n' "$API" "$ITEM" "$i"
done | sed '$d' >"$OUT/curl.cfg"
curl -K "$OUT/curl.cfg" | sed -n 's/.*"token":"\([^"]*\)".*/'"$ITEM"' \1/p' >"$OUT/tokens.txt"
[ "$(wc -l <"$OUT/tokens.txt")" -eq "$TOKENS" ] || { log "got $(wc -l <"$OUT/tokens.txt") tokens, not $TOKENS"; exit 1; }

seq_key="wr:{$ITEM}:seq"
item_seq() { redis-cli -p "$REDIS_PORT" get "$seq_key" | sed 's/^$/0/'; }
settle() { # waits until the item's seq has not moved for a second
  local a b
  a=$(item_seq)
  while sleep 1; b=$(item_seq); [ "$a" != "$b" ]; do a=$b; done
}
settle
names=(api consumer scheduler notifier redis kafka)
all_pids=("$api_pid" "$consumer_pid" "$scheduler_pid" "$notifier_pid" "$redis_pid" "$kafka_pid")
ticks() { for p in "${all_pids[@]}"; do awk '{printf "%d ", $14 + $15}' "/proc/$p/stat"; done; }
now() { date +%s.%N; }
hz=$(getconf CLK_TCK)
echo "# phase wall_s units ${names[*]} (CPU seconds; $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg))" >"$OUT/measured.txt"
record() { # phase t0 t1 units "ticks0" "ticks1"
  local -a a=($5) b=($6)
  local line="$1 $(awk -v x="$2" -v y="$3" 'BEGIN{printf "%.3f", y - x}') $4" i
  for i in "${!names[@]}"; do line+=" $(awk -v d=$((b[i] - a[i])) -v hz="$hz" 'BEGIN{printf "%.3f", d / hz}')"; done
  echo "$line" | tee -a "$OUT/measured.txt" >&2
}
wrk_n() { sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' "$1"; }

log "idle for $IDLE"
t0=$(now) c0=$(ticks)
sleep "${IDLE%s}"
record idle "$t0" "$(now)" 0 "$c0" "$(ticks)"

log "register: wrk -c$CONNS for $DUR, then until the consumer has applied the last"
s0=$(item_seq) t0=$(now) c0=$(ticks)
wrk -t2 -c"$CONNS" -d"$DUR" -s services/ctl/wrk/register.lua "http://$API" -- "$ITEM" >"$OUT/register.wrk.txt"
settle
record register "$t0" "$(now)" $(($(item_seq) - s0)) "$c0" "$(ticks)"
log "wrk: $(wrk_n "$OUT/register.wrk.txt") requests, $(sed -n 's/^errors *//p' "$OUT/register.wrk.txt")"

log "status: wrk -c$CONNS for $DUR over $TOKENS tokens"
t0=$(now) c0=$(ticks)
wrk -t2 -c"$CONNS" -d"$DUR" -s services/ctl/wrk/status.lua "http://$API" -- "$OUT/tokens.txt" >"$OUT/status.wrk.txt"
record status "$t0" "$(now)" "$(wrk_n "$OUT/status.wrk.txt")" "$c0" "$(ticks)"

log "streams: opening $STREAMS, then holding them for $HOLD"
counts=$OUT/streams.counts
"$BIN/capacity" streams -url "http://$NOTIFIER" -tokens "$OUT/tokens.txt" -n "$STREAMS" -count "$counts" \
  -dur $((${HOLD%s} + 2 * ${DUR%s} + 90))s >"$OUT/streams.txt" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do [ "$(cut -d' ' -f1 "$counts" 2>/dev/null)" = "$STREAMS" ] && break; sleep 0.1; done
[ "$(cut -d' ' -f1 "$counts")" = "$STREAMS" ] || { log "streams opened: $(cat "$counts")"; exit 1; }
sleep 3 # their first events written
t0=$(now) c0=$(ticks)
sleep "${HOLD%s}"
record streams "$t0" "$(now)" "$STREAMS" "$c0" "$(ticks)"
log "streams (opened events pings ended failed): $(cat "$counts")"

admitted() { curl -s "http://$SCHEDULER/metrics" | awk '/^waitroom_scheduler_admitted_total /{print $2 + 0}'; }
log "updates: admitting $ADMIT_RATE a second for $DUR, the streams' holders first"
a0=$(admitted) e0=$(cut -d' ' -f2 "$counts") t0=$(now) c0=$(ticks)
ctl items set "$ITEM" --rate "$ADMIT_RATE"
sleep "${DUR%s}"
t1=$(now) c1=$(ticks) a1=$(admitted) e1=$(cut -d' ' -f2 "$counts")
record updates "$t0" "$t1" $((e1 - e0)) "$c0" "$c1"
record admitted-streams "$t0" "$t1" "$(awk -v a="$a0" -v b="$a1" 'BEGIN{print b - a}')" "$c0" "$c1"
for _ in $(seq 1 300); do [ "$(cut -d' ' -f4 "$counts")" = "$STREAMS" ] && break; sleep 0.1; done
log "streams (opened events pings ended failed): $(cat "$counts")"

log "admit: $ADMIT_RATE a second for $DUR, no stream open"
a0=$(admitted) t0=$(now) c0=$(ticks)
sleep "${DUR%s}"
t1=$(now) c1=$(ticks) a1=$(admitted)
ctl items set "$ITEM" --rate 0.001
record admit "$t0" "$t1" "$(awk -v a="$a0" -v b="$a1" 'BEGIN{print b - a}')" "$c0" "$c1"

echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/measured.txt"
"$BIN/capacity" size -measured "$OUT/measured.txt" -people "$PEOPLE" ${SIZE_ARGS:-} | tee "$OUT/size.md"
log "measured figures, logs and wrk outputs in $OUT"
