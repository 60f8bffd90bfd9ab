/**
 * The engine's device tensors: blocks of its WebAssembly memory's heap (memory.ts) holding a
 * tensor in its own dtype (float32, or the raw 16-bit patterns of f16/bf16, as host data), made
 * by upload() and by calls whose q is a device tensor. The kernels read them where they lie: a
 * KV cache uploaded once is appended to and attended over in place by every decode step, with
 * no copy. Views are made afresh at each use (an unshared memory's buffer is replaced when it
 * grows).
 */
import { FAError, isDeviceTensor, isHostTensor, type DeviceTensor, type DType, type HostData, type HostTensor, type Tensor } from '@fa/core';

export interface Region {
  /** Byte address in the engine's memory. */
  readonly ptr: number;
  /** Elements of the dtype. */
  readonly length: number;
  /** The engine that made it (tensors of another wasm engine are refused). */
  readonly owner: object;
}

export class WasmTensor implements DeviceTensor {
  readonly kind = 'device' as const;
  disposed = false;
  constructor(
    /** The engine's name: "wasm" or "native" (the same engine over the x86-64 build). */
    readonly backend: string,
    readonly dtype: DType,
    readonly shape: readonly number[],
    readonly handle: Region,
  ) {}
}

/** A view of a region's data as host data of its dtype (valid until the memory grows). */
export function regionData(memory: WebAssembly.Memory, dtype: DType, r: Region): HostData {
  return dtype === 'f32' ? new Float32Array(memory.buffer, r.ptr, r.length) : new Uint16Array(memory.buffer, r.ptr, r.length);
}

/**
 * Checks that a tensor is a host tensor or a live device tensor of this engine (`owner`);
 * the message says what to do otherwise.
 */
export function checkOwn(t: Tensor, what: string, owner: { readonly name: string }): void {
  if (isHostTensor(t)) return;
  if (!isDeviceTensor(t) || t.backend !== owner.name || !(t instanceof WasmTensor)) {
    throw new FAError('E_ARG', `${what} is a device tensor of backend "${(t as DeviceTensor).backend}"; the ${owner.name} backend takes host tensors or its own (read() it from its backend first)`);
  }
  if (t.handle.owner !== owner) throw new FAError('E_ARG', `${what} is a device tensor of another ${owner.name} backend instance; read() it there and upload() it to this one`);
  if (t.disposed) throw new FAError('E_ARG', `${what} is a device tensor that was already disposed`);
}

/** The data of a host tensor, or a view of a device tensor's region (make it right before use). */
export function dataOf(memory: WebAssembly.Memory, t: Tensor): HostData {
  return isHostTensor(t) ? t.data : regionData(memory, t.dtype, (t as WasmTensor).handle);
}

/** A host tensor over a view of a device tensor's region (for core's host helpers). */
export function hostView(memory: WebAssembly.Memory, t: Tensor): HostTensor {
  return isHostTensor(t) ? t : { kind: 'host', dtype: t.dtype, shape: t.shape, data: dataOf(memory, t) };
}
