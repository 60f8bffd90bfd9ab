#!/bin/bash
# session 9, call 1: the launch-here binding (passturn + the call queued on the calling thread) checked
# through Node (cuda kit host/device + FFMA + fuzz, KV kit), then the bench rows through Node with
# peers in the same call; D=128 also with FA_CUDA_LAUNCH_ON_WORKER=1 (passturn alone) as the A/B.
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/bench/node-rows.mjs .fa-device/run/
export PYTHONUNBUFFERED=1 PREBUILDS_ONLY=1
R=.fa-device/run; L=/tmp/s9a; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
s=$SECONDS
( timeout 200 node $R/conformance.mjs > $L/conf.log 2>&1; echo "[conformance rc=$?]" >> $L/conf.log ) &
( OUT=$L timeout 200 node $R/kv-device.mjs > $L/kv.log 2>&1; echo "[kv rc=$?]" >> $L/kv.log ) &
wait; echo "checks: $((SECONDS - s)) s"
grep -E "passed|fuzz|FAIL|rc=" $L/conf.log | head -14; grep -vE "^ok  " $L/kv.log | tail -8
row() { # name env...: node-rows into $L/name-{awaited,pipelined}.json
  local n=$1; shift; s=$SECONDS
  env "$@" timeout 150 node $R/node-rows.mjs $L/$n-awaited.json $L/$n-pipelined.json > $L/$n.log 2>&1; echo "$n rc=$? $((SECONDS - s)) s"; cat $L/$n.log
}
row node128 FA_BENCH_D=128 FA_NODE_T=512,1024,4096,8192,16384
row worker128 FA_BENCH_D=128 FA_NODE_T=1024,4096,16384 FA_CUDA_LAUNCH_ON_WORKER=1
timeout 100 python3 $R/peer_sdpa.py --dims 128 --seqlens 512,1024,4096,8192,16384 --json $L/peers128.json > $L/peers128.log 2>&1; echo "peers128 rc=$?"
row node64 FA_BENCH_D=64 FA_NODE_T=1024,4096,8192,16384
timeout 100 python3 $R/peer_sdpa.py --dims 64 --seqlens 1024,4096,8192,16384 --json $L/peers64.json > $L/peers64.log 2>&1; echo "peers64 rc=$?"
{ for d in 128 64; do for m in node$d-awaited node$d-pipelined worker128-awaited worker128-pipelined; do
    [ -f $L/$m.json ] || continue; case $m in worker*) [ $d = 128 ] || continue;; esac
    echo "## $m"; python3 $R/ratio.py $L/$m.json $L/peers$d.json | grep -E "^\| (D|---|$d)"; done; done; } > $OUT/tables.md 2>&1
cat $OUT/tables.md
for f in node128-awaited node128-pipelined node64-awaited node64-pipelined peers128 peers64; do cp $L/$f.json $OUT/ 2>/dev/null; done; tar czf $OUT/s9a-logs.tgz -C $L .
