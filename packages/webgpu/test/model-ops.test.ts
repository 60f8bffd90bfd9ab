/**
 * The model ops on the WebGPU engine's device tensors (issue 25): core's op kit (the gemm and
 * layer-op cases, float64 references, float32's rule) through its device adapter; ops not on
 * this engine yet are listed as skipped with the reason. Bad calls are refused at the call.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { FAError, tensor } from '@fa/core';
import { runDeviceOpConformance } from '@fa/core/testing';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';

let be: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}

afterAll(() => be?.dispose());

describe('webgpu model ops (device tensors)', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be;

  it('the op kit passes (gemm and layer ops against float64)', async () => {
    const s = await runDeviceOpConformance(b, b.deviceOps as never);
    const skipped = new Map<string, number>();
    for (const r of s.results) if (r.skipped) skipped.set(r.skipped, (skipped.get(r.skipped) ?? 0) + 1);
    console.log(`webgpu device op kit: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped (${[...skipped].map(([k, n]) => `${k}: ${n}`).join('; ')})`);
    expect(s.results.filter((r) => !r.pass).map((r) => `${r.name}: ${r.message}`)).toEqual([]);
    expect(s.passed).toBeGreaterThan(150);
  });

  it('refuses bad calls with one line, nothing enqueued', async () => {
    const ops = b.deviceOps;
    const t = async (n: number) => b.upload(tensor(new Float32Array(n).fill(0.5), [n]));
    const code = async (p: Promise<unknown>) => p.then(() => 'no error', (e) => { expect(e).toBeInstanceOf(FAError); expect((e as Error).message).not.toMatch(/\n/); return `${(e as FAError).code}: ${(e as FAError).message}`; });
    const x = await t(6), y = await t(5);
    expect(await code(ops.gelu({ x, y, approximate: 'none' }))).toMatch(/^E_SHAPE: gelu: y holds 5 values, 6 expected/);
    expect(await code(ops.gelu({ x, y: x, approximate: 'tanh' }))).toMatch(/^E_ARG: gelu: y must not share a buffer with x/);
    expect(await code(ops.gelu({ x: tensor(new Float32Array(6), [6]) as never, y, approximate: 'none' }))).toMatch(/^E_ARG: gelu: x must be a webgpu device tensor/);
    expect(await code(ops.adamw({ param: x, grad: await t(6), m: await t(6), v: await t(6), lr: 1e-3, beta1: 0.9, beta2: 1, eps: 1e-8, weightDecay: 0, step: 1 }))).toMatch(/^E_ARG: adamw: beta2 must be in \[0, 1\)/);
    const logits = await t(6), lse = await t(2), loss = await t(2);
    const bad = await b.uploadIndex(Int32Array.of(1, 3));
    expect(await code(ops.crossEntropy({ rows: 2, classes: 3, logits, targets: bad, ignoreIndex: -100, lse, loss }))).toMatch(/^E_ARG: crossEntropy: targets\[1\] = 3 is not a class/);
    expect(await code(ops.crossEntropy({ rows: 2, classes: 3, logits, targets: Int32Array.of(0, 1) as never, ignoreIndex: -100, lse, loss }))).toMatch(/^E_ARG: crossEntropy: targets must be a webgpu index tensor/);
    expect(await code(b.sync())).toBe('no error');
  });
});

describe('webgpu device ops beyond the kit (what model code needs around them)', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be;
  const rand = (n: number, s: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + s) * 43758.5453 % 1);
  const up = (x: Float32Array) => b.upload(tensor(x, [x.length]));
  const host = async (t: Parameters<WebGPUBackend['read']>[0]) => (await b.read(t)).data as Float32Array;
  const close = (got: Float32Array, ref: ArrayLike<number>) => {
    let num = 0, den = 0;
    for (let i = 0; i < ref.length; i++) { num += (got[i] - ref[i]) ** 2; den += ref[i] ** 2; }
    expect(got.length).toBe(ref.length);
    expect(Math.sqrt(num / Math.max(den, 1e-30))).toBeLessThanOrEqual(1e-6);
  };

  it('allocTensor: zero-filled at once (also over a pooled buffer), or left as is', async () => {
    const t = await up(rand(300, 1));
    b.disposeTensor(t); // back to the pool
    const z = b.allocTensor('f32', [300]);
    expect(Array.from(await host(z)).every((x) => x === 0)).toBe(true);
    const u = b.allocTensor('f32', [3, 4], { uninitialized: true });
    expect(u.shape).toEqual([3, 4]);
    expect(() => b.allocTensor('f64' as 'f32', [2])).toThrow(/E_DTYPE|dtype must be/);
    for (const x of [z, u]) b.disposeTensor(x);
  });

  it('axpy, embedding and its backward (a fixed order), copy2d', async () => {
    const ops = b.deviceOps;
    const x = rand(100, 2), y = rand(100, 3);
    const dx = await up(x), dy = await up(y);
    await ops.axpy({ n: 70, alpha: 0.5, x: dx, beta: 2, y: dy });
    close(await host(dy), Array.from(y, (v, i) => (i < 70 ? 0.5 * x[i] + 2 * v : v)));
    const [V, C, N] = [11, 5, 23];
    const table = rand(V * C, 4), g = rand(N * C, 5);
    const idsHost = Int32Array.from({ length: N }, (_, i) => (i * 7) % V);
    const ids = await b.uploadIndex(idsHost);
    const out = b.allocTensor('f32', [N * C]);
    await ops.embedding({ rows: N, dim: C, vocab: V, table: await up(table), ids, out });
    close(await host(out), Array.from({ length: N * C }, (_, i) => table[idsHost[Math.floor(i / C)] * C + (i % C)]));
    const dt = b.allocTensor('f32', [V * C]);
    await ops.embeddingBackward({ rows: N, dim: C, vocab: V, grad: await up(g), ids, dtable: dt });
    const ref = new Float64Array(V * C);
    for (let r = 0; r < N; r++) for (let c = 0; c < C; c++) ref[idsHost[r] * C + c] += g[r * C + c];
    close(await host(dt), ref);
    // split a fused [rows, 3C] projection's middle third out, then add it back into another
    const [R, W] = [6, 4];
    const qkv = rand(R * 3 * W, 6);
    const k = b.allocTensor('f32', [R * W]);
    await ops.copy2d({ rows: R, cols: W, src: await up(qkv), srcOffset: W, srcStride: 3 * W, dst: k, dstOffset: 0, dstStride: W });
    close(await host(k), Array.from({ length: R * W }, (_, i) => qkv[Math.floor(i / W) * 3 * W + W + (i % W)]));
    const code = async (p: Promise<unknown>) => p.then(() => 'no error', (e) => `${(e as FAError).code}: ${(e as FAError).message}`);
    expect(await code(ops.embedding({ rows: 2, dim: C, vocab: V, table: await up(table), ids: await b.uploadIndex(Int32Array.of(0, 11)), out: b.allocTensor('f32', [2 * C]) }))).toMatch(/^E_ARG: embedding: ids\[1\] = 11 is not an id \(0 to 10\)/);
    expect(await code(ops.copy2d({ rows: 2, cols: 4, src: k, srcOffset: 0, srcStride: 4, dst: b.allocTensor('f32', [7]), dstOffset: 0, dstStride: 4 }))).toMatch(/^E_SHAPE: copy2d: dst holds 7 values, at least 8 needed/);
  });
});
