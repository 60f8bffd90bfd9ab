#!/usr/bin/env bash
# On the GPU machine, from the repository root, with .fa-device/ and packages/cuda/.devbin/
# carried (see KERNEL_NOTES.md, "Running on the H200"). Steps: variants, tests, conformance,
# 100K, benchmark, peers (same run), ratio table. Logs and JSON go to $OUT.
#   bash packages/cuda/bench/device-run.sh [variants] [test] [conf] [big] [bench] [peers]
set -uo pipefail
OUT=${OUT:-/tmp/fa-out}; mkdir -p "$OUT"
H=packages/cuda/.devbin/harness
steps=${*:-variants test conf big bench peers}
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
source .fa-device/on-device.sh >/dev/null
has variants && { $H variants 2>&1 | tee "$OUT/variants.log" | grep -v -E "chk[12] .* ok$"; }
# a variant that fails its checks is switched off for the rest of the run (and reported)
if grep -q "^BW wgmma bwd.*FAIL" "$OUT/variants.log" 2>/dev/null; then export FA_CUDA_NO_WGMMA_BWD=1; echo "wgmma backward FAILED its checks: FA_CUDA_NO_WGMMA_BWD=1"; fi
if grep -qE "^W(10|12) wgmma.*FAIL" "$OUT/variants.log" 2>/dev/null; then export FA_CUDA_NO_WGMMA=1; echo "wgmma forward FAILED its checks: FA_CUDA_NO_WGMMA=1"; fi
has test && { $H test big 2>&1 | tee "$OUT/harness.log" | grep -E "FAIL|failed|big:"; }
has conf && { node .fa-device/run/conformance.mjs 2>&1 | tee "$OUT/conformance.log" | tail -25; }
has big && node .fa-device/run/big.mjs 2>&1 | tail -3
has bench && { $H bench --json "$OUT/ours.json" > "$OUT/bench.log" 2>&1; tail -26 "$OUT/bench.log"; }
if has peers; then
  PYTHONUNBUFFERED=1 python3 .fa-device/run/peer_sdpa.py --json "$OUT/peers.json" > "$OUT/peers.log" 2>&1 || tail -5 "$OUT/peers.log"
  PYTHONUNBUFFERED=1 python3 .fa-device/run/peer_big.py 2>&1 | tee "$OUT/peer_big.log"
  python3 .fa-device/run/ratio.py "$OUT/ours.json" "$OUT/peers.json" | tee "$OUT/table.md"
fi
