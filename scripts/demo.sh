#!/usr/bin/env bash
# Quick start, command 1: install, build and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pnpm -s fa demo "$@"
