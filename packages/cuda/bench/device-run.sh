#!/usr/bin/env bash
# On the GPU machine, from the directory holding .fa-device/ and packages/cuda/.devbin/ (see
# KERNEL_NOTES.md, "Running on the H200"). Steps, in the order given:
#   tcrate    f16 vs tf32 wgmma rate (the f32 split's argument)
#   variants  kernel variants, checked then timed
#   test      harness checks (every dtype, f32 on both paths, odd head dims) and the 100K case
#   conf      the conformance kit through Node (host tensors, device tensors, f32 on FFMA), fuzz
#   big       100K through Node
#   bench32   f32 rows (ours); peers32: torch SDPA f32 (efficient, math), same run; ratio table
#   bench     bf16 rows (ours); peers: torch SDPA bf16 (flash, cuDNN), same run; ratio table
# Logs and JSON go to $LOGS (default /tmp/fa-logs), packed into $OUT/results.tgz at the end (the
# device tool returns at most 8 files). Each step is bounded by STEP_TIMEOUT seconds (default 400).
#   bash packages/cuda/bench/device-run.sh [tcrate] [variants] [test] [conf] [big] [bench32] [peers32] [bench] [peers]
set -uo pipefail
OUT=${OUT:-/tmp/fa-out}; mkdir -p "$OUT"
LOGS=${LOGS:-/tmp/fa-logs}; mkdir -p "$LOGS"
STEP_TIMEOUT=${STEP_TIMEOUT:-400}
to() { timeout -k 5 "$STEP_TIMEOUT" "$@"; }
H=packages/cuda/.devbin/harness
steps=${*:-tcrate variants test conf big bench32 peers32 bench peers}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
source .fa-device/on-device.sh >/dev/null
export PYTHONUNBUFFERED=1
for s in $steps; do
  t0=$SECONDS
  case $s in
    tcrate) to $H tcrate 2>&1 | tee "$LOGS/tcrate.log" | grep tcrate ;;
    variants)
      to $H variants 2>&1 | tee "$LOGS/variants.log" | grep -v -E "chk[12] .* ok$"
      # a variant that fails its checks is switched off for the rest of the run (and reported)
      if grep -q "^BW wgmma bwd.*FAIL" "$LOGS/variants.log"; then export FA_CUDA_NO_WGMMA_BWD=1; echo "wgmma backward FAILED its checks: FA_CUDA_NO_WGMMA_BWD=1"; fi
      if grep -qE "^W(10|12) wgmma.*FAIL" "$LOGS/variants.log"; then export FA_CUDA_NO_WGMMA=1; echo "wgmma forward FAILED its checks: FA_CUDA_NO_WGMMA=1"; fi ;;
    test) to $H test big 2>&1 | tee "$LOGS/harness.log" | grep -E "FAIL|failed|big:" ;;
    conf) to node .fa-device/run/conformance.mjs 2>&1 | tee "$LOGS/conformance.log" | grep -v "^FAIL" | tail -12; grep -c "^FAIL" "$LOGS/conformance.log"; grep "^FAIL" "$LOGS/conformance.log" | head -8 ;;
    big) to node .fa-device/run/big.mjs 2>&1 | tail -3 ;;
    bench32) to $H bench32 --json32 "$LOGS/ours_f32.json" > "$LOGS/bench32.log" 2>&1; tail -7 "$LOGS/bench32.log" ;;
    peers32) to python3 .fa-device/run/peer_f32.py --json "$LOGS/peers_f32.json" > "$LOGS/peers_f32.log" 2>&1 || tail -5 "$LOGS/peers_f32.log"
             python3 .fa-device/run/ratio.py "$LOGS/ours_f32.json" "$LOGS/peers_f32.json" --f32 | tee "$LOGS/table_f32.md" ;;
    bench) to $H bench --json "$LOGS/ours.json" > "$LOGS/bench.log" 2>&1; tail -26 "$LOGS/bench.log" ;;
    peers) to python3 .fa-device/run/peer_sdpa.py --json "$LOGS/peers.json" > "$LOGS/peers.log" 2>&1 || tail -5 "$LOGS/peers.log"
           to python3 .fa-device/run/peer_big.py 2>&1 | tee "$LOGS/peer_big.log"
           python3 .fa-device/run/ratio.py "$LOGS/ours.json" "$LOGS/peers.json" | tee "$LOGS/table.md" ;;
    *) echo "device-run: unknown step $s" ;;
  esac
  echo "[$s: $((SECONDS - t0)) s]"
done
(cd "$LOGS" && tar czf "$OUT/results.tgz" .) && echo "logs: results.tgz ($(ls "$LOGS" | wc -l) files)"
