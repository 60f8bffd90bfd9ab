#!/bin/bash
# Prepared in session 6 (branch fwdtmastore), not run yet: the forward's TMA-store epilogue
# (FwdTmaCfg::STORE, the branch's default for D = 64 and 128) against the threads' own stores (S0, S0b).
# Build the harness here (KERNEL_NOTES "Running on the H200"), xz it into packages/cuda/.devbin/,
# then with the device tool: carry ["packages/cuda/.devbin"],
#   command: OUT=$OUT bash packages/cuda/bench/next/s1-tma-store.sh
# `harness test` must report 0 failed first (every forward runs the new epilogue on whole tiles:
# varlen, odd d (d_out not a multiple of 8 keeps the threads' stores), windows, GQA, splits).
cd "$(dirname "$0")/../.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 150 .devbin/harness test > $OUT/test.txt 2>&1; echo "harness test rc=$?"; grep -E "FAIL|failed" $OUT/test.txt | tail -5
FA_VSHAPES=512,1024,1024c,4096,16384,4096c FA_VARIANTS=T1,S0,T4,S0b,T10 timeout 200 .devbin/harness variants 2>&1 | tee $OUT/variants.txt | grep -v "chk"
