/**
 * The matrix product on device tensors (issue 25): every transpose pair, bias and accumulate,
 * odd sizes around the 64×64 tile and the 16-key step, against the float64 product with float32's
 * rounding bound; bad calls refused before anything is enqueued; stream order with attention.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { FAError, tensor, type HostTensor } from '@fa/core';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';
import { randn } from './ref.js';

let be: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}

/** The float64 product and, per element, the bound float32 summation in k order allows. */
function reference(tA: boolean, tB: boolean, M: number, N: number, K: number, a: Float32Array, b: Float32Array, bias: Float32Array | null, c0: Float32Array | null) {
  const ref = new Float64Array(M * N), bound = new Float64Array(M * N);
  const u = 2 ** -24;
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0, mag = 0;
      for (let k = 0; k < K; k++) {
        const x = (tA ? a[k * M + m] : a[m * K + k]) * (tB ? b[n * K + k] : b[k * N + n]);
        s += x;
        mag += Math.abs(x);
      }
      if (bias) { s += bias[n]; mag += Math.abs(bias[n]); }
      if (c0) { s += c0[m * N + n]; mag += Math.abs(c0[m * N + n]); }
      ref[m * N + n] = s;
      bound[m * N + n] = (K + 3) * u * mag + 1e-30;
    }
  }
  return { ref, bound };
}

describe('webgpu gemm', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be;
  afterAll(() => b.dispose());
  const up = (x: Float32Array, shape: number[]) => b.upload(tensor(x, shape));

  const shapes: [number, number, number][] = [[1, 1, 1], [1, 7, 3], [5, 1, 16], [64, 64, 16], [65, 63, 17], [130, 70, 33], [3, 200, 1], [70, 5, 0], [128, 96, 64]];
  for (const [M, N, K] of shapes) {
    for (const [tA, tB] of [[false, false], [false, true], [true, false], [true, true]] as const) {
      it(`M${M} N${N} K${K}${tA ? ' Aᵀ' : ''}${tB ? ' Bᵀ' : ''}, with bias and accumulate`, async () => {
        const seed = M * 1000 + N * 10 + K + (tA ? 7 : 0) + (tB ? 13 : 0);
        const a = randn(M * K, seed), bb = randn(K * N, seed + 1), bias = randn(N, seed + 2), c0 = randn(M * N, seed + 3);
        for (const [withBias, acc] of [[false, false], [true, false], [true, true]] as const) {
          const [da, db, dbias] = await Promise.all([up(a, [M * K]), up(bb, [K * N]), up(bias, [N])]);
          const dc = await up(acc ? c0 : new Float32Array(M * N).fill(NaN), [M * N]);
          await b.gemm({ transA: tA, transB: tB, M, N, K, a: da, b: db, c: dc, bias: withBias ? dbias : null, accumulate: acc });
          const got = (await b.read(dc)).data as Float32Array;
          const { ref, bound } = reference(tA, tB, M, N, K, a, bb, withBias ? bias : null, acc ? c0 : null);
          let worst = 0;
          for (let i = 0; i < ref.length; i++) worst = Math.max(worst, Math.abs(got[i] - ref[i]) / bound[i]);
          expect(worst, `worst error / bound (bias ${withBias}, accumulate ${acc})`).toBeLessThanOrEqual(1);
          for (const t of [da, db, dbias, dc]) b.disposeTensor(t);
        }
      });
    }
  }

  it('batched products at offsets and strides, one per z of the grid', async () => {
    const [B, M, N, K] = [3, 5, 7, 9];
    const a = randn(2 + B * M * K, 31), bb = randn(K * N, 32); // b shared by the batch (stride 0)
    const [da, db] = await Promise.all([up(a, [a.length]), up(bb, [bb.length])]);
    const dc = await up(new Float32Array(1 + B * M * N).fill(NaN), [1 + B * M * N]);
    await b.gemm({ transA: false, transB: false, M, N, K, a: da, b: db, c: dc, batch: B, aOffset: 2, strideA: M * K, strideB: 0, cOffset: 1, strideC: M * N });
    const got = (await b.read(dc)).data as Float32Array;
    for (let z = 0; z < B; z++) {
      const { ref, bound } = reference(false, false, M, N, K, a.subarray(2 + z * M * K, 2 + (z + 1) * M * K), bb, null, null);
      for (let i = 0; i < M * N; i++) expect(Math.abs(got[1 + z * M * N + i] - ref[i])).toBeLessThanOrEqual(bound[i]);
    }
    expect(Number.isNaN(got[0])).toBe(true); // before cOffset: untouched
    const code = async (p: Promise<unknown>) => p.then(() => 'no error', (e) => `${(e as FAError).code}: ${(e as FAError).message}`);
    expect(await code(b.gemm({ transA: false, transB: false, M, N, K, a: da, b: db, c: dc, batch: B, strideA: M * K, strideC: 0, accumulate: true }))).toMatch(/^E_ARG: gemm: the batch's products would overlap in c/);
    expect(await code(b.gemm({ transA: false, transB: false, M, N, K, a: da, b: db, c: dc, batch: B + 1, strideA: M * K, strideC: M * N }))).toMatch(/^E_SHAPE: gemm: a holds \d+ values; the products read up to/);
  });

  it('refuses bad calls with one line before anything is enqueued, and runs in stream order with attention', async () => {
    const a = await up(randn(6, 1), [6]), c = await up(new Float32Array(4), [4]);
    const code = async (p: Promise<unknown>) => p.then(() => 'no error', (e) => { expect(e).toBeInstanceOf(FAError); return `${(e as FAError).code}: ${(e as FAError).message}`; });
    expect(await code(b.gemm({ transA: false, transB: false, M: 2, N: 2, K: 3, a, b: a, c: a }))).toMatch(/^E_SHAPE: gemm: c holds 6 values/);
    expect(await code(b.gemm({ transA: false, transB: false, M: 2, N: 3, K: 3, a, b: await up(randn(9, 2), [9]), c: a }))).toMatch(/^E_ARG: gemm: c must not share a buffer with a/);
    expect(await code(b.gemm({ transA: false, transB: false, M: 2, N: 2, K: 3, a: tensor(randn(6, 1), [6]) as unknown as HostTensor, b: a, c }))).toMatch(/^E_ARG: gemm: a must be a webgpu device tensor/);
    expect(await code(b.gemm({ transA: false, transB: false, M: -1, N: 2, K: 3, a, b: a, c }))).toMatch(/^E_SHAPE: gemm: M must be/);
    // q = x·W on the device, straight into attention, one read at the end
    const [T, D] = [24, 16];
    const x = await up(randn(T * D, 5), [T * D]), w = await up(randn(D * D, 6), [D * D]);
    const q = await b.upload(tensor(new Float32Array(T * D), [1, T, 1, D]));
    await b.gemm({ transA: false, transB: false, M: T, N: D, K: D, a: x, b: w, c: q });
    const f = await b.forward(q, q, q, { causal: true });
    const qh = (await b.read(q)).data as Float32Array;
    const ref = await b.forward(tensor(qh, [1, T, 1, D]), tensor(qh, [1, T, 1, D]), tensor(qh, [1, T, 1, D]), { causal: true });
    expect((await b.read(f.out)).data).toEqual((ref.out as HostTensor).data);
  });
});
