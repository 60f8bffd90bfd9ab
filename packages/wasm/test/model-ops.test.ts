/**
 * The model ops (src/model-ops.ts over csrc/gemm.c and csrc/layer_ops.c) against @fa/core's op
 * kit (runOpConformance: the product's transpose pairs, ragged edges, K past the blocking, empty
 * dims, views, a transformer layer's shapes, the bias epilogue; gelu, layerNorm, cross-entropy,
 * AdamW and the row sum with their backward passes; each checked against a float64 reference;
 * and the bad calls, which must throw the checkers' FAErrors and leave every output untouched)
 * on every binary the engine loads here: SIMD128 and
 * relaxed SIMD, each with shared memory (worker threads) and unshared (one thread), and the
 * native levels this CPU runs (x86-64-v4 and v3 on an AVX-512 CPU). Plus what the engine's
 * memory must survive: a product between the steps of an attention call that waits on its
 * workers, device tensors held in the heap, and a disposed backend.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createRng, gemmError, gemmReference, randomValues, runOpConformance } from '@fa/core/testing';
import { isFAError, tensor, type GemmCall, type HostTensor } from '@fa/core';
import { createWasmBackend, enableRelaxedSimd, nativeTarget, type WasmBackend, type WasmBackendOptions } from '../dist/index.js';

const relaxed = await enableRelaxedSimd();
const native = await nativeTarget();
const nativeLevels = native.level === 'x86-64-v4' ? (['x86-64-v4', 'x86-64-v3'] as const) : native.level ? [native.level] : [];

const variants: [string, WasmBackendOptions][] = [
  ['wasm SIMD128, shared memory', { relaxedSimd: false }],
  ['wasm SIMD128, one thread', { relaxedSimd: false, threads: 0 }],
  ...(relaxed
    ? ([
        ['wasm relaxed SIMD, shared memory', { relaxedSimd: true }],
        ['wasm relaxed SIMD, one thread', { relaxedSimd: true, threads: 0 }],
      ] as [string, WasmBackendOptions][])
    : []),
  ...nativeLevels.map((l): [string, WasmBackendOptions] => [`native ${l}`, { native: true, nativeLevel: l }]),
];

const made: WasmBackend[] = [];
afterAll(async () => {
  for (const b of made) await b.dispose();
});
async function backend(o: WasmBackendOptions): Promise<WasmBackend> {
  const b = await createWasmBackend(o);
  made.push(b);
  return b;
}

const rand = (n: number, seed: number): Float32Array => randomValues(createRng(seed), n);

describe('model ops: the op kit', () => {
  if (!native.level) it.skip(`native levels skipped: ${native.why ?? 'unavailable'}`, () => undefined);
  for (const [name, o] of variants) {
    it(name, async () => {
      const b = await backend(o);
      expect(b.modelOps.engine).toBe(b.name);
      expect(b.modelOps.kernel).toContain(b.name === 'native' ? 'in place' : 'through scratch');
      const r = runOpConformance(b.modelOps);
      const failures = r.failures.map((f) => `${f.name}: ${f.message ?? ''}`);
      expect(failures, failures.join('\n')).toEqual([]);
      expect(r.failed).toBe(0);
      expect(r.passed).toBeGreaterThan(100);
    });
  }
});

type Shape = readonly [number, number, number, boolean, boolean];

/** C += op(A)·op(B) + bias on `many` threads equals one thread bit for bit, and the float64 reference. */
function expectSameAsOneThread(one: WasmBackend, many: WasmBackend, shapes: readonly Shape[]): void {
  for (const [M, N, K, ta, tb] of shapes) {
    const a = rand(M * K, M), bm = rand(K * N, N), bias = rand(N, K), c0 = rand(M * N, 3);
    const run = (b: WasmBackend) => {
      const c = Float32Array.from(c0);
      b.modelOps.gemm({ transA: ta, transB: tb, M, N, K, a, b: bm, c, accumulate: true, bias });
      return c;
    };
    const c1 = run(one), cm = run(many);
    expect(cm.every((x, i) => Object.is(x, c1[i])), `M${M} N${N} K${K}`).toBe(true);
    const ref = gemmReference({ transA: ta, transB: tb, M, N, K, a, b: bm, c: c0, accumulate: true });
    for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) ref[m * N + n] += bias[n];
    expect(gemmError(cm, ref)).toBeLessThan(1e-6);
  }
}

describe('model ops: the native product on several threads', () => {
  if (!native.level) it.skip(`native skipped: ${native.why ?? 'unavailable'}`, () => undefined);
  else
    it('splits by rows and by columns and gives the one-thread result bit for bit', async () => {
      const one = await backend({ native: true, threads: 0 });
      const four = await backend({ native: true, threads: 4 });
      expect(one.modelOps.kernel).toContain('1 thread');
      expect(four.modelOps.kernel).toContain('4 threads');
      // tall (split by rows), short and wide (by columns), transposed operands, bias and accumulate
      expectSameAsOneThread(one, four, [[1030, 300, 257, false, true], [20, 4099, 300, true, false], [513, 77, 1024, true, true]]);
    });
});

describe('model ops: the wasm product on the engine\'s workers', () => {
  it('splits C\'s rows over the workers and the caller and gives the one-thread result bit for bit', async () => {
    const one = await backend({ relaxedSimd: false, threads: 0 });
    const two = await backend({ relaxedSimd: false, threads: 2 });
    await two.warm();
    expect(two.modelOps.kernel).toContain("2 threads (the calling one and the engine's workers)");
    expectSameAsOneThread(one, two, [[1030, 300, 257, false, true], [513, 77, 1024, true, true], [64, 4099, 300, true, false]]);
  });
});

describe('model ops: the engine memory around a product', () => {
  const o: WasmBackendOptions = native.level ? { native: true } : {};

  it('a product between the steps of a pooled attention call changes neither', async () => {
    const b = await backend({ ...o, inlineBelowFlops: 0 });
    const [T, H, D] = [2048, 4, 64]; // long enough (tens of ms) for the product to land while the workers run
    const q = tensor(rand(T * H * D, 1), [1, T, H, D]), k = tensor(rand(T * H * D, 2), [1, T, H, D]), v = tensor(rand(T * H * D, 3), [1, T, H, D]);
    const alone = await b.forward(q, k, v, { causal: true });
    const g: GemmCall = { transA: false, transB: true, M: 300, N: 200, K: 130, a: rand(300 * 130, 4), b: rand(200 * 130, 5), c: new Float32Array(300 * 200) };
    const pending = b.forward(q, k, v, { causal: true });
    // the call is now waiting on its workers (or queued): the product runs above its arena
    await new Promise((r) => setTimeout(r, 0));
    b.modelOps.gemm(g);
    const during = await pending;
    expect(Array.from((during.out as HostTensor).data)).toEqual(Array.from((alone.out as HostTensor).data));
    expect(gemmError(g.c, gemmReference(g))).toBeLessThan(1e-6);
  });

  it('leaves device tensors held in the heap as they were', async () => {
    const b = await backend(o);
    const data = rand(4096, 6);
    const dev = await b.upload(tensor(data, [64, 64]));
    const g: GemmCall = { transA: true, transB: false, M: 257, N: 129, K: 300, a: rand(257 * 300, 7), b: rand(300 * 129, 8), c: rand(257 * 129, 9), accumulate: true };
    const ref = gemmReference(g);
    b.modelOps.gemm(g);
    expect(gemmError(g.c, ref)).toBeLessThan(1e-6);
    const back = await b.read(dev);
    expect(Array.from(back.data as Float32Array)).toEqual(Array.from(data));
  });

  it('refuses products once the backend is disposed', async () => {
    const b = await createWasmBackend(o);
    await b.dispose();
    const c = new Float32Array(4).fill(7);
    let err: unknown;
    try {
      b.modelOps.gemm({ transA: false, transB: false, M: 2, N: 2, K: 2, a: new Float32Array(4), b: new Float32Array(4), c });
    } catch (e) {
      err = e;
    }
    expect(isFAError(err) && err.code).toBe('E_DEVICE');
    expect(Array.from(c)).toEqual([7, 7, 7, 7]);
  });
});
