#!/usr/bin/env bash
# Installs what the workspace needs on a fresh machine (Node 20 + npm) and builds every package.
# Idempotent: a second run only re-checks. Used by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
want_pnpm=10.34.9
if ! command -v pnpm >/dev/null 2>&1 || [ "$(pnpm --version 2>/dev/null)" != "$want_pnpm" ]; then
  echo "setup: installing pnpm $want_pnpm"
  npm install -g "pnpm@$want_pnpm" >/dev/null
fi
pnpm install --frozen-lockfile
pnpm build
