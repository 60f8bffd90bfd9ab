#!/bin/bash
# session 6, call 11: the non-causal forward's tile order: one head's query tiles at a time (ORDER 1) vs heads fastest
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 150 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed" $OUT/test.txt | tail -3
FA_VSHAPES=1024,4096,8192,16384,4096c FA_VARIANTS=T1,H0,T4,H0b,T10,H0c timeout 200 .devbin/harness variants 2>&1 | tee $OUT/variants.txt | grep -v "chk"
FA_VSHAPES=16384 FA_VARIANTS=T1,H0 timeout 100 .devbin/harness variants 2>&1 | tee $OUT/variants2.txt | grep -v "chk"
