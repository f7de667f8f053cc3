#!/bin/sh
# Writes secrets.env, every key the services need, fresh from openssl:
#   ./gen-secrets.sh [file]      (default: secrets.env beside this script)
# It never overwrites a file: a new token or admission key signs out every
# waiting person (README.md, "Rotating the admission key").
set -eu
out=${1:-$(dirname "$0")/secrets.env}
if [ -e "$out" ]; then
	echo "gen-secrets.sh: $out exists; remove it first to make new keys" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The bypass key pair: the schedulers sign codes with the Ed25519 seed, the
# api verifies them with the public half (the last 32 bytes of each DER form).
openssl genpkey -algorithm ed25519 -out "$tmp/bypass.pem"
bypass_seed=$(openssl pkey -in "$tmp/bypass.pem" -outform DER | tail -c 32 | base64)
bypass_pub=$(openssl pkey -in "$tmp/bypass.pem" -pubout -outform DER | tail -c 32 | base64)
umask 077
cat >"$out" <<KEYS
WR_TOKEN_KEY=$(openssl rand -base64 48)
WR_ADMISSION_KEY=$(openssl rand -base64 32)
WR_ADMISSION_KEYS_EXTRA=
WR_POW_KEY=$(openssl rand -base64 48)
WR_ADMIN_TOKEN=$(openssl rand -hex 24)
WR_BYPASS_KEY=$bypass_seed
WR_BYPASS_PUBLIC_KEY=$bypass_pub
WR_DRAW_KEY=$(openssl rand -base64 32)
KEYS
echo "gen-secrets.sh: wrote $out" >&2
