/**
 * The attention op: gradcheck with every option on the cpu backend (its recompute backward
 * against float64 central differences), the float64 path against @fa/core's reference, and
 * the FlashAttention contract of the tape node: it saves q, k, v, out and lse, nothing else.
 */
import { describe, expect, it } from 'vitest';
import { referenceForward, tensor as hostTensor, type AttentionOptions } from '@fa/core';
import { attention, gradcheck, memoryReport, mul, sum, Rng, randn, Tensor, type AttentionCallOptions } from '@fa/autograd';
import { expectGradcheck, leaf, relNormErr } from './helpers.js';

const BACKEND = 'cpu';

interface Case {
  name: string;
  q: number[];
  kv: number[];
  /** v's shape when it has a head dim of its own (default kv). */
  v?: number[];
  opts: AttentionOptions;
}

const B = 2;
const cases: Case[] = [
  { name: 'plain', q: [B, 6, 2, 4], kv: [B, 6, 2, 4], opts: {} },
  { name: 'causal', q: [B, 6, 2, 4], kv: [B, 6, 2, 4], opts: { causal: true } },
  { name: 'causal Tq<Tk (bottom-right)', q: [B, 4, 2, 4], kv: [B, 7, 2, 4], opts: { causal: true } },
  { name: 'causal Tq>Tk (fully masked rows)', q: [B, 5, 2, 4], kv: [B, 3, 2, 4], opts: { causal: true } },
  { name: 'window [2, 1]', q: [B, 7, 2, 4], kv: [B, 7, 2, 4], opts: { window: [2, 1] } },
  { name: 'window [-1, 2]', q: [B, 6, 2, 4], kv: [B, 6, 2, 4], opts: { window: [-1, 2] } },
  { name: 'causal + window [3, ·]', q: [B, 7, 2, 4], kv: [B, 7, 2, 4], opts: { causal: true, window: [3, 3] } },
  { name: 'GQA H=4 Hkv=2', q: [B, 5, 4, 4], kv: [B, 5, 2, 4], opts: {} },
  { name: 'MQA H=3 Hkv=1, causal', q: [B, 5, 3, 4], kv: [B, 5, 1, 4], opts: { causal: true } },
  { name: 'softcap 1.5', q: [B, 5, 2, 4], kv: [B, 5, 2, 4], opts: { softcap: 1.5, scale: 1.2 } },
  { name: 'ALiBi per head', q: [B, 6, 2, 4], kv: [B, 6, 2, 4], opts: { alibiSlopes: [0.5, 0.125] } },
  { name: 'ALiBi per (batch, head), causal', q: [B, 6, 2, 4], kv: [B, 6, 2, 4], opts: { alibiSlopes: [0.5, 0.25, 0.125, 0.0625], causal: true } },
  { name: 'scale 0.3', q: [B, 5, 2, 4], kv: [B, 5, 2, 4], opts: { scale: 0.3 } },
  { name: 'dropout 0.3 (a fixed mask per seed), GQA, causal', q: [B, 6, 4, 4], kv: [B, 6, 2, 4], opts: { causal: true, dropout: { p: 0.3, seed: 11 } } },
  { name: 'dropout 0.5 + sinks-free varlen + Dv', q: [8, 2, 4], kv: [11, 2, 4], v: [11, 2, 3], opts: { cuSeqlensQ: [0, 3, 3, 8], cuSeqlensK: [0, 4, 6, 11], dropout: { p: 0.5, seed: 2 ** 35 + 1, offset: 9 } } },
  { name: 'Dv 6 ≠ Dqk 4, GQA, causal', q: [B, 5, 4, 4], kv: [B, 6, 2, 4], v: [B, 6, 2, 6], opts: { causal: true } },
  { name: 'Dv 2 < Dqk 4, varlen', q: [8, 2, 4], kv: [11, 2, 4], v: [11, 2, 2], opts: { cuSeqlensQ: [0, 3, 3, 8], cuSeqlensK: [0, 4, 6, 11] } },
  { name: 'varlen (an empty segment, Tq≠Tk)', q: [8, 2, 4], kv: [11, 2, 4], opts: { cuSeqlensQ: [0, 3, 3, 8], cuSeqlensK: [0, 4, 6, 11] } },
  { name: 'varlen causal', q: [9, 2, 4], kv: [9, 2, 4], opts: { cuSeqlensQ: [0, 4, 9], cuSeqlensK: [0, 4, 9], causal: true } },
  {
    name: 'everything: varlen + causal + window + GQA + softcap + ALiBi',
    q: [9, 4, 4],
    kv: [10, 2, 4],
    opts: { cuSeqlensQ: [0, 4, 9], cuSeqlensK: [0, 5, 10], causal: true, window: [2, 0], softcap: 2, alibiSlopes: [0.3, 0.2, 0.1, 0.05] },
  },
];

describe(`attention gradcheck on the ${BACKEND} backend`, () => {
  for (const c of cases) {
    it(c.name, async () => {
      const seed = c.name.length * 7919;
      const q = leaf(c.q, seed + 1, { name: 'q' });
      const k = leaf(c.kv, seed + 2, { name: 'k' });
      const v = leaf(c.v ?? c.kv, seed + 3, { name: 'v' });
      const call = { ...c.opts, backend: BACKEND } satisfies AttentionCallOptions;
      const fn = (a: Tensor, b: Tensor, d: Tensor) => attention(a, b, d, call);

      // 1. The float64 path (every tape gradient in float64) against float64 differences.
      expectGradcheck(await gradcheck(fn, [q, k, v]), `${c.name} float64 path`);

      // 2. The backend's recompute backward (float32) against float64 differences.
      const r = await gradcheck(fn, [q, k, v], { precision: 'float32' });
      expectGradcheck(r, `${c.name} on ${BACKEND}`);
      // And as tight as the conformance policy for float32 gradients (‖err‖/‖ref‖ <= 1e-5).
      for (const x of r.inputs) expect(x.relNormErr, `${c.name} ${x.name}`).toBeLessThan(1e-5);
    });
  }
});

describe('attention sinks as a learnable tensor (gpt-oss)', () => {
  const sinkCases: { name: string; q: number[]; kv: number[]; opts: AttentionOptions }[] = [
    { name: 'sinks, GQA, causal Tq>Tk (rows that see no key)', q: [B, 5, 4, 4], kv: [B, 3, 2, 4], opts: { causal: true } },
    { name: 'sinks + varlen + window + softcap', q: [9, 2, 4], kv: [10, 2, 4], opts: { cuSeqlensQ: [0, 4, 9], cuSeqlensK: [0, 5, 10], window: [2, 1], softcap: 2 } },
  ];
  for (const c of sinkCases) {
    it(`${c.name}: dsinks by gradcheck, float64 path and ${BACKEND}`, async () => {
      const seed = c.name.length * 131;
      const H = c.q[c.q.length - 2];
      const q = leaf(c.q, seed + 1, { name: 'q' });
      const k = leaf(c.kv, seed + 2, { name: 'k' });
      const v = leaf(c.kv, seed + 3, { name: 'v' });
      const s = leaf([H], seed + 4, { name: 'sinks' });
      const fn = (a: Tensor, b: Tensor, d: Tensor, e: Tensor) => attention(a, b, d, { ...c.opts, sinks: e, backend: BACKEND });
      expectGradcheck(await gradcheck(fn, [q, k, v, s]), `${c.name} float64 path`);
      const r = await gradcheck(fn, [q, k, v, s], { precision: 'float32' });
      expectGradcheck(r, `${c.name} on ${BACKEND}`);
      for (const x of r.inputs) expect(x.relNormErr, `${c.name} ${x.name}`).toBeLessThan(1e-5);
    });
  }
  it('fixed sinks (an array) agree with the reference; a sinks tensor of the wrong shape is an E_SHAPE', async () => {
    const rng = new Rng(5);
    const q32 = randn([1, 6, 2, 4], { rng }), k32 = randn([1, 6, 2, 4], { rng }), v32 = randn([1, 6, 2, 4], { rng });
    const opts = { causal: true, sinks: [1.5, -0.5] };
    const ref = referenceForward(hostTensor(q32.data as Float32Array, q32.shape), hostTensor(k32.data as Float32Array, k32.shape), hostTensor(v32.data as Float32Array, v32.shape), opts);
    expect(relNormErr((await attention(q32, k32, v32, { ...opts, backend: BACKEND })).data, ref.out)).toBeLessThan(1e-5);
    expect(relNormErr((await attention(q32.clone({ precision: 'float64' }), k32.clone({ precision: 'float64' }), v32.clone({ precision: 'float64' }), opts)).data, ref.out)).toBeLessThan(1e-13);
    await expect(attention(q32, k32, v32, { sinks: randn([2, 1], { rng }), backend: BACKEND })).rejects.toMatchObject({ code: 'E_SHAPE' });
    await expect(attention(q32, k32, v32, { sinks: [1, 2, 3], backend: BACKEND })).rejects.toMatchObject({ code: 'E_SHAPE' });
  });
});

describe('the float64 path agrees with @fa/core’s reference', () => {
  for (const c of cases) {
    it(c.name, async () => {
      const rng = new Rng(c.name.length);
      const q32 = randn(c.q, { rng });
      const k32 = randn(c.kv, { rng });
      const v32 = randn(c.v ?? c.kv, { rng });
      const ref = referenceForward(hostTensor(q32.data as Float32Array, c.q), hostTensor(k32.data as Float32Array, c.kv), hostTensor(v32.data as Float32Array, c.v ?? c.kv), c.opts);
      const ours = await attention(q32.clone({ precision: 'float64' }), k32.clone({ precision: 'float64' }), v32.clone({ precision: 'float64' }), c.opts);
      expect(relNormErr(ours.data, ref.out)).toBeLessThan(1e-13);
      const onBackend = await attention(q32, k32, v32, { ...c.opts, backend: BACKEND });
      expect(relNormErr(onBackend.data, ref.out)).toBeLessThan(1e-5);
    });
  }
});

describe('what the attention node keeps', () => {
  it('saves exactly q, k, v, out and lse — no T×T buffer', async () => {
    const [b, t, h, d] = [1, 64, 2, 8];
    const rng = new Rng(3);
    // q, k, v are activations (made by ops), as in a model.
    const qs = randn([b, t, h, d], { rng });
    const qa = mul(qs, randn([b, t, h, d], { rng, requiresGrad: true }));
    const ka = mul(qs, randn([b, t, h, d], { rng, requiresGrad: true }));
    const va = mul(qs, randn([b, t, h, d], { rng, requiresGrad: true }));
    const y = await attention(qa, ka, va, { causal: true, backend: BACKEND });
    const rep = memoryReport(y);
    const att = rep.byOp.attention;
    expect(att.nodes).toBe(1);
    const tensorBytes = b * t * h * d * 4;
    expect(att.byWhat).toEqual({ q: tensorBytes, k: tensorBytes, v: tensorBytes, out: tensorBytes, lse: b * h * t * 4 });
    expect(att.bytes).toBe(4 * tensorBytes + b * h * t * 4);
  });

  it('backward without retainGraph frees the saved buffers; a second backward says what to do', async () => {
    const rng = new Rng(4);
    const q = randn([1, 4, 1, 4], { rng, requiresGrad: true });
    const k = randn([1, 4, 1, 4], { rng, requiresGrad: true });
    const v = randn([1, 4, 1, 4], { rng, requiresGrad: true });
    const loss = sum(await attention(q, k, v, { backend: BACKEND }));
    await loss.backward();
    expect(memoryReport(loss).bytes).toBe(0);
    await expect(loss.backward()).rejects.toThrow(/retainGraph/);
  });

  it('unsupported or invalid problems fail with an FAError that says why', async () => {
    const rng = new Rng(5);
    const q = randn([1, 4, 3, 4], { rng, requiresGrad: true });
    const k = randn([1, 4, 2, 4], { rng });
    await expect(attention(q, k, k, { backend: BACKEND })).rejects.toMatchObject({ code: 'E_SHAPE' });
    await expect(attention(q, q, q, { backend: 'no-such-backend' })).rejects.toMatchObject({ code: 'E_ARG' });
  });
});

describe('16-bit attention (dtype: f16 / bf16)', () => {
  for (const [dtype, tol] of [['f16', 3e-3], ['bf16', 2e-2]] as const) {
    it(`${dtype}: gradients near the float64 ones; the node keeps q, k, v and out in 16 bits`, async () => {
      const shape = [2, 16, 4, 8];
      const kvShape = [2, 16, 2, 8];
      const rng = new Rng(8);
      const mk = (s: number[]) => randn(s, { rng, requiresGrad: true });
      const [q, k, v] = [mk(shape), mk(kvShape), mk(kvShape)];
      const w = randn(shape, { rng });
      const opts = { causal: true, softcap: 5, backend: BACKEND, dtype } satisfies AttentionCallOptions;
      const y = await attention(mul(q, 1), mul(k, 1), mul(v, 1), opts);
      const att = memoryReport(y).byOp.attention;
      const n = shape.reduce((a, b) => a * b, 1);
      const nkv = kvShape.reduce((a, b) => a * b, 1);
      expect(att.byWhat).toEqual({ q: 2 * n, k: 2 * nkv, v: 2 * nkv, out: 2 * n, lse: 2 * 4 * 16 * 4 });
      await sum(mul(y, w)).backward();

      const [q64, k64, v64] = [q, k, v].map((t) => t.clone({ precision: 'float64', requiresGrad: true }));
      await sum(mul(await attention(q64, k64, v64, opts), w)).backward();
      for (const [a, b] of [[q, q64], [k, k64], [v, v64]]) {
        const e = relNormErr(a.grad!.data, b.grad!.data);
        console.log(`${dtype} attention gradient ‖Δ‖/‖ref‖ = ${e.toExponential(2)}`);
        expect(e).toBeLessThan(tol);
      }
      expect(relNormErr(y.data, (await attention(q64, k64, v64, opts)).data)).toBeLessThan(tol);
    });
  }
});
