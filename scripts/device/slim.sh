#!/usr/bin/env bash
# Shrinks .fa-device (after ../shared/device/prepare.sh) so that it and the tracked tree (~27 MB,
# 19 of them @fa/cuda's prebuilt addon) stay within the device call's 64 MiB: Node's binary
# stripped of its symbols (99 → 86 MB, 24 → 22 MB compressed), the demo app left out, and
# @fa/cuda's built addon compressed (on-device.sh decompresses every .xz).
set -euo pipefail
cd "$(dirname "$0")/../../.fa-device"
if [ -f node.xz ] && [ ! -f node.slim ]; then
  xz -dc node.xz > /tmp/fa-node.bin
  strip /tmp/fa-node.bin
  xz -T2 -6 -c /tmp/fa-node.bin > node.xz
  rm -f /tmp/fa-node.bin
  touch node.slim
fi
rm -rf node_modules/@fa/demo
a=node_modules/@fa/cuda/build/Release/fa_cuda.node
[ -f "$a" ] && xz -T2 -6 "$a"
du -sh .
