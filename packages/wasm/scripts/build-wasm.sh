#!/usr/bin/env bash
# Builds the four WebAssembly binaries of @fa/wasm from csrc/ (the shipped ones in wasm/ are
# committed, so users need no toolchain; test/build.test.ts rebuilds them into a temporary folder
# and checks that they match byte for byte):
#
#   fa-simd128-mt.wasm   SIMD128, shared memory (worker threads)
#   fa-simd128-st.wasm   SIMD128, unshared memory (pages that are not cross-origin isolated)
#   fa-relaxed-mt.wasm   relaxed SIMD (f32x4.relaxed_madd), shared memory
#   fa-relaxed-st.wasm   relaxed SIMD, unshared memory
#
# Toolchain: Debian's clang-19 and lld-19 (scripts/setup-wasm.sh installs them). clang 14 emits
# the pre-standard relaxed-SIMD opcodes (f32x4.fma, 0xfd 0xaf), which no current engine accepts.
# Usage: bash scripts/build-wasm.sh [OUTDIR]   (default: wasm/). The micro-kernel header
# csrc/gen/f32-gemm.h is regenerated first unless FA_WASM_NO_GEN=1 (the test checks it instead).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-wasm}
cc=${FA_WASM_CC:-clang-19}
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-wasm: $cc not found (bash scripts/setup-wasm.sh from the repository root installs it)" >&2
  exit 1
fi
[ -n "${FA_WASM_NO_GEN:-}" ] || node scripts/gen-kernels.mjs >/dev/null
mkdir -p "$out"
srcs=(csrc/forward.c csrc/backward.c csrc/kvcache.c csrc/copy.c csrc/convert.c csrc/gemm.c csrc/layer_ops.c csrc/testing.c csrc/stack.S)
common=(--target=wasm32 -O3 -nostdlib -ffreestanding -fno-ident -fno-strict-aliasing -msimd128 -mbulk-memory -Wall -Werror
  -Wl,--no-entry -Wl,--import-memory -Wl,--stack-first -Wl,-z,stack-size=65536
  -Wl,--export=__heap_base -Wl,--strip-all)
for isa in simd128 relaxed; do
  for th in mt st; do
    flags=()
    [ "$isa" = relaxed ] && flags+=(-mrelaxed-simd -DFA_RELAXED)
    [ "$th" = mt ] && flags+=(-matomics -DFA_THREADS -Wl,--shared-memory -Wl,--max-memory=4294967296)
    "$cc" "${common[@]}" "${flags[@]}" -o "$out/fa-$isa-$th.wasm" "${srcs[@]}"
  done
done
echo "build-wasm: $(ls "$out"/fa-*.wasm | wc -l) binaries in $out ($("$cc" --version | head -1))"
