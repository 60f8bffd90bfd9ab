/// <reference types="@webgpu/types" />
/** The WebGPU engine's device tensors. */
import type { DType, DeviceIndexTensor, DeviceTensor } from '@fa/core';

/** What a webgpu DeviceTensor's handle holds. */
export interface WebGPUTensorHandle {
  readonly buffer: GPUBuffer;
  readonly bytes: number;
  readonly epoch: number;
  /** Byte offset of the tensor in `buffer` (wrapped buffers; 0 for the engine's own). */
  readonly offset?: number;
  /** A caller's buffer (wrapBuffer): disposing the tensor forgets it, never destroys it. */
  readonly external?: boolean;
}

export class WGTensor implements DeviceTensor {
  readonly kind = 'device' as const;
  readonly backend = 'webgpu';
  disposed = false;
  constructor(
    readonly dtype: DType,
    readonly shape: readonly number[],
    readonly handle: WebGPUTensorHandle,
  ) {}
}

/**
 * The WebGPU engine's index tensors (cache lengths, block tables): an int32 storage buffer and
 * the host mirror core's validation reads (kept equal by uploadIndex/writeIndex).
 */
export class WGIndexTensor implements DeviceIndexTensor {
  readonly kind = 'index' as const;
  readonly backend = 'webgpu';
  disposed = false;
  constructor(
    readonly shape: readonly number[],
    readonly handle: WebGPUTensorHandle,
    readonly mirror: Int32Array,
  ) {}
}
