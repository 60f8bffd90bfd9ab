#!/bin/bash
# Prepared in session 8, not run: the `passturn` binding (bench/next/passturn.diff) checked and timed through
# Node in one call. Here: git apply packages/cuda/bench/next/passturn.diff (or check out branch passturn),
# then `bash scripts/device-verify.sh --prepare` (rebuilds the prebuilt addon and packs .fa-device). With the
# device tool: carry [".fa-device", ".devbin"], command: bash packages/cuda/bench/next/p1-passturn.sh
# Compare with run 69 (bench/results/run69/tables.md, the binding before it): "pipelined" should come within
# ~3 % of the harness's kernel times at T >= 4K; "awaited" should move little.
cd "$(dirname "$0")/../../../.." || exit 1
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
timeout 100 node .fa-device/run/conformance.mjs > $OUT/conf.log 2>&1; echo "conformance rc=$?"; grep -E "passed|fuzz|after fuzz|^FAIL" $OUT/conf.log | head -12
FA_BENCH_D=128 FA_NODE_T=512,1024,4096,8192 timeout 60 node .fa-device/run/node-rows.mjs $OUT/node-awaited128.json $OUT/node-pipelined128.json > $OUT/node128.log 2>&1; echo "node rc=$?"; cat $OUT/node128.log
timeout 60 python3 .fa-device/run/peer_sdpa.py --dims 128 --seqlens 512,1024,4096,8192 --json $OUT/peers128.json > $OUT/peers128.log 2>&1; echo "peers rc=$?"
for m in awaited pipelined; do echo "$m D=128"; python3 .fa-device/run/ratio.py "$OUT/node-$m"128.json $OUT/peers128.json | grep -E "^\| 128"; done
