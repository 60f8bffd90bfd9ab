#!/bin/bash
# session 9, call 4: A/B of the backend's synchronous device-tensor path (#devAll) on awaited calls
# (bench/node-trace.mjs with dist/backend.js before and after, alternating), then the D=128 T=4K row
# and torch's peers alternating three times (how much the 4K backward ratio moves from call to call).
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs packages/cuda/bench/node-trace.mjs .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9d; mkdir -p $L; B=.fa-device/node_modules/@fa/cuda/dist/backend.js
for i in 1 2; do for v in new old; do
  cp .devbin/backend-$v.js $B
  FA_NODE_T=1024,4096 timeout 60 node $R/node-trace.mjs > $L/trace-$v$i.log 2>&1; echo "== $v$i rc=$?"; cat $L/trace-$v$i.log | cut -c1-400
done; done
cp .devbin/backend-new.js $B
for i in 1 2 3; do
  FA_BENCH_D=128 FA_NODE_T=4096 timeout 60 node $R/node-rows.mjs $L/a$i.json $L/p$i.json > $L/rows$i.log 2>&1
  timeout 60 python3 $R/peer_sdpa.py --dims 128 --seqlens 4096 --json $L/peers$i.json > $L/peers$i.log 2>&1
  for m in a p; do echo "## $m$i"; python3 $R/ratio.py $L/$m$i.json $L/peers$i.json | grep -E "^\| 128"; done
done
tar czf $OUT/s9d-logs.tgz -C $L .
