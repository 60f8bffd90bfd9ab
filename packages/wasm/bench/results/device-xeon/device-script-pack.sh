#!/usr/bin/env bash
source .fa-device/on-device.sh
# forward/backward at 16 and 2 threads after the pack job (no kit this time)
sed -e 's/^for (const level of t.level.*$/for (const level of []) {/' .fa-device/run/cpu-native.mjs > .fa-device/run/cpu-native-nokit.mjs
timeout 300 node .fa-device/run/cpu-native-nokit.mjs 2>&1 | tee $OUT/cpu-native-pack.txt
