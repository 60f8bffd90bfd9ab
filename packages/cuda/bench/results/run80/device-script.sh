#!/bin/bash
# session 9, call 10: the binding after the review fixes (final tree): kits + FFMA + fuzz, KV kit, prebuilt + README
# example, context parallelism on one GPU, the out-of-memory hand-over (dev/oom-check.mjs), and the 4K/16K rows.
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/dev/oom-check.mjs packages/cuda/bench/node-rows.mjs .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9j; mkdir -p $L
( timeout 200 node $R/conformance.mjs > $L/conf.log 2>&1; echo "[conformance rc=$?]" >> $L/conf.log ) &
( OUT=$L timeout 200 node $R/kv-device.mjs > $L/kv.log 2>&1; echo "[kv rc=$?]" >> $L/kv.log ) &
( OUT=$L timeout 200 node $R/prebuilt-check.mjs > $L/prebuilt.log 2>&1; echo "[prebuilt rc=$?]" >> $L/prebuilt.log ) &
wait
grep -E "passed|fuzz|FAIL|rc=" $L/conf.log | head -14; grep -vE "^ok  " $L/kv.log | tail -4; tail -3 $L/prebuilt.log
timeout 120 node $R/cp/single.mjs > $L/cp.log 2>&1; echo "cp rc=$?"; grep -E "PASS|FAIL|ring cost" $L/cp.log | tail -5
timeout 120 node $R/oom-check.mjs > $L/oom.log 2>&1; echo "oom rc=$?"; cat $L/oom.log
FA_BENCH_D=128 FA_NODE_T=4096,16384 timeout 60 node $R/node-rows.mjs $L/a.json $L/p.json > $L/rows.log 2>&1; echo "rows rc=$?"
timeout 60 python3 $R/peer_sdpa.py --dims 128 --seqlens 4096,16384 --json $L/peers.json > $L/peers.log 2>&1
for m in a p; do echo "## $m"; python3 $R/ratio.py $L/$m.json $L/peers.json | grep -E "^\| 128"; done
tar czf $OUT/s9j-logs.tgz -C $L .
