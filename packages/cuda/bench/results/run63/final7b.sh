#!/bin/bash
# session 7, last call: the correct stage on the final tree, then the D = 128 bench rows with peers
OUT=$OUT timeout 210 bash scripts/device-verify.sh correct > $OUT/correct-console.txt 2>&1; echo "correct rc=$?"
grep -h -E "tests:|passed|fuzz|bit-identical|ERROR SUMMARY|200/200|rel err|exit [1-9]|FAIL" $OUT/correct-console.txt | cut -c1-160 | head -40
mkdir -p packages/cuda/.devbin && xz -dc .devbin/harness.xz > packages/cuda/.devbin/harness && chmod +x packages/cuda/.devbin/harness
mkdir -p $OUT/logs
FA_BENCH_D=128 LOGS=$OUT/logs timeout 90 bash packages/cuda/bench/device-run.sh bench peers > $OUT/timing-console.txt 2>&1; echo "bench rc=$?"
grep "^| 128" $OUT/logs/table.md
(cd packages/cuda && timeout 40 .devbin/harness big 2>&1 | grep "T=100000")
