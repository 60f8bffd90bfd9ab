#!/bin/bash
# session 9, call 2: the rest of the `correct` stage's Node steps on the launch-here binding (context
# parallelism on one GPU, the prebuilt addon + README example, autograd reverse f32/bf16, generation),
# then where an awaited call's time goes (bench/node-trace.mjs), then the D=128 T>=4K rows through
# Node and torch's peers twice, alternating.
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs packages/cuda/bench/node-trace.mjs .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9b; mkdir -p $L
step() { local n=$1 t=$2; shift 2; ( s=$SECONDS; timeout -k 5 $t "$@" > $L/$n.log 2>&1; echo "[$n: exit $?, $((SECONDS - s)) s]" >> $L/$n.log ) & }
step cp 240 node $R/cp/single.mjs
step prebuilt 240 env OUT=$L node $R/prebuilt-check.mjs
step reverse-f32 240 node $R/reverse.mjs --backend cuda
step reverse-bf16 240 node $R/reverse.mjs --backend cuda --dtype bf16
step generate 240 node $R/generate.mjs --backend cuda
wait
for f in cp prebuilt reverse-f32 reverse-bf16 generate; do echo "=== $f"; grep -vE '^(ok|PASS) ' $L/$f.log | tail -6; done
FA_NODE_T=512,1024,4096 timeout 120 node $R/node-trace.mjs $OUT/trace128.json; echo "trace rc=$?"
for i in 1 2; do
  FA_BENCH_D=128 FA_NODE_T=4096,8192,16384 timeout 120 node $R/node-rows.mjs $L/a$i.json $L/p$i.json > $L/rows$i.log 2>&1; echo "rows$i rc=$?"
  timeout 100 python3 $R/peer_sdpa.py --dims 128 --seqlens 4096,8192,16384 --json $L/peers$i.json > $L/peers$i.log 2>&1; echo "peers$i rc=$?"
  for m in a p; do echo "## $m$i"; python3 $R/ratio.py $L/$m$i.json $L/peers$i.json | grep -E "^\| 128"; done
done
tar czf $OUT/s9b-logs.tgz -C $L .
