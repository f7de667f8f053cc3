#!/usr/bin/env bash
# scripts/npm-deps.sh: install the npm packages the tests use, pinned by each
# folder's package-lock.json (`npm ci`), only where node_modules does not
# already hold exactly the locked versions, so a machine that has installed
# them once runs the tests offline. Folders: services/dev/stack/testdata/axe
# (axe-core, injected into Chromium by the accessibility browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=(services/dev/stack/testdata/axe)

# current DIR: every package of DIR's lock is installed at its locked version.
current() {
  node -e '
    const fs = require("fs"), path = require("path"), dir = process.argv[1];
    const lock = JSON.parse(fs.readFileSync(path.join(dir, "package-lock.json"), "utf8"));
    for (const [p, v] of Object.entries(lock.packages || {})) {
      if (!p) continue;
      let got;
      try { got = JSON.parse(fs.readFileSync(path.join(dir, p, "package.json"), "utf8")).version; } catch { process.exit(1); }
      if (got !== v.version) process.exit(1);
    }' "$1"
}

for d in "${dirs[@]}"; do
  if current "$d"; then
    echo "npm deps: ok ($d)"
    continue
  fi
  echo "npm deps: installing $d (npm ci)"
  (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
  current "$d" || { echo "npm deps: $d still differs from its package-lock.json after npm ci" >&2; exit 1; }
done
