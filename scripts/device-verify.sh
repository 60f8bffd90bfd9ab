#!/usr/bin/env bash
# Every engine check the H200 machine can make, in as few device calls as possible (device time is
# scarce: about 30 minutes a session). Two stages, each one call:
#   correct  checks, run side by side (they share the GPU; none of them is timed):
#            the CUDA harness and the conformance kit (dense + KV cache, host and device tensors,
#            f32 on FFMA) with the binding fuzz, the KV harness and the sanitizer, context
#            parallelism on one GPU (NCCL with one rank), the WebGPU KV kit on the NVIDIA adapter,
#            the prebuilt addon with the README example, reverse.mjs on cuda in f32 and bf16, the
#            generation example, and `fa run --backend auto` with float32 inputs.
#   timing   benchmarks, one after another on a quiet GPU, peers in the same call:
#            CUDA bf16 and f32 vs torch SDPA, 100K tokens (harness big), decode vs torch, WebGPU decode vs a copy
#            kernel on the same adapter.
# Prepare here (with nvcc), from the repository root:  bash scripts/device-verify.sh --prepare
# Then with the device tool: carry [".fa-device", ".devbin"], command
#   bash scripts/device-verify.sh correct     (or: timing)
# Logs go to $OUT/<stage>.tgz; a summary of each step is printed last.
# The WebGPU decode kernel's variants (issue 12) are a separate call after --prepare, carry
# [".fa-device"]: source .fa-device/on-device.sh && node .fa-device/run/h200-kv.mjs --variants
# (round 4 of those: the same with --variants4 and OUT=$OUT, ~3 minutes)
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  set -e
  pnpm build
  # the shipped addon, rebuilt only when csrc/ or binding.gyp changed since it was made
  (cd packages/cuda && node scripts/prebuild.mjs --check) || pnpm --filter @fa/cuda build:prebuilt
  mkdir -p .devbin
  grep -qx '/.devbin/' .git/info/exclude 2>/dev/null || echo '/.devbin/' >> .git/info/exclude
  (cd packages/cuda &&
    nvcc -std=c++17 -O3 --threads 2 -gencode=arch=compute_90a,code=sm_90a -Icsrc dev/harness.cu csrc/fa_*.cu -o ../../.devbin/harness &&
    nvcc -std=c++17 -O3 --threads 2 -gencode=arch=compute_90a,code=sm_90a -Icsrc dev/kv_harness.cu csrc/fa_*.cu -o ../../.devbin/kv_harness)
  xz -T2 -6 -f .devbin/harness .devbin/kv_harness   # 10 MB each, under 1 MB compressed
  b=packages/cuda/bench
  runs=()
  for f in $b/conformance.mjs $b/fuzz-lib.mjs $b/big.mjs $b/peer_big.py $b/ratio.py $b/peer_f32.py \
           $b/kv-device.mjs $b/peer_decode.py $b/kv-table.mjs $b/prebuilt-check.mjs $b/cp \
           /work/shared/device/peer_sdpa.py packages/webgpu/bench/h200-kv.mjs packages/webgpu/bench/h200-kv-variants.mjs \
           packages/webgpu/bench/h200-kit.mjs \
           packages/autograd/examples/reverse.mjs packages/autograd/examples/generate.mjs; do runs+=(--run "$f"); done
  bash /work/shared/device/prepare.sh --webgpu "${runs[@]}"
  # Node loads only the committed prebuilt addon there (what users install), not build/Release.
  # A relative link, not a copy: the tracked binary travels with the tree anyway (64 MiB in all).
  rm -rf .fa-device/node_modules/@fa/cuda/build .fa-device/node_modules/@fa/cuda/prebuilds
  ln -s ../../../../packages/cuda/prebuilds .fa-device/node_modules/@fa/cuda/prebuilds
  du -sh .fa-device .devbin
  exit 0
fi

stage=${1:?usage: device-verify.sh correct|timing}
OUT=${OUT:-/tmp/fa-out}; mkdir -p "$OUT"
LOGS=/tmp/fa-logs-$stage; rm -rf "$LOGS"; mkdir -p "$LOGS/webgpu"
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
source .fa-device/on-device.sh >/dev/null
R=.fa-device/run
# device-run.sh and kv-device-run.sh look for their harness binaries where the notes build them
mkdir -p packages/cuda/.devbin && for h in harness kv_harness; do xz -dc .devbin/$h.xz > packages/cuda/.devbin/$h; chmod +x packages/cuda/.devbin/$h; done
fa() { node .fa-device/node_modules/@fa/demo/dist/cli.js "$@"; }

fa_run_auto() {
  python3 - <<'PY'
import numpy as np, os
rng = np.random.default_rng(7)
os.makedirs('/tmp/fa-run', exist_ok=True)
for n in ('q', 'k', 'v', 'do'):
    np.save(f'/tmp/fa-run/{n}.npy', (rng.standard_normal((2, 300, 4, 48)) * 0.5).astype(np.float32))
PY
  fa run --backend auto --q /tmp/fa-run/q.npy --k /tmp/fa-run/k.npy --v /tmp/fa-run/v.npy --dout /tmp/fa-run/do.npy --causal --out /tmp/fa-run/res
  echo "fa run exit $?"; ls /tmp/fa-run/res
  python3 - <<'PY'
import numpy as np
d = '/tmp/fa-run'
q, k, v, do = (np.load(f'{d}/{n}.npy').astype(np.float64) for n in ('q', 'k', 'v', 'do'))
out = np.load(f'{d}/res/out.npy')
s = np.einsum('bihd,bjhd->bhij', q, k) / np.sqrt(q.shape[-1])
s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
ref = np.einsum('bhij,bjhd->bihd', p, v)
print('fa run auto f32: out rel err vs numpy float64 = %.2e' % (np.linalg.norm(out - ref) / np.linalg.norm(ref)))
PY
}

export -f fa fa_run_auto
step() { # name timeout command...: runs in the background, log in $LOGS/name.log
  local name=$1 t=$2; shift 2
  ( s=$SECONDS; timeout -k 5 "$t" "$@" > "$LOGS/$name.log" 2>&1; echo "[$name: exit $?, $((SECONDS - s)) s]" >> "$LOGS/$name.log" ) &
}

case $stage in
  correct)
    step cuda 500 env LOGS="$LOGS/cuda" bash packages/cuda/bench/device-run.sh test conf
    step kv 500 env LOGS="$LOGS/kv" OUT="$LOGS/kv-packed" DEADLINE=480 bash packages/cuda/bench/kv-device-run.sh test sanitize node
    step cp 500 node $R/cp/single.mjs
    step webgpu-kv 500 env OUT="$LOGS/webgpu" FA_BENCH_SKIP=decode node $R/h200-kv.mjs
    step prebuilt 500 env OUT="$LOGS" node $R/prebuilt-check.mjs
    step reverse-f32 300 node $R/reverse.mjs --backend cuda
    step reverse-bf16 300 node $R/reverse.mjs --backend cuda --dtype bf16
    step generate 300 node $R/generate.mjs --backend cuda
    step fa-run 200 bash -c fa_run_auto
    for k in 0 1 2 3; do step webgpu-kit-$k 400 env OUT="$LOGS/webgpu" FA_KIT_SHARD=$k/4 node $R/h200-kit.mjs; done
    wait
    ;;
  timing)
    # one at a time, on a quiet GPU
    step cuda 280 env LOGS="$LOGS/cuda" bash packages/cuda/bench/device-run.sh bench32 peers32 bench peers; wait
    step big 150 packages/cuda/.devbin/harness big; wait   # one head at 25K / 50K / 100K tokens: time and extra memory
    step kv 200 env LOGS="$LOGS/kv" OUT="$LOGS/kv-packed" DEADLINE=190 bash packages/cuda/bench/kv-device-run.sh bench peers; wait
    step webgpu-kv 100 env OUT="$LOGS/webgpu" FA_BENCH_SKIP=kit node $R/h200-kv.mjs; wait
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
tar czf "$OUT/$stage.tgz" -C "$LOGS" .
for f in "$LOGS"/*.log; do echo "=== $(basename "$f")"; grep -vE '^(ok|PASS) ' "$f" | tail -14; done
