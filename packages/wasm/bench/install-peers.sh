#!/usr/bin/env bash
# Installs the benchmark's peers into bench/peers/node_modules (not part of the workspace, never in
# the default install): onnxruntime-node 1.30 (288 MB; its install script would download a CUDA
# build, so ONNXRUNTIME_NODE_INSTALL=skip keeps the bundled CPU binary), onnxruntime-web 1.30 (ORT's
# own WebAssembly build: the same-ISA peer) and tfjs-backend-wasm.
# The ONNX models are built by bench/make-models.py (pip install onnx) and committed.
set -euo pipefail
cd "$(dirname "$0")/peers"
if [ -f node_modules/onnxruntime-node/package.json ] && [ -f node_modules/onnxruntime-web/package.json ] && [ -f node_modules/@tensorflow/tfjs-backend-wasm/package.json ]; then
  echo "install-peers: already installed in $(pwd)/node_modules"
  exit 0
fi
ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --loglevel=error
echo "install-peers: installed into $(pwd)/node_modules"
