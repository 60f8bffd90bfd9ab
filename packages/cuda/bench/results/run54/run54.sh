#!/bin/bash
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz; chmod +x .devbin/harness
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 170 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed" $OUT/test.txt | tail -8
export FA_VSHAPES=1024,4096,8192,16384,4096c,16384c
FA_VARIANTS=G1,U1,G2,U2,G3,G4,G5,U3,G6,U3b timeout 200 .devbin/harness variants 2>&1 | tee $OUT/variants_a.txt | grep -v "chk1 .* ok$"
FA_VARIANTS=U3b,G6,U3,G5,G4,G3,U2,G2,U1,G1 timeout 200 .devbin/harness variants 2>&1 | tee $OUT/variants_b.txt | grep -v "chk"
