#!/usr/bin/env bash
source .fa-device/on-device.sh
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket" | head -6
grep -o -w -E "avx512f|avx512bw|avx512vl|avx512dq|avx512cd|avx512_fp16|avx512_bf16|amx_tile|avx2|fma|f16c|movbe|bmi2" /proc/cpuinfo | sort | uniq -c | awk '{printf "%s ", $2} END {print ""}'
timeout 300 node .fa-device/run/cpu-native.mjs 2>&1 | tee $OUT/cpu-native.txt
PY=python3
timeout 200 $PY .fa-device/run/peer_cpu_sdpa.py 2>&1 | tee $OUT/peer-cpu-sdpa.txt
