#!/bin/bash
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz; chmod +x .devbin/harness
timeout 120 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed" $OUT/test.txt | tail -8
export FA_VSHAPES=1024,2048,4096,8192,16384,4096c,16384c
for r in a b; do FA_VARIANTS=U1,M1,U2,M2 timeout 75 .devbin/harness variants 2>&1 | tee $OUT/variants_$r.txt | grep -v "chk1 .* ok$"; done
