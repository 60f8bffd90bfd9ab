/**
 * @fa/cuda — FlashAttention forward and backward, and KV-cache attention (decode), on NVIDIA
 * GPUs (f16/bf16 tensor cores), as an @fa/core backend. Importing this module registers backend
 * "cuda" (priority 100); it starts lazily, and on a machine without the addon or a driver it
 * reports why it is unavailable.
 */
import { registerBackend } from '@fa/core';
import { createCudaBackend } from './backend.js';

registerBackend('cuda', () => createCudaBackend(), 100);

export { CudaBackend, CudaTensor, createCudaBackend, cudaStatus, toFAError, type CudaBackendOptions } from './backend.js';
export { loadNative, NATIVE_PATH, type NativeBinding, type NativeBuffer, type NativeContext, type NativeLoad, type NativeProbe, type NativeAttnSpec, type NativeKvSpec } from './native.js';
export { CudaIndexTensor } from './kvcache.js';
