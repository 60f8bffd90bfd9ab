/// <reference types="@webgpu/types" />
/**
 * @fa/webgpu — exact FlashAttention forward and backward in WGSL. Importing this module
 * registers the backend "webgpu" (priority 50) with @fa/core's registry; it starts lazily, on
 * navigator.gpu in browsers and on the optional peer package `webgpu` (Dawn) in Node.
 */
import { registerBackend } from '@fa/core';
import { WebGPUBackend, type WebGPUBackendOptions } from './backend.js';

export { WebGPUBackend, type WebGPUBackendOptions, type WebGPUTensorHandle, type MemoryStats } from './backend.js';
export type { WrapOptions, ExportedBuffer, Recording } from './external.js';
export { findGPU, acquire, type AcquireOptions } from './gpu.js';
export { TILE_CANDIDATES, PREFERRED_TILES, chooseSpec, type Caps, type KernelKind } from './tiles.js';
export type { Tile, KernelSpec } from './wgsl/spec.js';
export { forwardWGSL } from './wgsl/forward.js';
export { planKV, decodeSpec, KV_DECODE_MAX_ROWS, KV_TARGET_WORKGROUPS, type KVPlan, type KVCaps, type KVTuning } from './kvplan.js';
export { kvDecodeWorkgroupBytes } from './wgsl/kvdecode.js';
export { kvDecodeWGSL, type KVDecodeSpec } from './wgsl/kvdecode.js';
export { dkdvWGSL, dqWGSL, deltaWGSL } from './wgsl/backward.js';
export { gemmWGSL } from './wgsl/gemm.js';
export type { DeviceGemmCall } from './gemm.js';
export { WebGPUDeviceOps, type DeviceCall, type DeviceCrossEntropyCall } from './model-ops.js';

/** Creates a WebGPU engine (outside the registry), e.g. with a given device or a forced tile. */
export function createWebGPUBackend(opts: WebGPUBackendOptions = {}): Promise<WebGPUBackend> {
  return WebGPUBackend.create(opts);
}

export const WEBGPU_PRIORITY = 50;

registerBackend('webgpu', () => WebGPUBackend.create(), WEBGPU_PRIORITY);
