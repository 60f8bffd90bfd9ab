#!/bin/bash
source .fa-device/on-device.sh >/dev/null
cp packages/cuda/dev/node-host-costs.mjs .fa-device/run/
for i in 1 2; do timeout 100 node .fa-device/run/node-host-costs.mjs; done
