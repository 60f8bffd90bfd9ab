/// <reference types="@webgpu/types" />
/** The WebGPU engine's device tensors. */
import type { DType, DeviceTensor } from '@fa/core';

/** What a webgpu DeviceTensor's handle holds. */
export interface WebGPUTensorHandle {
  readonly buffer: GPUBuffer;
  readonly bytes: number;
  readonly epoch: number;
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
