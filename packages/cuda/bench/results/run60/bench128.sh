#!/bin/bash
# session 7: a second sample of the bench rows with torch peers in the same call (D = 128 ours; peers all)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
mkdir -p packages/cuda/.devbin && xz -dc .devbin/harness.xz > packages/cuda/.devbin/harness && chmod +x packages/cuda/.devbin/harness
mkdir -p $OUT/logs
FA_BENCH_D=128 LOGS=$OUT/logs timeout 250 bash packages/cuda/bench/device-run.sh bench peers > $OUT/timing-console.txt 2>&1; echo "bench rc=$?"
grep "^| 128" $OUT/logs/table.md
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
