#!/usr/bin/env bash
# Quick start, command 2: install everything the tests need (including a software Vulkan driver
# and Chromium for the WebGPU tests), build, type-check and run every test of every package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f scripts/setup-webgpu.sh ]; then
  # shellcheck disable=SC1091
  source scripts/setup-webgpu.sh
fi
pnpm lint
pnpm test
