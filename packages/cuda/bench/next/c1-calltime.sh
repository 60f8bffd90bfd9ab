#!/bin/bash
# Prepared in session 7, not run (the session's device time was spent): where a backward call's time
# goes outside its main kernel, on the bench shapes (harness calltime). Build the harness here
# (KERNEL_NOTES "Running on the H200"), xz it into packages/cuda/.devbin/, then with the device tool:
#   carry ["packages/cuda/.devbin"], command: OUT=$OUT bash packages/cuda/bench/next/c1-calltime.sh
# Read: "rest" against run 61's ncu time of the main kernel (2.53 ms at D = 128, T = 4K
# non-causal) says how much of the ~0.4 ms between the bench's call and its main kernel is the
# three passes and how much the gaps; "bwd b2b" against "bwd" says what the host's work costs.
cd "$(dirname "$0")/../.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
timeout 120 .devbin/harness calltime 2>&1 | tee $OUT/calltime.txt
