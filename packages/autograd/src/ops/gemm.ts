/**
 * The one matrix-product kernel: C (M×N) = op(A) · op(B) (or += with `accumulate`), row-major,
 * where op(A) is M×K and op(B) is K×N, optionally transposed in storage. Sums run in float64
 * (JavaScript numbers) and are rounded once into C.
 */
import type { Data } from '../tensor.js';

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
}

let rowBuf = new Float64Array(0);
function row(n: number): Float64Array {
  if (rowBuf.length < n) rowBuf = new Float64Array(n);
  return rowBuf;
}

export function gemm(g: GemmArgs): void {
  const { transA, transB, M, N, K, A, B, C } = g;
  const ao = g.aOff ?? 0;
  const bo = g.bOff ?? 0;
  const co = g.cOff ?? 0;
  const acc = g.accumulate === true;
  if (!transB) {
    // C[m, :] = Σ_k a(m, k) · B[k, :] — streams rows of B into a float64 row accumulator.
    const r = row(N);
    for (let m = 0; m < M; m++) {
      r.fill(0, 0, N);
      for (let k = 0; k < K; k++) {
        const a = transA ? A[ao + k * M + m] : A[ao + m * K + k];
        const b0 = bo + k * N;
        for (let n = 0; n < N; n++) r[n] += a * B[b0 + n];
      }
      const c0 = co + m * N;
      if (acc) for (let n = 0; n < N; n++) C[c0 + n] += r[n];
      else for (let n = 0; n < N; n++) C[c0 + n] = r[n];
    }
    return;
  }
  if (!transA) {
    // C[m, n] = A[m, :] · B[n, :] — two contiguous rows.
    for (let m = 0; m < M; m++) {
      const a0 = ao + m * K;
      const c0 = co + m * N;
      for (let n = 0; n < N; n++) {
        const b0 = bo + n * K;
        let s0 = 0;
        let s1 = 0;
        let s2 = 0;
        let s3 = 0;
        let k = 0;
        for (; k + 3 < K; k += 4) {
          s0 += A[a0 + k] * B[b0 + k];
          s1 += A[a0 + k + 1] * B[b0 + k + 1];
          s2 += A[a0 + k + 2] * B[b0 + k + 2];
          s3 += A[a0 + k + 3] * B[b0 + k + 3];
        }
        for (; k < K; k++) s0 += A[a0 + k] * B[b0 + k];
        const s = s0 + s1 + s2 + s3;
        if (acc) C[c0 + n] += s;
        else C[c0 + n] = s;
      }
    }
    return;
  }
  // Both transposed (rare): C[m, n] = Σ_k A[k, m] · B[n, k].
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += A[ao + k * M + m] * B[bo + n * K + k];
      if (acc) C[co + m * N + n] += s;
      else C[co + m * N + n] = s;
    }
  }
}
