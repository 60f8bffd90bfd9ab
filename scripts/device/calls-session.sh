#!/usr/bin/env bash
# One device call for issues 24/25 (calls at kernel speed, model code on the engine), from the
# repository root on the GPU machine with .fa-device/ sent along. Prepared with
#   pnpm build && node packages/webgpu/bench/pack-tfjs.mjs /tmp/tfjs.bundle.mjs &&
#   ../shared/device/prepare.sh --webgpu --run packages/cuda/bench/{host-cost,kv-stream-device,conformance,fuzz-lib}.mjs \
#     --run packages/cuda/bench/peer_decode_stream.py --run packages/webgpu/bench/{per-call,gemm,train-gpt}.mjs --run /tmp/tfjs.bundle.mjs &&
#   bash scripts/device/slim.sh   (the call carries at most 64 MiB with the tracked tree)
# Steps (default all): hostcost kv peer kit webgpu-calls gemm train. "inline" variants run with
# FA_CUDA_STREAM_INLINE=1 beside the default. Each step is bounded; after DEADLINE s the rest is
# skipped. Everything lands in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/fa-out}; mkdir -p "$OUT"
DEADLINE=${DEADLINE:-560}
steps=${*:-hostcost kv peer kit webgpu-calls gemm train}
source .fa-device/on-device.sh >/dev/null 2>&1
export PYTHONUNBUFFERED=1
R=.fa-device/run
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
to() { local s=$1; shift; timeout -k 5 "$s" "$@"; }
for s in $steps; do
  if [ "$SECONDS" -ge "$DEADLINE" ]; then echo "[$s: skipped at $SECONDS s]"; continue; fi
  t0=$SECONDS
  case $s in
    hostcost) to 60 node $R/host-cost.mjs --n 3000 > "$OUT/host-cost-default.md" 2>&1
              FA_CUDA_STREAM_INLINE=1 to 60 node $R/host-cost.mjs --n 3000 > "$OUT/host-cost-inline.md" 2>&1
              paste -d' ' "$OUT/host-cost-default.md" <(cut -d'|' -f3 "$OUT/host-cost-inline.md" | sed 's/$/ |/') ;;
    kv) (cd $R && OUT=$OUT to 120 node kv-stream-device.mjs) > "$OUT/kv-default.log" 2>&1; cp "$OUT/kv-stream-device.md" "$OUT/kv-default.md" 2>/dev/null; tail -7 "$OUT/kv-default.log"
        (cd $R && OUT=$OUT FA_CUDA_STREAM_INLINE=1 to 120 node kv-stream-device.mjs) > "$OUT/kv-inline.log" 2>&1; cp "$OUT/kv-stream-device.md" "$OUT/kv-inline.md" 2>/dev/null; cat "$OUT/kv-inline.log" | tail -12 ;;
    peer) to 120 python3 $R/peer_decode_stream.py > "$OUT/peer-decode.md" 2>&1; cat "$OUT/peer-decode.md" ;;
    kit) (cd $R && LOGS=$OUT FA_CUDA_STREAM_INLINE=1 to 200 node conformance.mjs) > "$OUT/kit-inline.log" 2>&1; grep -v "^FAIL" "$OUT/kit-inline.log" | tail -8; grep -c "^FAIL" "$OUT/kit-inline.log" ;;
    webgpu-calls) (cd $R && to 120 node per-call.mjs) > "$OUT/webgpu-per-call.md" 2>&1; tail -30 "$OUT/webgpu-per-call.md" ;;
    gemm) (cd $R && to 90 node gemm.mjs) > "$OUT/webgpu-gemm.md" 2>&1; tail -14 "$OUT/webgpu-gemm.md" ;;
    train) (cd $R && to 150 node train-gpt.mjs) > "$OUT/webgpu-train.md" 2>&1; tail -14 "$OUT/webgpu-train.md" ;;
    *) echo "unknown step $s" ;;
  esac
  echo "[$s: $((SECONDS - t0)) s]"
done
