#!/usr/bin/env bash
# Quick start, command 2: install everything the tests need (a software Vulkan driver and
# Chromium for the WebGPU tests, clang-19 for rebuilding @fa/wasm's binaries, nvcc-built CUDA
# kernels where nvcc exists), build, type-check
# and run every test of every package; the last line sums vitest's counts over the packages.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-webgpu.sh
bash scripts/setup-wasm.sh
# shellcheck disable=SC1091
source "${FA_VULKAN_DIR:-/opt/fa-vulkan}/env.sh"
bash scripts/setup.sh
pnpm lint
log=$(mktemp)
status=0
pnpm test 2>&1 | tee "$log" || status=$?
# vitest prints "Tests  N passed | M failed | K skipped (T)" per package (ANSI colours removed here).
sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ':test:\s+Tests\s' | awk '
  { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^skipped/) s += $i } }
  END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }'
rm -f "$log"
exit "$status"
