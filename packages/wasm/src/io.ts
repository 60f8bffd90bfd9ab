/**
 * Tensors in and out of the engine's memory (host tensors, and device tensors' regions). Inputs are converted to float32 as they are
 * copied in (f16/bf16 decoded exactly, core's decode); outputs are rounded once to the call's
 * dtype as they are copied out (csrc/convert.c, in place, with core's encode's rounding: ties to
 * even). Results are SharedArrayBuffer-backed where that exists (core's allocHost), as the cpu
 * engine's are.
 */
import { allocHost, bytesPerElement, decode, type DType, type HostData } from '@fa/core';
import type { Kernels } from './job.js';
import type { Arena } from './memory.js';
import type { Region } from './tensors.js';

export function copyIn(a: Arena, src: HostData, dtype: DType, ptr: number): void {
  const dst = a.f32(ptr, src.length);
  if (dtype === 'f32') dst.set(src as Float32Array);
  else decode(dtype, src as Uint16Array, dst);
}

/** Copies n float32 values out as `dtype` (rounding f16/bf16 in place: the source is consumed). */
export function copyOut(a: Arena, k: Kernels, ptr: number, n: number, dtype: DType): HostData {
  const out = allocHost(dtype, n);
  if (dtype === 'f32') {
    (out as Float32Array).set(a.f32(ptr, n));
  } else {
    k.fa_encode16(ptr, n, dtype === 'bf16' ? 1 : 0);
    (out as Uint16Array).set(new Uint16Array(a.memory.buffer, ptr, n));
  }
  return out;
}

/** copyOut into a device tensor's region (the dtype's bytes), for calls whose q is a device tensor. */
export function copyOutTo(a: Arena, k: Kernels, ptr: number, n: number, dtype: DType, dst: Region): void {
  if (dtype !== 'f32') k.fa_encode16(ptr, n, dtype === 'bf16' ? 1 : 0);
  new Uint8Array(a.memory.buffer).copyWithin(dst.ptr, ptr, ptr + n * bytesPerElement(dtype));
}
