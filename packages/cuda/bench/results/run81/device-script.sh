#!/bin/bash
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/dev/oom-check.mjs .fa-device/run/
export PREBUILDS_ONLY=1
timeout 120 node .fa-device/run/oom-check.mjs; echo "oom rc=$?"
