#!/bin/bash
# session 6, call 5: the persistent TMA backward (tile counter) against one CTA a tile
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 150 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed|det diff" $OUT/test.txt | tail -5
FA_VSHAPES=1024,2048,4096,16384,1024c,4096c,8192c FA_VARIANTS=U1,V1,R1,U2,V2,U3,V3 timeout 200 .devbin/harness variants 2>&1 | grep -v "^  FAIL\|mismatch" | tee $OUT/variants.txt | grep -v "^ *chk"
timeout 60 .devbin/harness big 2>&1 | tail -1
