#!/usr/bin/env bash
# The Go kit as a shop gets it: kit/go/waitroomkit copied out of the repo and
# built, vetted and tested with no workspace (GOWORK=off), no network
# (GOPROXY=off: only the module cache) and the toolchain at hand. It must be
# one module with no replace, on the previous Go release's go line, and its
# go.mod and go.sum must already be tidy (the run may not change them).
# A cold module cache fails with "module lookup disabled": fill it once with
#   (cd kit/go/waitroomkit && GOWORK=off go mod download)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kit=$root/kit/go/waitroomkit
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kit-outside.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

if grep -q '^replace\|^[[:space:]]*replace[[:space:]]' "$kit/go.mod"; then
  fail "kit/go/waitroomkit/go.mod has a replace: a shop's build cannot follow it"
else
  ok "no replace in the kit's go.mod"
fi
goline=$(awk '$1 == "go" {print $2}' "$kit/go.mod")
case $goline in
1.25 | 1.25.*) ok "go line $goline (the previous Go release: a shop is not forced onto the newest)" ;;
*) fail "go line $goline, want 1.25" ;;
esac
[ ! -e "$root/kit/go/waitroomgin/go.mod" ] && ok "waitroomgin is a package of the kit's module, not a module of its own" ||
  fail "kit/go/waitroomgin/go.mod exists: a second module needs a replace or a published version"

cp -r "$kit" "$tmp/waitroomkit"
cd "$tmp/waitroomkit" || exit 1
export GOWORK=off GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
if out=$(go vet ./... 2>&1 && go test -count=1 ./... 2>&1); then
  ok "outside the workspace, from the module cache only: $(echo "$out" | grep -c '^ok') packages pass"
  echo "$out" | sed 's/^/     /'
else
  fail "go vet / go test outside the workspace:"; echo "$out"
fi
if cmp -s go.mod "$kit/go.mod" && cmp -s go.sum "$kit/go.sum"; then
  ok "go.mod and go.sum were complete: the build changed neither"
else
  fail "the build changed go.mod or go.sum: run (cd kit/go/waitroomkit && GOWORK=off go mod tidy)"
  diff "$kit/go.mod" go.mod; diff "$kit/go.sum" go.sum | head -20
fi
echo "kit-outside: $passed passed, $failed failed"
[ "$failed" = 0 ]
