#!/usr/bin/env bash
# Tests of scripts/test-deps.sh: it runs with a PATH holding only fakes (id,
# apt-get, sudo) and a list naming a command that exists nowhere, as root and
# as a fake non-root, with and without apt-get.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$here/test-deps.sh
bash=$(command -v bash)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-deps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

list=$tmp/deps.list
cat >"$list" <<'L'
# a comment line
waitroom-fake-tool   waitroom-fake-pkg   # nothing provides it until the fake apt-get runs
L

# fakes NAME...: a fresh bin dir with the named fakes; prints its path.
fakes() {
  local d
  d=$(mktemp -d "$tmp/bin.XXXXXX")
  for f in "$@"; do
    case $f in
    id-root) printf '#!%s\necho 0\n' "$bash" >"$d/id" ;;
    id-user) printf '#!%s\necho 1000\n' "$bash" >"$d/id" ;;
    sudo) printf '#!%s\necho "sudo $*" >>"%s/calls"\n' "$bash" "$d" >"$d/sudo" ;;
    apt-get) # records its calls; "install" provides the fake tool (when $d/provides exists)
      printf '#!%s\necho "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >>"%s/calls"\nif [ "$1" = install ] && [ -e "%s/provides" ]; then printf "#!%s\\n" >"%s/waitroom-fake-tool"; %s +x "%s/waitroom-fake-tool"; fi\n' \
        "$bash" "$d" "$d" "$bash" "$d" "$(command -v chmod)" "$d" >"$d/apt-get" ;;
    esac
  done
  chmod +x "$d"/* 2>/dev/null
  echo "$d"
}

# run BIN: the script under PATH=BIN; sets out, err, rc.
run() {
  PATH=$1 TEST_DEPS_LIST=$list "$bash" "$script" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out=$(<"$tmp/out") err=$(<"$tmp/err")
}

check() { # check NAME CONDITION-RESULT(0/1) DETAIL
  if [ "$2" = 0 ]; then
    passed=$((passed + 1)); echo "ok   $1"
  else
    failed=$((failed + 1)); echo "FAIL $1: $3"; echo "  rc=$rc"; echo "  stdout: $out"; echo "  stderr: $err"
  fi
}
lines() { [ -z "$1" ] && echo 0 || printf '%s\n' "$1" | wc -l; }

# 1. not root, apt-get and sudo: one line with the sudo command, nothing run.
b=$(fakes id-user apt-get sudo)
run "$b"
[ "$rc" = 1 ] && [ -z "$out" ] && [ "$(lines "$err")" = 1 ] &&
  [ "$err" = "deps: missing waitroom-fake-tool; run: sudo apt-get update && sudo apt-get install -y waitroom-fake-pkg" ] &&
  [ ! -e "$b/calls" ]
check "non-root with sudo: stops with one line naming the sudo command" $? "want rc 1, one exact line, no apt-get/sudo call"

# 2. not root, no sudo: the command to run as root.
b=$(fakes id-user apt-get)
run "$b"
[ "$rc" = 1 ] && [ "$(lines "$err")" = 1 ] &&
  [ "$err" = "deps: missing waitroom-fake-tool; run as root: apt-get update && apt-get install -y waitroom-fake-pkg" ] &&
  [ ! -e "$b/calls" ]
check "non-root without sudo: one line naming the root command" $? "want rc 1 and the root command"

# 3. no apt-get at all (even as root): one line, names the package.
b=$(fakes id-root)
run "$b"
[ "$rc" = 1 ] && [ "$(lines "$err")" = 1 ] && [[ $err == *"no apt-get here"*"waitroom-fake-pkg"* ]]
check "no apt-get: one line naming the package" $? "want rc 1 and one line"

# 4. root with apt-get: says what it installs, update before install, then ok.
b=$(fakes id-root apt-get)
: >"$b/provides"
run "$b"
calls=$(<"$b/calls")
[ "$rc" = 0 ] && [[ $out == *"deps: installing waitroom-fake-pkg with apt-get"* ]] &&
  [ "$calls" = $'apt-get update -qq DEBIAN_FRONTEND=noninteractive\napt-get install -y -qq waitroom-fake-pkg DEBIAN_FRONTEND=noninteractive' ]
check "root: apt-get update then install -y of the missing package" $? "calls: $calls"

# 5. root, but the package does not provide the command: fails, says so.
b=$(fakes id-root apt-get)
run "$b"
[ "$rc" = 1 ] && [[ $err == *"waitroom-fake-tool is still not on PATH"* ]]
check "root: a package that does not provide the command fails" $? "want rc 1"

# 6. everything present: ok, nothing installed.
b=$(fakes id-user apt-get)
printf '#!%s\n' "$bash" >"$b/waitroom-fake-tool"; chmod +x "$b/waitroom-fake-tool"
run "$b"
[ "$rc" = 0 ] && [ "$out" = "deps: ok (waitroom-fake-tool)" ] && [ ! -e "$b/calls" ]
check "all present: ok, no apt-get" $? "want rc 0"

# 7. the real list parses (no "no package" error); with PATH holding every
#    listed command as a fake, it reports them all present.
b=$(fakes id-user)
while read -r c _; do case $c in '' | '#'*) continue ;; esac; printf '#!%s\n' "$bash" >"$b/$c"; chmod +x "$b/$c"; done <"$here/test-deps.list"
PATH=$b "$bash" "$script" "$here/test-deps.list" >"$tmp/out" 2>"$tmp/err"; rc=$?; out=$(<"$tmp/out") err=$(<"$tmp/err")
[ "$rc" = 0 ] && [[ $out == "deps: ok (redis-server redis-cli chromium"* ]]
check "scripts/test-deps.list parses" $? "want rc 0"

echo "test-deps: $passed passed, $failed failed"
[ "$failed" = 0 ]
