#!/bin/bash
# session 9, call 12: the binding after the final read (small inputs kept once): kits + FFMA + fuzz, KV kit, and
# the refactored node-rows on two rows with the deterministic backward.
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs .fa-device/run/
export PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9l; mkdir -p $L
( timeout 150 node $R/conformance.mjs > $L/conf.log 2>&1; echo "[conformance rc=$?]" >> $L/conf.log ) &
( OUT=$L timeout 150 node $R/kv-device.mjs > $L/kv.log 2>&1; echo "[kv rc=$?]" >> $L/kv.log ) &
wait
grep -E "passed|fuzz|FAIL|rc=" $L/conf.log | head -10; grep -vE "^ok  " $L/kv.log | tail -3
FA_BENCH_D=128 FA_NODE_DET=1 FA_NODE_T=4096 timeout 60 node $R/node-rows.mjs $L/a.json $L/p.json; echo "rows rc=$?"
tar czf $OUT/s9l-logs.tgz -C $L .
