#!/bin/bash
# session 6, call 6: bench mode vs variant mode (the backward variants now run on the forward's O and LSE)
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
FA_NO100K=1 FA_VSHAPES=4096,16384,4096c FA_VARIANTS=T1,U1,V1 timeout 100 .devbin/harness variants 2>&1 | tee $OUT/variants.txt | grep -v "chk"
for i in 1 2; do FA_BENCH_D=128 timeout 100 .devbin/harness bench 2>&1 | tee $OUT/bench$i.txt | tail -13; nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader; done
FA_NO100K=1 FA_VSHAPES=4096,16384,4096c FA_VARIANTS=T1,U1 timeout 100 .devbin/harness variants 2>&1 | tee $OUT/variants2.txt | grep -v "chk"
