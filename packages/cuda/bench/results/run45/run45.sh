#!/bin/bash
# session 6, call 7: the D = 64 backward with 3 and 4 Q/dO stages
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
FA_VSHAPES=4096,16384,4096c,16384c FA_VARIANTS=U2,U5,U6,U4,U1 timeout 100 .devbin/harness variants 2>&1 | tee $OUT/variants.txt | grep -v "chk"
