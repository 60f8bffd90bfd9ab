/**
 * Host tensors in and out of the engine's memory. Inputs are converted to float32 as they are
 * copied in (f16/bf16 decoded exactly, core's decode); outputs are rounded once to the call's
 * dtype as they are copied out (core's encode, ties to even). Results are SharedArrayBuffer-backed
 * where that exists (core's allocHost), as the cpu engine's are.
 */
import { allocHost, decode, encode, type DType, type HostData } from '@fa/core';
import type { Arena } from './memory.js';

export function copyIn(a: Arena, src: HostData, dtype: DType, ptr: number): void {
  const dst = a.f32(ptr, src.length);
  if (dtype === 'f32') dst.set(src as Float32Array);
  else decode(dtype, src as Uint16Array, dst);
}

export function copyOut(a: Arena, ptr: number, n: number, dtype: DType): HostData {
  const src = a.f32(ptr, n);
  const out = allocHost(dtype, n);
  if (dtype === 'f32') (out as Float32Array).set(src);
  else encode(dtype, src, out as Uint16Array);
  return out;
}
