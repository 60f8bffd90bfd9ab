#!/bin/bash
# session 9, call 5: the issue-13 table through Node, three rounds alternating ours and torch's peers in one
# call (medians per cell: bench/median.py), deterministic backward in every round, then 100K through Node.
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs packages/cuda/bench/big.mjs packages/cuda/bench/median.py .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9e; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
s=$SECONDS
for i in 1 2 3; do
  FA_BENCH_D=128 FA_NODE_DET=1 FA_NODE_T=1024,4096,8192,16384 timeout 100 node $R/node-rows.mjs $L/a128-$i.json $L/p128-$i.json > $L/node128-$i.log 2>&1; echo "node128 round $i rc=$? $((SECONDS - s)) s"
  timeout 60 python3 $R/peer_sdpa.py --dims 128 --seqlens 1024,4096,8192,16384 --json $L/peers128-$i.json > $L/peers128-$i.log 2>&1; echo "peers128 round $i rc=$?"
  FA_BENCH_D=64 FA_NODE_T=4096,8192,16384 timeout 100 node $R/node-rows.mjs $L/a64-$i.json $L/p64-$i.json > $L/node64-$i.log 2>&1; echo "node64 round $i rc=$? $((SECONDS - s)) s"
  timeout 60 python3 $R/peer_sdpa.py --dims 64 --seqlens 4096,8192,16384 --json $L/peers64-$i.json > $L/peers64-$i.log 2>&1; echo "peers64 round $i rc=$?"
done
cat $L/node128-*.log | grep deterministic | sed 's/awaited fwd.*deterministic/deterministic/'
for d in 128 64; do for x in a p peers; do python3 $R/median.py $L/$x$d-[123].json > $L/med-$x$d.json; done; done
{ for d in 128 64; do for m in a p; do echo "## D=$d $m (median of 3 rounds)"; python3 $R/ratio.py $L/med-$m$d.json $L/med-peers$d.json | grep -E "^\| (D|---|$d)"; done; done
  echo "## every round, back to back"; for i in 1 2 3; do for d in 128 64; do python3 $R/ratio.py $L/p$d-$i.json $L/peers$d-$i.json | grep -E "^\| $d" | sed "s/^/round $i /"; done; done; } > $L/tables.md 2>&1
timeout 120 node $R/big.mjs > $L/big.log 2>&1; echo "big rc=$?"; cat $L/big.log
cat $L/tables.md
for f in med-a128 med-p128 med-peers128 med-a64 med-p64 med-peers64; do cp $L/$f.json $OUT/; done; cp $L/tables.md $OUT/
tar czf $OUT/s9e-logs.tgz -C $L .
echo "total $((SECONDS - s)) s"
