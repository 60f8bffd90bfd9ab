#!/bin/bash
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz; chmod +x .devbin/harness
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 170 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed" $OUT/test.txt | tail -8
FA_VSHAPES=1024,4096,16384,4096c,16384c FA_VARIANTS=U2,X1,U3b,X2 timeout 180 .devbin/harness variants 2>&1 | tee $OUT/variants_x.txt | grep -v "chk1 .* ok$"
FA_VSHAPES=512,1024,1024c,4096,16384,4096c FA_VARIANTS=T1,S0,T4,S0b,T10 timeout 180 .devbin/harness variants 2>&1 | tee $OUT/variants_s.txt | grep -v "chk"
