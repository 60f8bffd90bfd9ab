#!/bin/bash
# session 7: where the D = 128 backward's time goes at T = 4K (ours U1 vs cuDNN), ncu counters
mkdir -p packages/cuda/.devbin && xz -dc .devbin/harness.xz > packages/cuda/.devbin/harness && chmod +x packages/cuda/.devbin/harness
source .fa-device/on-device.sh >/dev/null 2>&1
M1='regex:smsp__warp_issue_stalled_.*_per_warp_active\.pct'
M2='regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active|sm__throughput\.avg\.pct_of_peak_sustained_elapsed|gpu__time_duration.sum|sm__cycles_active.avg|smsp__inst_executed.sum|lts__t_sectors_op_red.sum|lts__throughput.avg.pct_of_peak_sustained_elapsed|dram__bytes_read.sum|dram__bytes_write.sum|l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed|sm__warps_active.avg.pct_of_peak_sustained_active'
for M in "$M2" "$M1"; do
  echo "=== ours U1 T=4096"
  (cd packages/cuda && FA_NO100K=1 FA_VSHAPES=4096 FA_VARIANTS=U1 timeout 70 ncu --clock-control none -k regex:bwd_tma_kernel --launch-skip 8 --launch-count 1 --metrics "$M" .devbin/harness variants 2>&1) | grep -E "^\s+(smsp|sm__|l1tex|lts|gpu__|dram)" | awk '$NF+0 > 0.3 || /sm__|l1tex|lts|gpu__|dram/'
  echo "--- cudnn T=4096"
  timeout 70 ncu --clock-control none -k 'regex:(?i)bprop' --launch-skip 1 --launch-count 1 --metrics "$M" python3 .devbin/prof_bwd.py cudnn 4096 2>&1 | grep -E "^\s+(smsp|sm__|l1tex|lts|gpu__|dram)|==PROF==.*Kernel|^  [a-zA-Z_]" | awk '$NF+0 > 0.3 || /sm__|l1tex|lts|gpu__|dram|Kernel|^  [a-z]/' | head -40
done
