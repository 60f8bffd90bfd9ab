#!/bin/bash
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/dev/node-awaited-profile.mjs .fa-device/run/
timeout 60 node .fa-device/run/node-awaited-profile.mjs
timeout 60 node --cpu-prof --cpu-prof-dir=$OUT/prof .fa-device/run/node-awaited-profile.mjs
nproc; cat /proc/cpuinfo | grep "model name" | head -1; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null; cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null
