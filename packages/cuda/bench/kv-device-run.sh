#!/usr/bin/env bash
# KV-cache (issue 12) steps for one GPU session, from a folder holding .fa-device/ (prepare.sh
# with --run bench/kv-device.mjs bench/fuzz-lib.mjs bench/peer_decode.py bench/kv-table.mjs) and
# kv_harness (dev/kv_harness.cu built with nvcc). Logs and JSON go to $OUT; the table last.
#   bash .fa-device/run/kv-device-run.sh [test] [bench] [peers] [node] [variants] [sanitize]
set -uo pipefail
OUT=${OUT:-/tmp/fa-out}; mkdir -p "$OUT"
H=./kv_harness
steps=${*:-test bench peers node variants sanitize}
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
source .fa-device/on-device.sh >/dev/null
R=.fa-device/run
has test && { timeout 120 $H test guard > "$OUT/kv_test.log" 2>&1; echo "harness test exit $?"; grep -E "FAIL|failed|guard|CUDA error" "$OUT/kv_test.log" | head -30; }
has bench && { timeout 60 $H bench --json "$OUT/kv_bench.json" > /tmp/kv_bench.log 2>&1; echo "bench exit $?"; cat /tmp/kv_bench.log >> "$OUT/kv_test.log"; tail -16 /tmp/kv_bench.log; }
has peers && { PYTHONUNBUFFERED=1 timeout 75 python3 $R/peer_decode.py --json "$OUT/peers_decode.json" > /tmp/peers_decode.log 2>&1; echo "peers exit $?"; grep -v efficient /tmp/peers_decode.log | tail -9; }
has node && { (cd $R && timeout 120 node kv-device.mjs > "$OUT/kv_node.log" 2>&1); echo "node exit $?"; grep -vE "^ok  " "$OUT/kv_node.log" | tail -22; }
has variants && { timeout 90 $H variants > "$OUT/kv_variants.log" 2>&1; echo "variants exit $?"; grep -vE "chk[12] .* ok$" "$OUT/kv_variants.log" | tail -9; }
has sanitize && { timeout 60 compute-sanitizer --tool memcheck $H small > "$OUT/kv_sanitize.log" 2>&1; echo "sanitizer exit $?"; tail -3 "$OUT/kv_sanitize.log"; }
node $R/kv-table.mjs "$OUT" | tee "$OUT/kv_table.md"
