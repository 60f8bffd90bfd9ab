/**
 * @fa/cuda — FlashAttention forward and backward, and KV-cache attention (decode), on NVIDIA GPUs
 * (tensor cores; f32, f16, bf16), as an @fa/core backend. Importing this module registers backend
 * "cuda" (priority CUDA_PRIORITY, above every other engine); it starts lazily, and on a machine
 * without the addon or a driver it reports why it is unavailable.
 */
import { registerBackend } from '@fa/core';
import { createCudaBackend } from './backend.js';

/** Above every other engine: webgpu (50), wasm (25), cpu (0). */
export const CUDA_PRIORITY = 100;

registerBackend('cuda', () => createCudaBackend(), CUDA_PRIORITY);

export { CudaBackend, CudaTensor, createCudaBackend, cudaStatus, probeReason, toFAError, WRAP_ALIGNMENT, type CudaBackendOptions, type ExportedPointer } from './backend.js';
export { currentTarget, findPrebuilts, prebuiltName, PREBUILDS_DIR, type Target } from './prebuilt.js';
export { loadNative, NATIVE_PATH, type NativeBinding, type NativeBuffer, type NativeContext, type NativeLoad, type NativeProbe, type NativeAttnSpec, type NativeF32Path, type NativeKvSpec, type NativeShardOps, type NativeNccl, type NativeNcclComm, type NcclLoad } from './native.js';
export { CudaIndexTensor } from './kvcache.js';
export * from './parallel/index.js';
