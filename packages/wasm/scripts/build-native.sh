#!/usr/bin/env bash
# Builds the native x86-64 addons of @fa/wasm from the same csrc/ as the WebAssembly binaries
# (the engine "native", src/native.ts), one per psABI level, as Node-API addons:
#
#   native/linux-x64/fa-x86-64-v4.node   AVX-512 (F, BW, CD, DQ, VL): 512-bit matrix micro-kernels
#   native/linux-x64/fa-x86-64-v3.node   AVX2 + FMA: 256-bit matrix micro-kernels
#
# Every other kernel is the WebAssembly source, compiled through csrc/native/wasm_simd128.h. The
# addons are committed (users need no compiler); test/build.test.ts rebuilds them into a temporary
# folder and checks that they match byte for byte, as for the .wasm files. They link against
# nothing: -nostdlib, Node-API and memcpy/memset resolved from the node process when loaded.
#
# Toolchain: Debian's clang-19 and lld-19 (scripts/setup-wasm.sh installs them).
# Usage: bash scripts/build-native.sh [OUTDIR]   (default: native/linux-x64/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-native/linux-x64}
cc=${FA_WASM_CC:-clang-19}
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-native: $cc not found (bash scripts/setup-wasm.sh from the repository root installs it)" >&2
  exit 1
fi
[ -n "${FA_WASM_NO_GEN:-}" ] || node scripts/gen-kernels.mjs >/dev/null
mkdir -p "$out"
srcs=(csrc/forward.c csrc/backward.c csrc/kvcache.c csrc/copy.c csrc/convert.c csrc/gemm.c csrc/layer_ops.c csrc/testing.c csrc/native/addon.c csrc/native/direct.c)
# FA_RELAXED: multiply-adds fuse (x86 FMA3, as relaxed SIMD's madd does on these CPUs)
common=(--target=x86_64-linux-gnu -O3 -shared -fPIC -nostdlib -ffreestanding -fno-ident -fno-strict-aliasing
  -fvisibility=hidden -fno-plt -Wall -Werror -DFA_RELAXED -DFA_NATIVE -Icsrc/native
  -fuse-ld=lld -Wl,--build-id=none -Wl,--strip-all -Wl,-z,noexecstack -Wl,-z,relro -Wl,-z,now)
for level in v4 v3; do
  "$cc" "${common[@]}" -march=x86-64-$level -o "$out/fa-x86-64-$level.node" "${srcs[@]}"
done
echo "build-native: 2 addons in $out ($("$cc" --version | head -1))"
