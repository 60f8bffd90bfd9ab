#!/bin/bash
# session 6, call 13: review fixes (windows near INT_MAX clamped; deterministic persistent backward takes every tile from the counter; tile-count guard)
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 150 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed|INT_MAX" $OUT/test.txt | tail -12
FA_NO100K=1 FA_VSHAPES=4096,16384,4096c,16384c FA_VARIANTS=U1,U3,U3b timeout 100 .devbin/harness variants 2>&1 | tee $OUT/variants.txt | grep -v "chk"
