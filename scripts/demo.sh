#!/usr/bin/env bash
# Quick start, command 1: install, build and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
# Without an NVIDIA GPU the CUDA kernels could not run here: skip their (minutes-long) compile so
# the demo starts sooner. scripts/test.sh compiles them, since CI checks that they build.
if [ -z "${FA_SKIP_CUDA:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: no NVIDIA GPU found; building without the CUDA kernels (FA_SKIP_CUDA=1)"
  export FA_SKIP_CUDA=1
fi
bash scripts/setup.sh
pnpm -s fa demo "$@"
