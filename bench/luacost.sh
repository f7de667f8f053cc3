#!/usr/bin/env bash
# bench/luacost.sh: redis-server's script time per registration and per
# admitted person (BenchmarkLuaPerRegistration, BenchmarkLuaPerAdmission in
# pkg/store/queue), on this tree and on a base commit in the same run, alternating.
# The base tree is `git archive BASE` with this tree's bench_test.go copied
# in (the benchmarks use only queue.Line's methods, so they run on either).
#
# Knobs (environment): BASE (the commit to compare with, d91cedc: the tree
# before a one-call chunk went without MULTI), ROUNDS (3), BENCHTIME (1s for
# the registrations; the admissions always run 150 ticks), OUT (where the
# outputs go: a temp dir).
#
#   bench/luacost.sh              # ~2 min
#   ROUNDS=1 BASE=HEAD~1 bench/luacost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-d91cedc}
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-1s}
OUT=${OUT:-$(mktemp -d /tmp/luacost.XXXXXX)}
base=$OUT/base
mkdir -p "$base"
git archive "$BASE" | tar -x -C "$base"
# A base from before pkg/ was regrouped (scripts/regroup.sh) has the line in
# pkg/queue: the benchmark goes there, its imports mapped back to the old paths.
qdir() { if [ -d "$1/pkg/store/queue" ]; then echo store/queue; else echo queue; fi; }
if [ "$(qdir "$base")" = store/queue ]; then
	cp pkg/store/queue/bench_test.go "$base/pkg/store/queue/bench_test.go"
else
	back=()
	while IFS=: read -r old new; do back+=(-e "s#\\b${new}\\b#${old}#g"); done < <(sed -n 's/^\t\(pkg\/[a-z]*\):\(pkg\/[a-z]*\/[a-z]*\)$/\1:\2/p' scripts/regroup.sh)
	sed "${back[@]}" pkg/store/queue/bench_test.go >"$base/pkg/queue/bench_test.go"
fi
echo "outputs in $OUT; base $BASE ($(git rev-parse --short "$BASE")), head $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
run() { # tree name round
	local q
	q=$(qdir "$1") # before the cd: "$1" may be relative (the head is .)
	(cd "$1/pkg" && go test -run '^$' -bench 'LuaPerRegistration' -benchtime "$BENCHTIME" -count 1 -v "./$q/" &&
		go test -run '^$' -bench 'LuaPerAdmission' -benchtime 150x -count 1 -v "./$q/") >"$OUT/$2-$3.txt" 2>&1
	grep -E '^Benchmark.*(lua|cpu)-µs' "$OUT/$2-$3.txt" |
		awk -v who="$2" -v r="$3" '{ for (i = 3; i < NF; i++) if ($(i+1) ~ /-µs\//) m = m " " $i " " $(i+1); print who, r, $1, m; m = "" }'
}
for r in $(seq 1 "$ROUNDS"); do
	run "$base" base "$r"
	run . head "$r"
done
