#!/bin/bash
# session 9, call 3: the issue-13 rows through Node in one call (D=128 and D=64, awaited and back to back,
# deterministic backward too), torch's peers after each, one head at 100K tokens through Node, and the
# awaited call's breakdown with the synchronous device-tensor path (#devAll).
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs packages/cuda/bench/node-trace.mjs packages/cuda/bench/big.mjs .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9c; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
s=$SECONDS
FA_BENCH_D=128 FA_NODE_DET=1 FA_NODE_T=512,1024,4096,8192,16384 timeout 150 node $R/node-rows.mjs $L/node128-awaited.json $L/node128-pipelined.json > $L/node128.log 2>&1; echo "node128 rc=$? $((SECONDS - s)) s"; cat $L/node128.log
timeout 100 python3 $R/peer_sdpa.py --dims 128 --seqlens 512,1024,4096,8192,16384 --json $L/peers128.json > $L/peers128.log 2>&1; echo "peers128 rc=$?"
FA_BENCH_D=64 FA_NODE_DET=1 FA_NODE_T=1024,4096,8192,16384 timeout 150 node $R/node-rows.mjs $L/node64-awaited.json $L/node64-pipelined.json > $L/node64.log 2>&1; echo "node64 rc=$? $((SECONDS - s)) s"; cat $L/node64.log
timeout 100 python3 $R/peer_sdpa.py --dims 64 --seqlens 1024,4096,8192,16384 --json $L/peers64.json > $L/peers64.log 2>&1; echo "peers64 rc=$?"
timeout 120 node $R/big.mjs > $L/big.log 2>&1; echo "big rc=$?"; cat $L/big.log
FA_NODE_T=1024,4096 timeout 60 node $R/node-trace.mjs $L/trace.json > $L/trace.log 2>&1; echo "trace rc=$?"; cat $L/trace.log
{ for d in 128 64; do for m in awaited pipelined; do echo "## D=$d $m"; python3 $R/ratio.py $L/node$d-$m.json $L/peers$d.json | grep -E "^\| (D|---|$d)"; done; done; } > $L/tables.md 2>&1
cat $L/tables.md
for f in node128-awaited.json node128-pipelined.json node64-awaited.json node64-pipelined.json peers128.json peers64.json tables.md; do cp $L/$f $OUT/ 2>/dev/null; done
tar czf $OUT/s9c-logs.tgz -C $L .
echo "total $((SECONDS - s)) s"
