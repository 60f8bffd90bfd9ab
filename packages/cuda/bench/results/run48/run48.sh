#!/bin/bash
# session 6, call 10: the causal backward's tile order (bands of key blocks across groups) against group by group
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 150 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed|det diff" $OUT/test.txt | grep -v "f32" | tail -5
FA_VSHAPES=2048c,4096c,8192c,16384c,4096 FA_VARIANTS=U1,K0,K8,K1,U2,K0b,U3 timeout 200 .devbin/harness variants 2>&1 | tee $OUT/variants.txt | grep -v "chk"
