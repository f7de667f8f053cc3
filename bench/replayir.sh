#!/usr/bin/env bash
# bench/replayir.sh: redis-server's instructions a registration replayed
# through enqueue.lua (Line.Replay, the rebuild's and, in calls of 40, the
# consumer's path), counted by valgrind's callgrind, on this tree and on a
# base commit. Instruction counts do not depend on the machine's load, unlike
# INFO commandstats' usec (bench/luacost.sh): the measure of a script change
# on a busy machine. Each case starts its own redis-server under callgrind
# (--hz 1: less of serverCron's background in the counts), runs
# TestCallgrindReplay (pkg/store/queue/callgrind_test.go, copied into the
# base tree) and prints the instructions of 40 calls over their records.
#
# Knobs (environment): BASE (6c04ad9: before the column-wise arguments),
# PORT (24001), CASES ("250:named 250:anon 40:named 40:anon 40:repeat
# 250:repeat"), OUT (a temp dir). Needs valgrind (apt-get install valgrind).
#
#   bench/replayir.sh            # ~3 min
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-6c04ad9}
PORT=${PORT:-24001}
CASES=${CASES:-250:named 250:anon 40:named 40:anon 40:repeat 250:repeat}
OUT=${OUT:-$(mktemp -d /tmp/replayir.XXXXXX)}
mkdir -p "$OUT/base"
git archive "$BASE" | tar -x -C "$OUT/base"
cp pkg/store/queue/callgrind_test.go "$OUT/base/pkg/store/queue/"
(cd "$OUT/base/pkg" && go test -c -o "$OUT/base.test" ./store/queue/)
(cd pkg && go test -c -o "$OUT/head.test" ./store/queue/)
echo "outputs in $OUT; base $BASE, head $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
one() { # tree batch kind
	local tag=$1-$2-$3 pid a b
	valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$tag.%p" redis-server --port "$PORT" --bind 127.0.0.1 \
		--save '' --appendonly no --hz 1 >"$OUT/$tag.valgrind.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.3; done
	WR_CALLGRIND_ADDR=127.0.0.1:$PORT WR_CALLGRIND_PID=$pid WR_CALLGRIND_BATCH=$2 \
		WR_CALLGRIND_NAMED=$([ "$3" = named ] && echo 1 || true) WR_CALLGRIND_REPEAT=$([ "$3" = repeat ] && echo 1 || true) \
		"$OUT/$1.test" -test.run '^TestCallgrindReplay$' -test.count 1 >"$OUT/$tag.log" 2>&1 || { cat "$OUT/$tag.log"; kill "$pid"; exit 1; }
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	a=$(awk '/^summary:/ {print $2}' "$OUT/cg.$tag.$pid.2")
	b=$(awk '/^summary:/ {print $2}' "$OUT/cg.$tag.$pid.3")
	echo "$1 batch=$2 $3: $(((b - a) / (40 * $2))) instructions/record"
}
for c in $CASES; do
	one base "${c%%:*}" "${c##*:}"
	one head "${c%%:*}" "${c##*:}"
done
