#!/usr/bin/env bash
# Installs the toolchain that builds @fa/wasm's WebAssembly binaries from packages/wasm/csrc:
# Debian 12's clang-19 and lld-19 (clang --target=wasm32, wasm-ld). Users do not need it (the
# binaries ship in the package); CI does, to check that the shipped binaries match a fresh build
# (packages/wasm/test/build.test.ts). Idempotent: a second run only re-checks.
# Why not Debian's default clang 14: it emits the pre-standard relaxed-SIMD opcodes.
set -euo pipefail
log() { echo "setup-wasm: $*"; }
if command -v clang-19 >/dev/null 2>&1 && command -v wasm-ld-19 >/dev/null 2>&1; then
  log "$(clang-19 --version | head -1); wasm-ld-19 present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
log "apt-get install clang-19 lld-19"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends clang-19 lld-19 >/dev/null
log "$(clang-19 --version | head -1)"
