/**
 * The one matrix-product entry of the package: C (M×N) = op(A) · op(B) (or += with
 * `accumulate`), row-major, where op(A) is M×K and op(B) is K×N, optionally transposed in
 * storage, at element offsets into the arrays. Float32 products run on the model engine
 * (engine.ts: cpu by default, the SIMD micro-kernels of native/wasm when set); float64 ones
 * (gradcheck's twin) on core's float64-sum kernel.
 */
import { addBiasRows, gemmCpu } from '@fa/core';
import type { Data } from '../tensor.js';
import { modelEngine } from '../engine.js';

export interface GemmArgs {
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
  A: Data;
  aOff?: number;
  B: Data;
  bOff?: number;
  C: Data;
  cOff?: number;
  accumulate?: boolean;
  /** [N], added to every row of C (linear's bias). */
  bias?: Data | null;
}

const part = <T extends Data>(x: T, off: number | undefined, n: number): T => (off === undefined && x.length === n ? x : (x.subarray(off ?? 0, (off ?? 0) + n) as T));

export function gemm(g: GemmArgs): void {
  const { M, N, K } = g;
  if (M === 0 || N === 0) return;
  const call = {
    transA: g.transA,
    transB: g.transB,
    M,
    N,
    K,
    a: part(g.A, g.aOff, M * K),
    b: part(g.B, g.bOff, K * N),
    c: part(g.C, g.cOff, M * N),
    accumulate: g.accumulate === true,
    bias: g.bias ?? null,
  };
  if (call.a instanceof Float32Array && call.b instanceof Float32Array && call.c instanceof Float32Array && (call.bias === null || call.bias instanceof Float32Array)) {
    modelEngine().gemm(call as typeof call & { a: Float32Array; b: Float32Array; c: Float32Array; bias: Float32Array | null });
  } else {
    gemmCpu({ ...call, bias: undefined });
    if (call.bias) addBiasRows(call.c, call.bias, M, N);
  }
}
