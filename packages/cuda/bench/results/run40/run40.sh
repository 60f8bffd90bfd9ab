#!/bin/bash
# session 6, call 2: where the causal forward's time goes (masks, O store left out) + ncu, ours and cuDNN's
cd "$(dirname "$0")/.." || exit 1
xz -dkf .devbin/harness.xz 2>/dev/null; chmod +x .devbin/harness
FA_NO100K=1 FA_VSHAPES=1024,1024c,4096,4096c FA_VARIANTS=T1,Q,N1 timeout 100 .devbin/harness variants 2>&1 | grep -v "^  FAIL\|mismatch" | tee $OUT/parts.txt | grep -v "^ *chk"
M1='regex:smsp__warp_issue_stalled_.*_per_warp_active\.pct'
M2='regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active|sm__throughput\.avg\.pct_of_peak_sustained_elapsed|gpu__time_duration.sum|sm__cycles_active.avg|smsp__inst_executed.sum|lts__t_sectors_srcunit_tex_op_read.sum|dram__bytes_read.sum'
for T in 1024 4096; do for M in "$M2" "$M1"; do
  echo "=== ours T=$T causal"
  FA_NO100K=1 FA_VSHAPES=${T}c FA_VARIANTS=T1 timeout 60 ncu --clock-control none -k regex:fwd_tma_kernel --launch-skip 6 --launch-count 1 --metrics "$M" .devbin/harness variants 2>&1 | grep -E "^\s+(smsp|sm__|l1tex|lts|gpu__|dram)" | awk '$NF+0 > 0.5 || /sm__|l1tex|lts|gpu__|dram/'
  echo "--- cudnn T=$T causal"
  timeout 60 ncu --clock-control none -k 'regex:(?i)(fprop|fwd|forward|flash)' --launch-skip 1 --launch-count 1 --metrics "$M" python3 .devbin/prof_fwd.py cudnn $T causal 2>&1 | grep -E "^\s+(smsp|sm__|l1tex|lts|gpu__|dram)|==PROF==.*Kernel|^  [a-zA-Z_]" | awk '$NF+0 > 0.5 || /sm__|l1tex|lts|gpu__|dram|Kernel|^  [a-z]/' | head -40
done; done
