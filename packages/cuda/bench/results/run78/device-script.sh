#!/bin/bash
# session 9, call 8: the final tree (core's lazy messages, the binding with trace) checked on the H200:
# cuda kit host/device + FFMA + fuzz, KV kit, prebuilt addon + README example; then node-host-costs.
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/dev/node-host-costs.mjs .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9h; mkdir -p $L
( timeout 200 node $R/conformance.mjs > $L/conf.log 2>&1; echo "[conformance rc=$?]" >> $L/conf.log ) &
( OUT=$L timeout 200 node $R/kv-device.mjs > $L/kv.log 2>&1; echo "[kv rc=$?]" >> $L/kv.log ) &
( OUT=$L timeout 200 node $R/prebuilt-check.mjs > $L/prebuilt.log 2>&1; echo "[prebuilt rc=$?]" >> $L/prebuilt.log ) &
wait
grep -E "passed|fuzz|FAIL|rc=" $L/conf.log | head -14; grep -vE "^ok  " $L/kv.log | tail -8; tail -4 $L/prebuilt.log
timeout 60 node $R/node-host-costs.mjs
tar czf $OUT/s9h-logs.tgz -C $L .
