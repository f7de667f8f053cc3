#!/usr/bin/env bash
# The replay can fail: a Dockerfile that forgets one workspace module's go.mod
# (the bug issue 10 found) must fail at its download step, naming the module.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/replay-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
grep -v '^COPY services/notifier/go.mod' "$here/../deploy/compose/Dockerfile" >"$tmp/Dockerfile"
if "$here/dockerfile-replay.sh" "$tmp/Dockerfile" >"$tmp/out" 2>&1; then
  echo "FAIL dockerfile-replay passed a Dockerfile without services/notifier/go.mod"; cat "$tmp/out"
  echo "dockerfile-replay: 0 passed, 1 failed"; exit 1
fi
if ! grep -q 'services/notifier' "$tmp/out"; then
  echo "FAIL the failure does not name services/notifier:"; cat "$tmp/out"
  echo "dockerfile-replay: 0 passed, 1 failed"; exit 1
fi
echo "ok   a Dockerfile missing a module's go.mod fails the replay: $(grep -m1 'services/notifier' "$tmp/out")"
echo "dockerfile-replay: 1 passed, 0 failed"
