#!/usr/bin/env bash
# regroup.sh: pkg/ in layer folders (issue 27). Re-runnable.
#
#   scripts/regroup.sh moves    git mv each old folder to its new place (a
#                               file merged later into an old folder is moved
#                               into the new one)
#   scripts/regroup.sh paths    rewrite every old path to its new one in the
#                               tracked files (Go imports, the Makefile,
#                               docs), and rename the scheduler's package
#   scripts/regroup.sh          both
#
# After a merge of a branch written against the old paths, run
# `scripts/regroup.sh` again (it gofmts what it changed), then build: nothing
# already moved is touched twice (no new path contains an old one).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

# old folder -> new folder. The package names do not change, so only import
# paths do (but for services/scheduler/admission, see rename_scheduler).
MAP=(
	pkg/config:pkg/foundation/config
	pkg/retry:pkg/foundation/retry
	pkg/jsonstr:pkg/foundation/jsonstr
	pkg/testenv:pkg/foundation/testenv
	pkg/token:pkg/security/token
	pkg/bypass:pkg/security/bypass
	pkg/assertion:pkg/security/assertion
	pkg/pow:services/api/pow
	pkg/registration:pkg/domain/registration
	pkg/draw:pkg/domain/draw
	pkg/itempatch:pkg/domain/itempatch
	pkg/pagetemplate:pkg/domain/pagetemplate
	pkg/queue:pkg/store/queue
	pkg/liveness:pkg/store/liveness
	pkg/kclient:pkg/kafka/kclient
	pkg/dlq:pkg/kafka/dlq
	pkg/follow:pkg/kafka/follow
	pkg/itemcache:pkg/kafka/itemcache
	pkg/blocklist:pkg/kafka/blocklist
	pkg/consume:services/consumer/consume
	pkg/httpserver:pkg/web/httpserver
	pkg/view:pkg/redisview/view
	pkg/rebuild:pkg/redisview/rebuild
	pkg/retention:pkg/redisview/retention
	pkg/linesnap:pkg/redisview/linesnap
	pkg/snapshot:pkg/redisview/snapshot
	pkg/steer:pkg/domain/steer
	pkg/sitehealth:pkg/store/sitehealth
	pkg/service:pkg/app/service
	services/scheduler/admission:services/scheduler/promote
)

moves() {
	local pair old new f
	for pair in "${MAP[@]}"; do
		old=${pair%%:*} new=${pair#*:}
		[ -d "$old" ] || continue
		if [ ! -e "$new" ]; then
			mkdir -p "$(dirname "$new")"
			git mv "$old" "$new"
			continue
		fi
		# a file merged into the old folder after the move
		while IFS= read -r f; do
			mkdir -p "$new/$(dirname "${f#"$old"/}")"
			git mv "$f" "$new/${f#"$old"/}"
		done < <(git ls-files "$old")
	done
}

paths() {
	local pair old new expr=()
	for pair in "${MAP[@]}"; do
		old=${pair%%:*} new=${pair#*:}
		expr+=(-e "s#\\b${old}\\b#${new}#g")
	done
	git ls-files -z | grep -zv -e '^scripts/regroup\.sh$' -e '\.rdb$' -e '\.png$' -e '\.ico$' -e '^bin/' |
		xargs -0 grep -lIZ -e 'pkg/' -e 'services/scheduler/admission' 2>/dev/null |
		xargs -0 -r sed -i "${expr[@]}"
	rename_scheduler
	# imports sort by path: the new paths sort elsewhere
	git ls-files -z -m -o --exclude-standard '*.go' | xargs -0 -r gofmt -w
}

# rename_scheduler renames the scheduler's package admission to promote:
# "admission" means an admitted place and its token only (docs/glossary.md).
rename_scheduler() {
	local dir=services/scheduler/promote f
	[ -d "$dir" ] || return 0
	sed -i -e 's/^package admission$/package promote/' -e 's/^package admission_test$/package promote_test/' "$dir"/*.go
	sed -i 's/^\(\t*\)"github.com\/waitroom\/waitroom\/services\/scheduler\/admission"/\1"github.com\/waitroom\/waitroom\/services\/scheduler\/promote"/' "$dir"/*.go
	# every Go file of a folder importing it (a test's message names the type too)
	while IFS= read -r f; do
		sed -i -e 's/\badmission\.\([A-Z]\)/promote.\1/g' "$f"
	done < <(git ls-files '*.go' | xargs grep -l 'waitroom/services/scheduler/promote"' | xargs -r -n1 dirname | sort -u |
		while IFS= read -r d; do git ls-files "$d/*.go"; done || true)
	sed -i 's/\badmission\.\([A-Z]\)/promote.\1/g' "$dir"/*_test.go
}

case "${1:-all}" in
moves) moves ;;
paths) paths ;;
all) moves && paths ;;
*) echo "usage: $0 [moves|paths]" >&2; exit 2 ;;
esac
