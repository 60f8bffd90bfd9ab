/**
 * @fa/wasm — exact FlashAttention forward and backward in WebAssembly SIMD, for CPUs, in Node and
 * in browsers. Importing this module registers the backend "wasm" (priority WASM_PRIORITY, above
 * the TypeScript cpu engine and below the GPU engines); it starts lazily and reports why it is
 * unavailable where the runtime has no WebAssembly SIMD. It also registers "native" (priority
 * NATIVE_PRIORITY): the same engine over the kernels compiled for x86-64 (AVX2 or AVX-512), in
 * Node on Linux x86-64, unavailable elsewhere (native.ts).
 */
import { registerBackend } from '@fa/core';
import { WasmBackend } from './backend.js';
import type { WasmBackendOptions } from './options.js';

export { WasmBackend } from './backend.js';
export { DEFAULT_INLINE_BELOW_FLOPS, type WasmBackendOptions } from './options.js';
export { probeFeatures, binaryName, chooseIsa, enableRelaxedSimd, type Features, type Isa } from './features.js';
export { binaryUrl } from './loader.js';
export { addonUrl, levelFromCpuinfo, loadAddon, nativeTarget, type NativeAddon, type NativeLevel } from './native.js';
export { chooseNativeTiles, chooseWasmTiles } from './tiles.js';
export { forwardBytes, backwardBytes } from './layout.js';

/** Creates a wasm engine (outside the registry), e.g. with a thread count or forced tiles. */
export function createWasmBackend(opts: WasmBackendOptions = {}): Promise<WasmBackend> {
  return WasmBackend.create(opts);
}

/** Between the cpu engine (0) and webgpu (50). */
export const WASM_PRIORITY = 25;
/** Above the WebAssembly build it shares its engine with: in Node on Linux x86-64 it is faster. */
export const NATIVE_PRIORITY = 30;

registerBackend('wasm', () => WasmBackend.create(), WASM_PRIORITY);
registerBackend('native', () => WasmBackend.create({ native: true }), NATIVE_PRIORITY);
