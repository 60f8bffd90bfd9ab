#!/bin/bash
# session 9, call 6: ours awaited one by one against torch awaited one by one (wall clock, synchronize after
# each call: bench/peer_awaited.py), and both issued back to back, D=128, two rounds alternating.
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs packages/cuda/bench/peer_awaited.py packages/cuda/bench/median.py .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9f; mkdir -p $L
for i in 1 2; do
  FA_BENCH_D=128 FA_NODE_T=1024,4096,8192,16384 timeout 100 node $R/node-rows.mjs $L/a-$i.json $L/p-$i.json > $L/node-$i.log 2>&1; echo "node round $i rc=$?"
  timeout 100 python3 $R/peer_awaited.py --dims 128 --seqlens 1024,4096,8192,16384 $L/ta-$i.json $L/tp-$i.json > $L/torch-$i.log 2>&1; echo "torch round $i rc=$?"
done
for x in a p ta tp; do python3 $R/median.py $L/$x-[12].json > $L/med-$x.json; done
{ echo "## ours awaited vs torch awaited (wall clock, synchronize after each call; median of 2 rounds)"; python3 $R/ratio.py $L/med-a.json $L/med-ta.json | grep -E "^\| (D|---|128)"
  echo "## ours back to back vs torch back to back (wall clock, 30 calls then one synchronize)"; python3 $R/ratio.py $L/med-p.json $L/med-tp.json | grep -E "^\| (D|---|128)"; } > $L/tables.md
cat $L/tables.md; cp $L/tables.md $OUT/; tar czf $OUT/s9f-logs.tgz -C $L .
