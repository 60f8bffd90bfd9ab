#!/bin/bash
# session 7: correct stage, then the timing subset (bench with torch peers, 100K), one call
OUT=$OUT timeout 250 bash scripts/device-verify.sh correct > $OUT/correct-console.txt 2>&1; echo "correct rc=$?"
tail -45 $OUT/correct-console.txt | cut -c1-260
mkdir -p packages/cuda/.devbin && xz -dc .devbin/harness.xz > packages/cuda/.devbin/harness && chmod +x packages/cuda/.devbin/harness
mkdir -p $OUT/logs
LOGS=$OUT/logs timeout 280 bash packages/cuda/bench/device-run.sh bench peers > $OUT/timing-console.txt 2>&1; echo "bench rc=$?"
(cd packages/cuda && timeout 50 .devbin/harness big) >> $OUT/timing-console.txt 2>&1
tail -12 $OUT/timing-console.txt | cut -c1-200
