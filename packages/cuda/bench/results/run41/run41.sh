#!/bin/bash
# session 6, call 3: masks by per-row spans (VisibleSpan) in the TMA forward and backward
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 150 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed|det diff" $OUT/test.txt | tail -5
FA_NO100K=1 FA_VSHAPES=1024,1024c,2048c,4096,4096c,16384,16384c FA_VARIANTS=T1,N1,Q1,T4,U1,U2,U3 timeout 200 .devbin/harness variants 2>&1 | grep -v "^  FAIL\|mismatch" | tee $OUT/variants.txt | grep -v "^ *chk"
