/**
 * The cpu engine's matrix product, in TypeScript: both operands packed as rows over k (A as M
 * rows, B as N rows), then a 4×4 register-blocked kernel forms the dot products; sums run in
 * float64 and are rounded once into C. Portable and exact to float32's rule, not fast: the
 * native and wasm engines (@fa/wasm) run the SIMD micro-kernels instead.
 */
import type { GemmCall } from './model-ops.js';

/** A GemmCall whose arrays may also be float64 (autograd's gradcheck runs its products in float64). */
export type GemmCallAnyFloat = Omit<GemmCall, 'a' | 'b' | 'c'> & { a: Float32Array | Float64Array; b: Float32Array | Float64Array; c: Float32Array | Float64Array };

let bufA = new Float64Array(0);
let bufB = new Float64Array(0);

/** Packs `rows` × K values so that row r, column k sits at r·K + k. `trans`: the source is stored K × rows. */
function pack(src: Float32Array | Float64Array, rows: number, K: number, trans: boolean, dst: Float64Array): void {
  if (!trans) {
    for (let i = 0; i < rows * K; i++) dst[i] = src[i];
    return;
  }
  for (let k = 0; k < K; k++) {
    const s = k * rows;
    for (let r = 0; r < rows; r++) dst[r * K + k] = src[s + r];
  }
}

/** C (M×N) = op(A)·op(B) (or += with accumulate) on unchecked arguments, float32 or float64 arrays. */
export function gemmCpu(g: GemmCallAnyFloat): void {
  const { M, N, K, c: C } = g;
  const acc = g.accumulate === true;
  if (M === 0 || N === 0) return;
  if (bufA.length < M * K) bufA = new Float64Array(M * K);
  if (bufB.length < N * K) bufB = new Float64Array(N * K);
  const A = bufA;
  const B = bufB;
  pack(g.a, M, K, g.transA, A);
  // op(B) is K×N; its columns are the rows we want: stored N×K when transB, K×N otherwise.
  pack(g.b, N, K, !g.transB, B);
  let m = 0;
  for (; m + 3 < M; m += 4) {
    const a0 = m * K, a1 = a0 + K, a2 = a1 + K, a3 = a2 + K;
    let n = 0;
    for (; n + 3 < N; n += 4) {
      const b0 = n * K, b1 = b0 + K, b2 = b1 + K, b3 = b2 + K;
      let c00 = 0, c01 = 0, c02 = 0, c03 = 0;
      let c10 = 0, c11 = 0, c12 = 0, c13 = 0;
      let c20 = 0, c21 = 0, c22 = 0, c23 = 0;
      let c30 = 0, c31 = 0, c32 = 0, c33 = 0;
      for (let k = 0; k < K; k++) {
        const x0 = A[a0 + k], x1 = A[a1 + k], x2 = A[a2 + k], x3 = A[a3 + k];
        const y0 = B[b0 + k], y1 = B[b1 + k], y2 = B[b2 + k], y3 = B[b3 + k];
        c00 += x0 * y0; c01 += x0 * y1; c02 += x0 * y2; c03 += x0 * y3;
        c10 += x1 * y0; c11 += x1 * y1; c12 += x1 * y2; c13 += x1 * y3;
        c20 += x2 * y0; c21 += x2 * y1; c22 += x2 * y2; c23 += x2 * y3;
        c30 += x3 * y0; c31 += x3 * y1; c32 += x3 * y2; c33 += x3 * y3;
      }
      const r0 = m * N + n, r1 = r0 + N, r2 = r1 + N, r3 = r2 + N;
      if (acc) {
        C[r0] += c00; C[r0 + 1] += c01; C[r0 + 2] += c02; C[r0 + 3] += c03;
        C[r1] += c10; C[r1 + 1] += c11; C[r1 + 2] += c12; C[r1 + 3] += c13;
        C[r2] += c20; C[r2 + 1] += c21; C[r2 + 2] += c22; C[r2 + 3] += c23;
        C[r3] += c30; C[r3 + 1] += c31; C[r3 + 2] += c32; C[r3 + 3] += c33;
      } else {
        C[r0] = c00; C[r0 + 1] = c01; C[r0 + 2] = c02; C[r0 + 3] = c03;
        C[r1] = c10; C[r1 + 1] = c11; C[r1 + 2] = c12; C[r1 + 3] = c13;
        C[r2] = c20; C[r2 + 1] = c21; C[r2 + 2] = c22; C[r2 + 3] = c23;
        C[r3] = c30; C[r3 + 1] = c31; C[r3 + 2] = c32; C[r3 + 3] = c33;
      }
    }
    for (; n < N; n++) edge(A, B, C, K, N, m, m + 4, n, acc);
  }
  for (; m < M; m++) for (let n = 0; n < N; n++) edge(A, B, C, K, N, m, m + 1, n, acc);
}

/** Column n of rows [m0, m1): plain dot products (the ragged edge of the 4×4 blocks). */
function edge(A: Float64Array, B: Float64Array, C: Float32Array | Float64Array, K: number, N: number, m0: number, m1: number, n: number, acc: boolean): void {
  const b0 = n * K;
  for (let m = m0; m < m1; m++) {
    const a0 = m * K;
    let s = 0;
    for (let k = 0; k < K; k++) s += A[a0 + k] * B[b0 + k];
    const i = m * N + n;
    if (acc) C[i] += s;
    else C[i] = s;
  }
}
