#!/usr/bin/env bash
# KV-cache (issue 12) steps for one GPU session, from the repository root, with .fa-device/
# (prepare.sh --run packages/cuda/bench/{kv-device.mjs,fuzz-lib.mjs,peer_decode.py,kv-table.mjs})
# and packages/cuda/.devbin/kv_harness (dev/kv_harness.cu built with nvcc) sent along
# (KERNEL_NOTES.md, "Running the KV-cache session"). Steps, in the order given:
#   test      harness: every case in bf16, f16 and f32, head dims 1..256, the small configs, guard
#   sanitize  compute-sanitizer memcheck over the small cases (both kernels, every load width)
#   node      the kit's KV cases on cuda (host and device tensors; 0 skipped is the goal), the
#             binding fuzz on the GPU, device/host index mismatches, Node timing (bf16 and f32)
#   bench     decode timing (bf16 D 128 on the tensor cores; f32 D 128 and bf16 D 100 on FFMA)
#   peers     torch SDPA decode peers, same run (bf16: flash, cuDNN; f32: efficient, math)
#   variants  tile variants, each checked then timed (not in the default list)
# Logs and JSON go to $LOGS, packed into $OUT/kv-results.tgz; the tables come last. Each step is
# bounded, and a step is skipped once the run has used DEADLINE seconds (default 540).
#   bash packages/cuda/bench/kv-device-run.sh [test] [sanitize] [node] [bench] [peers] [variants]
set -uo pipefail
OUT=${OUT:-/tmp/fa-out}; mkdir -p "$OUT"
LOGS=${LOGS:-/tmp/fa-kv-logs}; mkdir -p "$LOGS"
DEADLINE=${DEADLINE:-540}
H=${KV_HARNESS:-packages/cuda/.devbin/kv_harness}
R=.fa-device/run
steps=${*:-test sanitize node bench peers}
to() { local s=$1; shift; timeout -k 5 "$s" "$@"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
source .fa-device/on-device.sh >/dev/null
export PYTHONUNBUFFERED=1
for s in $steps; do
  if [ "$SECONDS" -ge "$DEADLINE" ]; then echo "[$s: skipped, $SECONDS s used]"; continue; fi
  t0=$SECONDS
  case $s in
    test) to 180 $H test guard > "$LOGS/kv_test.log" 2>&1; echo "harness test exit $?"
          grep -E "FAIL|failed|guard|CUDA error|^device" "$LOGS/kv_test.log" | head -40
          echo "checks: $(grep -cE '\| (ok|FAIL)$' "$LOGS/kv_test.log") (f32 $(grep -E '\| (ok|FAIL)$' "$LOGS/kv_test.log" | grep -c ' f32 '), ffma $(grep -E '\| (ok|FAIL)$' "$LOGS/kv_test.log" | grep -c ' ffma '))" ;;
    sanitize) to 120 compute-sanitizer --tool memcheck $H small > "$LOGS/kv_sanitize.log" 2>&1; echo "sanitizer exit $?"; tail -3 "$LOGS/kv_sanitize.log" ;;
    node) OUT=$LOGS to 180 node $R/kv-device.mjs > "$LOGS/kv_node.log" 2>&1; echo "node exit $?"; grep -vE "^ok  " "$LOGS/kv_node.log" | tail -30 ;;
    bench) to 120 $H bench --json "$LOGS/kv_bench.json" > "$LOGS/kv_bench.log" 2>&1; echo "bench exit $?"; grep -E "^(bf16|f32|f16) " "$LOGS/kv_bench.log" | tail -30 ;;
    peers) to 90 python3 $R/peer_decode.py --json "$LOGS/peers_decode.json" > "$LOGS/peers_decode.log" 2>&1; echo "peers exit $?"; grep -c '"us"' "$LOGS/peers_decode.log" ;;
    variants) to 120 $H variants > "$LOGS/kv_variants.log" 2>&1; echo "variants exit $?"; grep -vE "chk[12] .* ok$" "$LOGS/kv_variants.log" | tail -16 ;;
    *) echo "kv-device-run: unknown step $s" ;;
  esac
  echo "[$s: $((SECONDS - t0)) s]"
done
node $R/kv-table.mjs "$LOGS" | tee "$LOGS/kv_table.md"
(cd "$LOGS" && tar czf "$OUT/kv-results.tgz" .) && echo "logs: kv-results.tgz ($(ls "$LOGS" | wc -l) files)"
