#!/usr/bin/env bash
# Quick start, command 2: install everything the tests need (a software Vulkan driver and
# Chromium for the WebGPU tests, nvcc-built CUDA kernels where nvcc exists), build, type-check
# and run every test of every package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-webgpu.sh
# shellcheck disable=SC1091
source "${FA_VULKAN_DIR:-/opt/fa-vulkan}/env.sh"
bash scripts/setup.sh
pnpm lint
pnpm test
