/// <reference types="@webgpu/types" />
/**
 * The matrix product on device tensors (issue 25: the first model op on the WebGPU engine):
 * core's GemmCall with webgpu f32 tensors in place of Float32Arrays, stream-ordered like the
 * attention calls (nothing comes back to the host; errors the GPU finds surface at the next read
 * or sync). The kernel is wgsl/gemm.ts.
 */
import { type Tensor, FAError, isDeviceTensor, numel } from '@fa/core';
import { WGTensor } from './tensor.js';

/** C (M×N) = op(A)·op(B) (+ bias) (+ C with accumulate): core's GemmCall on webgpu f32 tensors. */
export interface DeviceGemmCall {
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
  a: Tensor;
  b: Tensor;
  c: Tensor;
  accumulate?: boolean;
  /** [N], added to every row. */
  bias?: Tensor | null;
  /**
   * Batched products (default 1): product z reads a at aOffset + z·strideA, b at bOffset + z·strideB
   * and writes c at cOffset + z·strideC (elements). With any of these the operands need only hold
   * what the products read; without them, exactly M·K, K·N and M·N values.
   */
  batch?: number;
  aOffset?: number;
  bOffset?: number;
  cOffset?: number;
  strideA?: number;
  strideB?: number;
  strideC?: number;
}

const isDim = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0 && (x as number) < 2 ** 31;

/** Checks a DeviceGemmCall: one-line FAErrors, nothing enqueued. Returns the tensors. */
export function checkDeviceGemm(g: DeviceGemmCall): { a: WGTensor; b: WGTensor; c: WGTensor; bias: WGTensor | null } {
  if (typeof g !== 'object' || g === null) throw new FAError('E_ARG', 'gemm: the call must be an object { transA, transB, M, N, K, a, b, c }');
  for (const k of ['M', 'N', 'K'] as const) if (!isDim(g[k])) throw new FAError('E_SHAPE', `gemm: ${k} must be an integer from 0 to 2^31 - 1, got ${String(g[k])}`);
  if (g.M > 65535 * 64 || g.N > 65535 * 64) throw new FAError('E_TOO_LARGE', `gemm: M and N must be at most ${65535 * 64} (one workgroup per 64×64 tile of C)`);
  const dev = (t: unknown, name: string, n: number): WGTensor => {
    if (!isDeviceTensor(t as Tensor) || !(t instanceof WGTensor)) throw new FAError('E_ARG', `gemm: ${name} must be a webgpu device tensor (upload it first)`);
    if (t.dtype !== 'f32') throw new FAError('E_DTYPE', `gemm: ${name} must be f32, got ${t.dtype}`);
    if (numel(t.shape) !== n) throw new FAError('E_SHAPE', `gemm: ${name} holds ${numel(t.shape)} values; M ${g.M}, N ${g.N}, K ${g.K} need ${n}`);
    return t;
  };
  const devAtLeast = (t: unknown, name: string, n: number): WGTensor => {
    if (!isDeviceTensor(t as Tensor) || !(t instanceof WGTensor)) throw new FAError('E_ARG', `gemm: ${name} must be a webgpu device tensor (upload it first)`);
    if (t.dtype !== 'f32') throw new FAError('E_DTYPE', `gemm: ${name} must be f32, got ${t.dtype}`);
    if (numel(t.shape) < n) throw new FAError('E_SHAPE', `gemm: ${name} holds ${numel(t.shape)} values; the products read up to ${n}`);
    return t;
  };
  const batched = g.batch !== undefined || g.aOffset !== undefined || g.bOffset !== undefined || g.cOffset !== undefined || g.strideA !== undefined || g.strideB !== undefined || g.strideC !== undefined;
  for (const k of ['batch', 'aOffset', 'bOffset', 'cOffset', 'strideA', 'strideB', 'strideC'] as const) {
    if (g[k] !== undefined && !isDim(g[k])) throw new FAError('E_SHAPE', `gemm: ${k} must be an integer from 0 to 2^31 - 1, got ${String(g[k])}`);
  }
  const batch = g.batch ?? 1;
  if (batch > 65535) throw new FAError('E_TOO_LARGE', 'gemm: at most 65535 batched products a call');
  if (batch > 1 && (g.strideC ?? 0) < g.M * g.N) throw new FAError('E_ARG', `gemm: the batch's products would overlap in c (strideC ${g.strideC ?? 0} < M·N ${g.M * g.N}); accumulate into one c with a call per product`);
  const span = (off: number | undefined, stride: number | undefined, n: number) => (n === 0 ? 0 : (off ?? 0) + (batch - 1) * (stride ?? 0) + n);
  const need = batched ? (t: unknown, name: string, n: number) => devAtLeast(t, name, n) : dev;
  const a = need(g.a, 'a', batched ? span(g.aOffset, g.strideA, g.M * g.K) : g.M * g.K), b = need(g.b, 'b', batched ? span(g.bOffset, g.strideB, g.K * g.N) : g.K * g.N);
  const c = need(g.c, 'c', batched ? span(g.cOffset, g.strideC, g.M * g.N) : g.M * g.N);
  const bias = g.bias == null ? null : dev(g.bias, 'bias', g.N);
  // (WebGPU: a buffer written by a dispatch may not be bound to it a second time, even apart)
  for (const [name, t] of [['a', a], ['b', b], ['bias', bias]] as const) {
    if (t && t.handle.buffer === c.handle.buffer) throw new FAError('E_ARG', `gemm: c must not share a buffer with ${name}`);
  }
  return { a, b, c, bias };
}
