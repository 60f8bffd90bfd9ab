/**
 * @fa/wasm — exact FlashAttention forward and backward in WebAssembly SIMD, for CPUs, in Node and
 * in browsers. Importing this module registers the backend "wasm" (priority WASM_PRIORITY, above
 * the TypeScript cpu engine and below the GPU engines); it starts lazily and reports why it is
 * unavailable where the runtime has no WebAssembly SIMD.
 */
import { registerBackend } from '@fa/core';
import { WasmBackend } from './backend.js';
import type { WasmBackendOptions } from './options.js';

export { WasmBackend } from './backend.js';
export { DEFAULT_INLINE_BELOW_FLOPS, type WasmBackendOptions } from './options.js';
export { probeFeatures, binaryName, chooseIsa, enableRelaxedSimd, type Features, type Isa } from './features.js';
export { binaryUrl } from './loader.js';
export { chooseWasmTiles } from './tiles.js';
export { forwardBytes, backwardBytes } from './layout.js';

/** Creates a wasm engine (outside the registry), e.g. with a thread count or forced tiles. */
export function createWasmBackend(opts: WasmBackendOptions = {}): Promise<WasmBackend> {
  return WasmBackend.create(opts);
}

/** Between the cpu engine (0) and webgpu (50). */
export const WASM_PRIORITY = 25;

registerBackend('wasm', () => WasmBackend.create(), WASM_PRIORITY);
