#!/usr/bin/env bash
# scripts/dockerfile-replay.sh [Dockerfile]: prove the image builds from
# exactly what it copies, without a Docker engine. It reads the build stage of
# deploy/compose/Dockerfile (up to the second FROM) and replays it in an empty
# temp dir: WORKDIR and ENV as written, each COPY from the repo (globs as
# BuildKit expands them: a pattern matching nothing is skipped), each RUN with
# bash and this machine's Go toolchain. Absolute paths the RUN lines write to
# (the WORKDIR, and what the final stage copies --from the build stage, /out)
# are mapped into the temp dir; RUN flags (--mount=type=cache) are dropped.
# Then it checks every binary the final stage copies was built.
#
# It uses this machine's module cache (GOMODCACHE) and build cache (GOCACHE),
# as the image's cache mounts would: warm, it takes about 15 s (mostly the
# five links). Cold it costs what a first image build costs: the builds
# compile every package again (CGO_ENABLED=0 and -trimpath share nothing with
# the tests' cache), measured at 6 min on a 2-core machine busy with other
# builds (load 14), less when idle; with an empty module cache as well, the
# downloads (about 500 MB) come on top. CI runs on the session's machine, so
# its caches are normally warm.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dockerfile=${1:-$root/deploy/compose/Dockerfile}
log() { echo "replay: $*" >&2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dockerfile-replay.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Join continuation lines, drop comments and blank lines.
mapfile -t lines < <(sed -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' "$dockerfile" |
  sed -e ':a' -e '/\\$/{N;s/\\\n/ /;ba' -e '}')

# Stage 1 is what we replay; from stage 2 we only read what it copies out of it.
stage=0 build=() outs=()
for l in "${lines[@]}"; do
  read -r instr rest <<<"$l"
  case ${instr^^} in
  FROM) stage=$((stage + 1)); [ $stage = 1 ] && log "build stage: $rest (here: $(go version))"; continue ;;
  esac
  if [ $stage = 1 ]; then
    build+=("$l")
  elif [ "${instr^^}" = COPY ] && [[ $rest == --from=* ]]; then
    read -r _ src _ <<<"$rest"
    outs+=("$src")
  fi
done
[ ${#build[@]} -gt 0 ] || { log "no build stage in $dockerfile"; exit 1; }

workdir=/ env_exports=()
# map PATH: an absolute path of the image as a path under $tmp.
map() {
  local p=$1
  case $p in /*) echo "$tmp/root$p" ;; *) echo "$tmp/root$workdir/$p" ;; esac
}
rewrite() { # the absolute paths of a RUN line that we map
  local s=$1 o
  for o in "${outs[@]}"; do s=${s//" ${o%/}"/" $tmp/root${o%/}"}; done
  echo "$s"
}

for l in "${build[@]}"; do
  read -r instr rest <<<"$l"
  case ${instr^^} in
  WORKDIR)
    workdir=$rest
    mkdir -p "$(map "$workdir")"
    ;;
  ENV)
    for kv in $rest; do env_exports+=("$kv"); done
    ;;
  ARG) ;;
  COPY)
    read -r -a args <<<"$rest"
    [[ ${args[0]} == --* ]] && { log "unsupported COPY flag: $l"; exit 1; }
    dest=${args[-1]}
    unset 'args[-1]'
    target=$(map "$dest")
    n=0
    for pat in "${args[@]}"; do
      shopt -s nullglob
      # shellcheck disable=SC2206 # the pattern is a glob on purpose
      matches=($(cd "$root" && echo $pat))
      shopt -u nullglob
      [[ $pat == *[\[*?]* ]] || [ ${#matches[@]} -gt 0 ] || { log "COPY $pat: no such file in the repo"; exit 1; }
      for m in "${matches[@]}"; do
        n=$((n + 1))
        if [ -d "$root/$m" ]; then
          mkdir -p "$target" && cp -a "$root/$m/." "$target/"
        elif [[ $dest == */ ]] || [ ${#args[@]} -gt 1 ]; then
          mkdir -p "$target" && cp -a "$root/$m" "$target/"
        else
          mkdir -p "$(dirname "$target")" && cp -a "$root/$m" "$target"
        fi
      done
    done
    [ $n -gt 0 ] || { log "COPY $rest: nothing matched"; exit 1; }
    log "COPY $rest"
    ;;
  RUN)
    cmd=$rest
    while [[ $cmd == --* ]]; do cmd=${cmd#* }; done
    cmd=$(rewrite "$cmd")
    log "RUN $cmd"
    (cd "$(map "$workdir")" && env GOTOOLCHAIN=local "${env_exports[@]}" bash -c "$cmd")
    ;;
  *)
    log "unsupported instruction in the build stage: $l"
    exit 1
    ;;
  esac
done

# What the final stage copies out must exist: for /out/ each binary built there.
for o in "${outs[@]}"; do
  [ -e "$tmp/root$o" ] || { log "the final stage copies $o, which the build did not make"; exit 1; }
done
built=$(cd "$tmp/root/out" 2>/dev/null && ls)
log "built: $(echo $built)"
for b in $built; do [ -x "$tmp/root/out/$b" ] || { log "$b is not executable"; exit 1; }; done
echo "dockerfile-replay: ok: the build stage of ${dockerfile#"$root"/} builds $(echo $built) from what it copies"
