#!/usr/bin/env bash
# scripts/test-deps.sh [list]: make sure every command `make test` needs is on
# PATH. The list (default scripts/test-deps.list, or $TEST_DEPS_LIST) has
# lines "command package"; # starts a comment.
#
# - all present: prints one "deps: ok" line, exits 0.
# - some missing, root and apt-get: says what it installs, runs
#   `apt-get update` then `apt-get install -y` of their packages, checks again.
# - some missing otherwise (not root, or no apt-get): prints ONE line naming
#   the exact command to run and exits 1, before any test has started.
#
# Only bash built-ins besides `id -u`, apt-get and sudo, so a test can run it
# with a PATH of fakes (scripts/test-deps_test.sh).
set -euo pipefail

here=${0%/*}; [ "$here" != "$0" ] || here=.
list=${1:-${TEST_DEPS_LIST:-$here/test-deps.list}}
[ -r "$list" ] || { echo "deps: cannot read $list" >&2; exit 2; }

missing_cmds=() missing_pkgs=() all=()
while read -r cmd pkg _; do
  case "$cmd" in '' | '#'*) continue ;; esac
  [ -n "$pkg" ] && [ "${pkg:0:1}" != '#' ] || { echo "deps: $list: no package for $cmd" >&2; exit 2; }
  all+=("$cmd")
  command -v "$cmd" >/dev/null 2>&1 && continue
  missing_cmds+=("$cmd")
  case " ${missing_pkgs[*]} " in *" $pkg "*) ;; *) missing_pkgs+=("$pkg") ;; esac
done <"$list"

if [ ${#missing_cmds[@]} -eq 0 ]; then
  echo "deps: ok (${all[*]})"
  exit 0
fi

pkgs=${missing_pkgs[*]}
uid=$(id -u 2>/dev/null || echo unknown)
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing ${missing_cmds[*]} and no apt-get here: install them with your package manager (Debian names: $pkgs), then run make test again" >&2
  exit 1
fi
if [ "$uid" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    echo "deps: missing ${missing_cmds[*]}; run: sudo apt-get update && sudo apt-get install -y $pkgs" >&2
  else
    echo "deps: missing ${missing_cmds[*]}; run as root: apt-get update && apt-get install -y $pkgs" >&2
  fi
  exit 1
fi

echo "deps: installing $pkgs with apt-get (missing: ${missing_cmds[*]})"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing_pkgs[@]}" >/dev/null
hash -r
still=()
for cmd in "${missing_cmds[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || still+=("$cmd")
done
if [ ${#still[@]} -gt 0 ]; then
  echo "deps: apt-get installed $pkgs but ${still[*]} is still not on PATH; check scripts/test-deps.list" >&2
  exit 1
fi
echo "deps: installed $pkgs"
