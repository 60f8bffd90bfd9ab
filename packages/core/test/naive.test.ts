import { describe, expect, it } from 'vitest';
import {
  dtypeRounder, naiveBackward, naiveForward, referenceBackward, referenceForward, roundScalar, tensor,
  type AttentionOptions, type DType, type HostTensor,
} from '../dist/index.js';
import { caseInputs, conformanceCases, createRng, hostTensor, makeCase, randomTensor, tensorValues } from '../dist/testing/index.js';

const fr = Math.fround;

describe('dtypeRounder', () => {
  const edges = [
    0, -0, 1, -1, 65504, 65519.99, 65520, -65520, 65536, 2 ** -24, 2 ** -25, 1.5 * 2 ** -25, 2 ** -26, 2 ** -14, 2 ** -14 - 2 ** -25,
    1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 2 ** -126, 2 ** -133, 2 ** -134, 3 * 2 ** -135, 3.3895313892515355e38, 3.39e38, 3.4028234663852886e38,
    1e39, Infinity, -Infinity, NaN, 0.1, -0.3, 1 / 3, 12345.678, 1e-40,
  ];
  for (const dtype of ['f16', 'bf16', 'f32'] as DType[]) {
    it(`${dtype}: agrees with roundScalar on edge values and 200k random doubles`, () => {
      const rd = dtypeRounder(dtype);
      for (const x of edges) expect(Object.is(rd(x), roundScalar(dtype, x)), `${dtype} ${x}`).toBe(true);
      const rng = createRng(dtype.length);
      for (let n = 0; n < 200_000; n++) {
        const x = rng.uniform(-2, 2) * 2 ** rng.int(-140, 130);
        const y = n % 2 ? fr(x) : x;
        const a = rd(y);
        const b = roundScalar(dtype, y);
        if (!Object.is(a, b)) expect(a, `${dtype} ${y}`).toBe(b);
      }
    });
  }
});

/** The documented model, written out with roundScalar (an independent encoder) for one head. */
function modelByHand(dtype: DType, q: number[][], k: number[][], v: number[][], dO: number[][], scale: number, cap: number, slope: number, causal: boolean) {
  const rd = (x: number) => roundScalar(dtype, x);
  const Tq = q.length, Tk = k.length, D = q[0].length;
  const acc = (xs: number[], ys: number[]) => xs.reduce((a, x, n) => fr(a + x * ys[n]), 0);
  const qs = q.map((r) => r.map((x) => rd(fr(x * fr(scale)))));
  const P: number[][] = [], T: number[][] = [], vis: boolean[][] = [];
  const out: number[][] = [], lse: number[] = [];
  for (let i = 0; i < Tq; i++) {
    vis.push([]);
    T.push([]);
    const s: number[] = [];
    for (let j = 0; j < Tk; j++) {
      vis[i].push(!causal || j <= i + Tk - Tq);
      let x = rd(acc(qs[i], k[j]));
      if (cap > 0) {
        const t = rd(fr(Math.tanh(rd(fr(x / fr(cap))))));
        T[i].push(t);
        x = rd(fr(t * fr(cap)));
      }
      if (slope !== 0) x = fr(x + fr(-slope * Math.abs(i + Tk - Tq - j)));
      s.push(vis[i][j] ? x : -Infinity);
    }
    const m = Math.max(...s);
    let sum = 0;
    const e = s.map((x) => (x === -Infinity ? 0 : fr(Math.exp(fr(x - m)))));
    for (const x of e) sum = fr(sum + x);
    lse.push(fr(m + fr(Math.log(sum))));
    P.push(e.map((x) => rd(fr(x / sum))));
    out.push(Array.from({ length: D }, (_, d) => rd(acc(P[i], k.map((_, j) => v[j][d])))));
  }
  const dq: number[][] = [], dk = k.map(() => new Array(D).fill(0)), dv = k.map(() => new Array(D).fill(0));
  const dS: number[][] = [];
  for (let i = 0; i < Tq; i++) {
    const dP = k.map((_, j) => rd(acc(dO[i], v[j])));
    const r = acc(P[i], dP);
    dS.push(dP.map((x, j) => {
      let g = rd(fr(P[i][j] * fr(x - r)));
      if (cap > 0) {
        const t = T[i][j];
        g = rd(fr(rd(fr(rd(fr(g * fr(cap))) * fr(1 - fr(t * t)))) / fr(cap)));
      }
      return vis[i][j] ? g : 0;
    }));
    dq.push(Array.from({ length: D }, (_, d) => rd(fr(rd(acc(dS[i], k.map((kr) => kr[d]))) * fr(scale)))));
  }
  for (let j = 0; j < Tk; j++) {
    for (let d = 0; d < D; d++) {
      dk[j][d] = rd(acc(dS.map((r) => r[j]), qs.map((r) => r[d])));
      dv[j][d] = rd(acc(P.map((r) => r[j]), dO.map((r) => r[d])));
    }
  }
  return { out, lse, dq, dk, dv };
}

describe('naive attention in dtype', () => {
  for (const dtype of ['f16', 'bf16', 'f32'] as DType[]) {
    for (const [label, o] of [
      ['plain', { scale: 0.7, cap: 0, slope: 0, causal: false }],
      ['softcap + ALiBi + causal', { scale: 1.1, cap: 1.5, slope: 0.3, causal: true }],
    ] as const) {
      it(`${dtype} ${label}: bit-identical to the documented model written out by hand`, () => {
        const rng = createRng(7);
        const Tq = 3, Tk = 4, D = 3;
        const mk = (T: number) => Array.from({ length: T }, () => Array.from({ length: D }, () => roundScalar(dtype, rng.normal() * 1.5)));
        const q = mk(Tq), k = mk(Tk), v = mk(Tk), dO = mk(Tq);
        const t = (rows: number[][], T: number) => hostTensor(rows.flat(), [1, T, 1, D], dtype);
        const opts: AttentionOptions = { scale: o.scale, causal: o.causal, ...(o.cap ? { softcap: o.cap } : {}), ...(o.slope ? { alibiSlopes: [o.slope] } : {}) };
        const got = naiveBackward(t(q, Tq), t(k, Tk), t(v, Tk), t(dO, Tq), opts);
        const want = modelByHand(dtype, q, k, v, dO, o.scale, o.cap, o.slope, o.causal);
        expect(Array.from(got.out)).toEqual(want.out.flat());
        expect(Array.from(got.lse)).toEqual(want.lse);
        expect(Array.from(got.dq)).toEqual(want.dq.flat());
        expect(Array.from(got.dk)).toEqual(want.dk.flat());
        expect(Array.from(got.dv)).toEqual(want.dv.flat());
        const f = naiveForward(t(q, Tq), t(k, Tk), t(v, Tk), opts);
        expect(Array.from(f.out)).toEqual(want.out.flat());
      });
    }
  }

  it('GQA: dK and dV of a kv head are the rounded sum of the rounded per-head gradients', () => {
    const c = makeCase({ dtype: 'f16', tq: 5, tk: 6, h: 4, hkv: 2, d: 8 });
    const i = caseInputs(c);
    const full = naiveBackward(i.q, i.k, i.v, i.dOut, i.options);
    // Split into per-query-head problems with Hkv = 1 and sum by hand.
    const rd = dtypeRounder('f16');
    const Q = tensorValues(i.q), K = tensorValues(i.k), V = tensorValues(i.v), DO = tensorValues(i.dOut);
    const pick = (src: Float64Array, T: number, Hs: number, h: number) => hostTensor(Array.from({ length: T * 8 }, (_, n) => src[(Math.floor(n / 8) * Hs + h) * 8 + (n % 8)]), [1, T, 1, 8], 'f16');
    for (let g = 0; g < 2; g++) {
      const parts = [0, 1].map((m) => naiveBackward(pick(Q, 5, 4, 2 * g + m), pick(K, 6, 2, g), pick(V, 6, 2, g), pick(DO, 5, 4, 2 * g + m)));
      for (let n = 0; n < 6 * 8; n++) {
        const idx = (Math.floor(n / 8) * 2 + g) * 8 + (n % 8);
        expect(full.dk[idx]).toBe(rd(fr(parts[0].dk[n] + parts[1].dk[n])));
        expect(full.dv[idx]).toBe(rd(fr(parts[0].dv[n] + parts[1].dv[n])));
      }
    }
  });

  it('f32 naive is within float32 error of the reference; f16 and bf16 errors are of their dtype', () => {
    const spec = { batch: 2, tq: 40, tk: 33, h: 2, hkv: 1, d: 32, causal: true, seed: 77 };
    const c = makeCase({ dtype: 'f32', ...spec });
    const i = caseInputs(c);
    const ref = referenceBackward(i.q, i.k, i.v, i.dOut, i.options);
    const nv = naiveBackward(i.q, i.k, i.v, i.dOut, i.options);
    const maxErr = (a: ArrayLike<number>, b: ArrayLike<number>) => {
      let e = 0, m = 0;
      for (let n = 0; n < a.length; n++) {
        e = Math.max(e, Math.abs(a[n] - b[n]));
        m = Math.max(m, Math.abs(b[n]));
      }
      return e / m;
    };
    for (const [a, b] of [[nv.out, ref.out], [nv.dq, ref.dq], [nv.dk, ref.dk], [nv.dv, ref.dv]] as const) {
      const e = maxErr(a, b);
      expect(e).toBeGreaterThan(0);
      expect(e).toBeLessThan(1e-5);
    }
    const errs: Record<string, number> = {};
    for (const dtype of ['f16', 'bf16'] as DType[]) {
      const j = caseInputs(makeCase({ dtype, ...spec }));
      const r = referenceForward(j.q, j.k, j.v, j.options);
      const n = naiveForward(j.q, j.k, j.v, j.options);
      const rd = dtypeRounder(dtype);
      for (const x of n.out) expect(rd(x)).toBe(x);
      errs[dtype] = maxErr(n.out, r.out);
    }
    expect(errs.f16).toBeGreaterThan(2 ** -12);
    expect(errs.f16).toBeLessThan(2 ** -5);
    expect(errs.bf16).toBeGreaterThan(errs.f16);
    expect(errs.bf16).toBeLessThan(2 ** -2);
  });

  it('rows that see no key: out 0, lse -Infinity, no gradient', () => {
    const rng = createRng(2);
    const q = randomTensor(rng, [1, 4, 1, 8], 'bf16');
    const k = randomTensor(rng, [1, 2, 1, 8], 'bf16');
    const r = naiveBackward(q, k, k, q, { causal: true });
    expect(r.lse[0]).toBe(-Infinity);
    expect(r.lse[1]).toBe(-Infinity);
    for (let n = 0; n < 16; n++) {
      expect(r.out[n]).toBe(0);
      expect(r.dq[n]).toBe(0);
    }
  });

  it('refuses problems above the allocation limit', () => {
    const big: HostTensor = { kind: 'host', dtype: 'f16', shape: [1, 50_000, 1, 8], data: new Uint16Array(400_000) };
    expect(() => naiveForward(big, big, big, {}, { maxBytes: 1e6 })).toThrowError(/would allocate/);
    const small = tensor(new Float32Array(8), [1, 1, 1, 8], 'f32');
    expect(naiveForward(small, small, small).out.length).toBe(8);
  });

  it('never overflows on the generated f16/bf16 cases (so the FlashAttention rule always has a baseline)', () => {
    const cases = conformanceCases().filter((c) => c.dtype !== 'f32');
    expect(cases.length).toBeGreaterThan(150);
    for (const c of cases) {
      const i = caseInputs(c);
      const n = naiveBackward(i.q, i.k, i.v, i.dOut, i.options);
      for (const [name, a] of [['out', n.out], ['dq', n.dq], ['dk', n.dk], ['dv', n.dv]] as const) {
        for (let x = 0; x < a.length; x++) if (!Number.isFinite(a[x])) expect.fail(`${c.name}: naive ${name}[${x}] = ${a[x]}`);
      }
    }
  });
});
