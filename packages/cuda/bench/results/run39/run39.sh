#!/bin/bash
# session 6, call 1: the persistent TMA forward (tile counter) against one CTA a tile
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 150 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed|det diff" $OUT/test.txt | tail -5
FA_VSHAPES=512,1024,512c,1024c,2048c,4096,16384,4096c,16384c FA_VARIANTS=T1,N1,T4,N4,T10,N10,T7 timeout 250 .devbin/harness variants 2>&1 | tee $OUT/variants.txt | grep -v "chk"
