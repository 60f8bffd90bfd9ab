/**
 * Malformed calls, table-driven: each must fail with the right FAError code, both in the shared
 * validation (describeProblem / describeBackward) and through a real engine's forward/backward
 * (the "cpu" backend, via the AttentionBackend interface). Afterwards the engine must still
 * compute a good call correctly.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FAError,
  describeBackward,
  describeProblem,
  resolveBackend,
  toBF16Bits,
  type AttentionBackend,
  type AttentionOptions,
  type DType,
  type FAErrorCode,
  type HostTensor,
  type Tensor,
} from '../dist/index.js';

// ---------------------------------------------------------------------------------------------
// Inputs: q [B=2, Tq=5, H=4, D=8], k/v [2, Tk=7, Hkv=2, 8] — GQA, Tq ≠ Tk.

let seed = 7;
const rnd = () => ((seed = (seed * 1664525 + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);

function t(shape: number[], dtype: DType = 'f32'): HostTensor {
  const n = numel(shape);
  const f = Float32Array.from({ length: n }, rnd);
  const data = dtype === 'f32' ? f : Uint16Array.from(f, (x) => toBF16Bits(x));
  return { kind: 'host', dtype, shape, data };
}
const raw = (shape: unknown, data: unknown, dtype: unknown = 'f32'): HostTensor => ({ kind: 'host', dtype, shape, data }) as unknown as HostTensor;

const Q = [2, 5, 4, 8];
const KV = [2, 7, 2, 8];
const q = t(Q);
const k = t(KV);
const v = t(KV);
const out = t(Q);
const dOut = t(Q);
const lse = t([2, 4, 5]);
// varlen: q [totalQ=6, 4, 8], k/v [totalK=9, 2, 8], two sequences
const qp = t([6, 4, 8]);
const kp = t([9, 2, 8]);
const vp = t([9, 2, 8]);
const cuQ = Int32Array.from([0, 2, 6]);
const cuK = Int32Array.from([0, 4, 9]);

interface Case {
  name: string;
  code: FAErrorCode;
  /** Forward-shaped: (q, k, v, opts); backward-shaped additionally (out, dOut, lse). */
  args: { q: unknown; k: unknown; v: unknown; opts?: unknown; out?: unknown; dOut?: unknown; lse?: unknown };
  backward?: boolean;
}

const F = (name: string, code: FAErrorCode, args: Partial<Case['args']>): Case => ({ name, code, args: { q, k, v, ...args } });
const B = (name: string, code: FAErrorCode, args: Partial<Case['args']>): Case => ({ name, code, backward: true, args: { q, k, v, out, dOut, lse, ...args } });
const VL = (name: string, code: FAErrorCode, opts: Record<string, unknown>): Case => ({ name, code, args: { q: qp, k: kp, v: vp, opts: { cuSeqlensQ: cuQ, cuSeqlensK: cuK, ...opts } } });

const cases: Case[] = [
  // ranks and shapes
  F('q of rank 3 without cu_seqlens', 'E_SHAPE', { q: t([2, 5, 32]) }),
  F('q of rank 5', 'E_SHAPE', { q: t([1, 2, 5, 4, 8]) }),
  F('k and v of rank 3', 'E_SHAPE', { k: t([2, 7, 16]), v: t([2, 7, 16]) }),
  F('scalar q', 'E_SHAPE', { q: t([]) }),
  F('head dim of k differs from q', 'E_SHAPE', { k: t([2, 7, 2, 16]), v: t([2, 7, 2, 16]) }),
  F('H % Hkv != 0 (4 % 3)', 'E_SHAPE', { k: t([2, 7, 3, 8]), v: t([2, 7, 3, 8]) }),
  F('Hkv > H', 'E_SHAPE', { k: t([2, 7, 8, 8]), v: t([2, 7, 8, 8]) }),
  F('k and v shapes differ (Tk)', 'E_SHAPE', { v: t([2, 6, 2, 8]) }),
  F('k and v shapes differ (Hkv)', 'E_SHAPE', { v: t([2, 7, 1, 8]) }),
  F('v head dim 0', 'E_SHAPE', { v: t([2, 7, 2, 0]) }),
  F('batch of k differs from q', 'E_SHAPE', { k: t([3, 7, 2, 8]), v: t([3, 7, 2, 8]) }),
  F('head dim 0', 'E_SHAPE', { q: t([2, 5, 4, 0]), k: t([2, 7, 2, 0]), v: t([2, 7, 2, 0]) }),
  F('zero heads', 'E_SHAPE', { q: t([2, 5, 0, 8]), k: t([2, 7, 0, 8]), v: t([2, 7, 0, 8]) }),
  F('negative extent', 'E_SHAPE', { q: raw([2, -5, 4, 8], new Float32Array(0)) }),
  F('fractional extent', 'E_SHAPE', { q: raw([2, 2.5, 4, 8], new Float32Array(160)) }),
  // dtypes and data
  F('q f16, k and v f32', 'E_DTYPE', { q: t(Q, 'f16') }),
  F('v bf16, q and k f32', 'E_DTYPE', { v: t(KV, 'bf16') }),
  F('f32 tensor holding a Uint16Array', 'E_DTYPE', { q: raw(Q, new Uint16Array(numel(Q))) }),
  F('bf16 tensor holding a Float32Array', 'E_DTYPE', { q: raw(Q, new Float32Array(numel(Q)), 'bf16'), k: t(KV, 'bf16'), v: t(KV, 'bf16') }),
  F('f32 tensor holding a Float64Array', 'E_DTYPE', { k: raw(KV, new Float64Array(numel(KV))) }),
  F('f32 tensor holding a plain array', 'E_DTYPE', { k: raw(KV, Array.from({ length: numel(KV) }, () => 0)) }),
  F('unknown dtype "f64"', 'E_DTYPE', { q: raw(Q, new Float32Array(numel(Q)), 'f64') }),
  F('data too short for the shape', 'E_SHAPE', { q: raw(Q, new Float32Array(numel(Q) - 1)) }),
  F('data too long for the shape', 'E_SHAPE', { v: raw(KV, new Float32Array(numel(KV) + 8)) }),
  // not tensors
  F('q is a bare Float32Array', 'E_ARG', { q: new Float32Array(numel(Q)) }),
  F('k is null', 'E_ARG', { k: null }),
  F('v is undefined', 'E_ARG', { v: undefined }),
  F('q is a number', 'E_ARG', { q: 3 }),
  F('a disposed device tensor', 'E_ARG', { q: { kind: 'device', backend: 'cpu', dtype: 'f32', shape: Q, handle: null, disposed: true } }),
  // options
  F('options is null', 'E_ARG', { opts: null }),
  F('window [-2, 0]', 'E_ARG', { opts: { window: [-2, 0] } }),
  F('window [0, -5]', 'E_ARG', { opts: { window: [0, -5] } }),
  F('non-integer window [1.5, 0]', 'E_ARG', { opts: { window: [1.5, 0] } }),
  F('window with three entries', 'E_ARG', { opts: { window: [1, 1, 1] } }),
  F('window as a number', 'E_ARG', { opts: { window: 3 } }),
  F('window with NaN', 'E_ARG', { opts: { window: [NaN, 0] } }),
  F('softcap 0', 'E_ARG', { opts: { softcap: 0 } }),
  F('softcap < 0', 'E_ARG', { opts: { softcap: -30 } }),
  F('softcap NaN', 'E_ARG', { opts: { softcap: NaN } }),
  F('softcap Infinity', 'E_ARG', { opts: { softcap: Infinity } }),
  F('softcap as a string', 'E_ARG', { opts: { softcap: '30' } }),
  F('scale NaN', 'E_ARG', { opts: { scale: NaN } }),
  F('scale Infinity', 'E_ARG', { opts: { scale: Infinity } }),
  F('scale -Infinity', 'E_ARG', { opts: { scale: -Infinity } }),
  F('scale as a string', 'E_ARG', { opts: { scale: '0.5' } }),
  F('causal as a string', 'E_ARG', { opts: { causal: 'yes' } }),
  F('deterministic as a number', 'E_ARG', { opts: { deterministic: 1 } }),
  F('alibi with 3 slopes for H = 4', 'E_SHAPE', { opts: { alibiSlopes: new Float32Array(3) } }),
  F('alibi with B·H + 1 slopes', 'E_SHAPE', { opts: { alibiSlopes: new Float32Array(9) } }),
  F('alibi with a NaN slope', 'E_ARG', { opts: { alibiSlopes: Float32Array.from([0.5, NaN, 0.25, 0.125]) } }),
  F('alibi with an infinite slope', 'E_ARG', { opts: { alibiSlopes: [0.5, 0.25, Infinity, 0.125] } }),
  F('alibi as a Float64Array', 'E_DTYPE', { opts: { alibiSlopes: new Float64Array(4) } }),
  F('alibi as a number', 'E_DTYPE', { opts: { alibiSlopes: 0.5 } }),
  // varlen
  F('only cuSeqlensQ', 'E_ARG', { q: qp, k: kp, v: vp, opts: { cuSeqlensQ: cuQ } }),
  F('only cuSeqlensK', 'E_ARG', { q: qp, k: kp, v: vp, opts: { cuSeqlensK: cuK } }),
  F('cu_seqlens with [B, T, H, D] inputs (rank 4)', 'E_SHAPE', { opts: { cuSeqlensQ: Int32Array.from([0, 5, 10]), cuSeqlensK: Int32Array.from([0, 7, 14]) } }),
  VL('non-monotone cuSeqlensQ', 'E_ARG', { cuSeqlensQ: Int32Array.from([0, 4, 2, 6]), cuSeqlensK: Int32Array.from([0, 3, 6, 9]) }),
  VL('non-monotone cuSeqlensK', 'E_ARG', { cuSeqlensK: Int32Array.from([0, 10, 9]) }),
  VL('cuSeqlensQ not starting at 0', 'E_ARG', { cuSeqlensQ: Int32Array.from([1, 2, 6]) }),
  VL('cuSeqlensK not starting at 0', 'E_ARG', { cuSeqlensK: Int32Array.from([2, 4, 9]) }),
  VL('cuSeqlensQ ends short of totalQ', 'E_SHAPE', { cuSeqlensQ: Int32Array.from([0, 2, 5]) }),
  VL('cuSeqlensK ends past totalK', 'E_SHAPE', { cuSeqlensK: Int32Array.from([0, 4, 10]) }),
  VL('cuSeqlensQ and cuSeqlensK of different lengths', 'E_SHAPE', { cuSeqlensK: Int32Array.from([0, 4, 6, 9]) }),
  VL('cu_seqlens of length 1', 'E_SHAPE', { cuSeqlensQ: Int32Array.from([6]), cuSeqlensK: Int32Array.from([9]) }),
  VL('cu_seqlens as a Float32Array', 'E_DTYPE', { cuSeqlensQ: Float32Array.from([0, 2, 6]) }),
  VL('cu_seqlens with a fractional entry', 'E_DTYPE', { cuSeqlensK: [0, 4.5, 9] }),
  VL('varlen alibi with B·H + 1 slopes', 'E_SHAPE', { alibiSlopes: new Float32Array(9) }),
  // backward extras
  B('lse of shape [B, Tq, H]', 'E_SHAPE', { lse: t([2, 5, 4]) }),
  B('lse of shape [B, H, Tq + 1]', 'E_SHAPE', { lse: t([2, 4, 6]) }),
  B('lse in bf16', 'E_DTYPE', { lse: t([2, 4, 5], 'bf16') }),
  B('lse not a tensor', 'E_ARG', { lse: new Float32Array(40) }),
  B('dOut of k\'s shape', 'E_SHAPE', { dOut: t(KV) }),
  B('dOut of rank 3', 'E_SHAPE', { dOut: t([10, 4, 8]) }),
  B('dOut in bf16', 'E_DTYPE', { dOut: t(Q, 'bf16') }),
  B('dOut null', 'E_ARG', { dOut: null }),
  B('out of the wrong shape', 'E_SHAPE', { out: t([2, 5, 4, 4]) }),
  B('out with data too short', 'E_SHAPE', { out: raw(Q, new Float32Array(3)) }),
  B('varlen lse in [B, H, Tq] layout', 'E_SHAPE', { q: qp, k: kp, v: vp, out: t([6, 4, 8]), dOut: t([6, 4, 8]), lse: t([2, 4, 3]), opts: { cuSeqlensQ: cuQ, cuSeqlensK: cuK } }),
  B('bad q in a backward call', 'E_SHAPE', { q: t([2, 5, 4, 16]) }),
  B('bad option in a backward call', 'E_ARG', { opts: { softcap: -1 } }),
];

function syncCode(fn: () => unknown): FAErrorCode | string {
  try {
    fn();
  } catch (e) {
    return e instanceof FAError ? e.code : `not an FAError: ${String(e)}`;
  }
  return 'no error';
}

async function asyncCode(fn: () => Promise<unknown>): Promise<FAErrorCode | string> {
  try {
    await fn();
  } catch (e) {
    return e instanceof FAError ? e.code : `not an FAError: ${String(e)}`;
  }
  return 'no error';
}

describe('malformed calls: shared validation', () => {
  it('has at least 30 cases', () => expect(cases.length).toBeGreaterThanOrEqual(30));
  for (const c of cases) {
    it(`${c.name} → ${c.code}`, () => {
      const a = c.args;
      const got = c.backward
        ? syncCode(() => describeBackward(a.q, a.k, a.v, a.out, a.dOut, a.lse, a.opts as AttentionOptions))
        : syncCode(() => describeProblem(a.q, a.k, a.v, a.opts as AttentionOptions));
      expect(got).toBe(c.code);
    });
  }
  it('messages say what to change', () => {
    const msg = (fn: () => unknown) => {
      try {
        fn();
      } catch (e) {
        return (e as Error).message;
      }
      return '';
    };
    expect(msg(() => describeProblem(q, t([2, 7, 3, 8]), t([2, 7, 3, 8])))).toMatch(/multiple of Hkv/);
    expect(msg(() => describeProblem(q, k, v, { softcap: 0 }))).toMatch(/softcap must be a finite number > 0/);
    expect(msg(() => describeProblem(qp, kp, vp, { cuSeqlensQ: cuQ }))).toMatch(/both cuSeqlensQ and cuSeqlensK/);
  });
});

describe('window edges past every sequence', () => {
  it('become -1 (unbounded): engines with 32-bit windows never see edges up to 2^53; narrower ones are kept', () => {
    // q, k: 5 queries, 7 keys (t() shapes above): tq + tk = 12
    const p = (window: [number, number]) => describeProblem(q, k, v, { window });
    expect(p([2 ** 40, 2 ** 32 + 3])).toMatchObject({ windowLeft: -1, windowRight: -1 });
    expect(p([Number.MAX_SAFE_INTEGER, 3])).toMatchObject({ windowLeft: -1, windowRight: 3 });
    expect(p([q.shape[1] + k.shape[1], q.shape[1] + k.shape[1] - 1])).toMatchObject({ windowLeft: -1, windowRight: q.shape[1] + k.shape[1] - 1 });
    expect(p([0, 0])).toMatchObject({ windowLeft: 0, windowRight: 0 });
    expect(describeProblem(q, k, v, { window: [2 ** 33, 2 ** 33], causal: true })).toMatchObject({ windowLeft: -1, windowRight: 0 });
  });
});

describe('malformed calls through the cpu backend', () => {
  let backend: AttentionBackend;
  beforeAll(async () => {
    backend = await resolveBackend('cpu');
  });
  afterAll(async () => {
    // the registry owns the instance; leave it for other files in this worker
  });

  it('unknown backend names are E_ARG', async () => {
    expect(await asyncCode(() => resolveBackend('no-such-engine'))).toBe('E_ARG');
    expect(await asyncCode(() => resolveBackend(['cpu', 'no-such-engine']))).toBe('E_ARG');
    expect(await asyncCode(() => resolveBackend(''))).toBe('E_ARG');
  });

  for (const c of cases) {
    it(`${c.name} → ${c.code}`, async () => {
      const a = c.args;
      const got = c.backward
        ? await asyncCode(() => backend.backward(a.q as Tensor, a.k as Tensor, a.v as Tensor, a.out as Tensor, a.dOut as Tensor, a.lse as Tensor, a.opts as AttentionOptions))
        : await asyncCode(() => backend.forward(a.q as Tensor, a.k as Tensor, a.v as Tensor, a.opts as AttentionOptions));
      expect(got).toBe(c.code);
    });
  }

  it('still computes a good call correctly after all of the bad ones', async () => {
    for (const opts of [{}, { causal: true, softcap: 5, alibiSlopes: [0.5, 0.25, 0.125, 0.0625] }] as AttentionOptions[]) {
      const r = await backend.forward(q, k, v, opts);
      const o = await backend.read(r.out);
      const l = await backend.read(r.lse);
      const ref = attentionRef(q, k, v, dOut, opts);
      expect(o.shape).toEqual(Q);
      expect(l.shape).toEqual([2, 4, 5]);
      expect(relErr(o.data as Float32Array, ref.out)).toBeLessThan(1e-5);
      expect(relErr(l.data as Float32Array, ref.lse)).toBeLessThan(1e-5);
      const g = await backend.backward(q, k, v, r.out, dOut, r.lse, opts);
      const [dq, dk, dv] = await Promise.all([backend.read(g.dq), backend.read(g.dk), backend.read(g.dv)]);
      expect(dq.shape).toEqual(Q);
      expect(dk.shape).toEqual(KV);
      expect(relErr(dq.data as Float32Array, ref.dq)).toBeLessThan(1e-5);
      expect(relErr(dk.data as Float32Array, ref.dk)).toBeLessThan(1e-5);
      expect(relErr(dv.data as Float32Array, ref.dv)).toBeLessThan(1e-5);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// A small float64 reference (dense [B, T, H, D], causal, softcap, ALiBi) for the check above,
// independent of the library's own reference.

function relErr(x: Float32Array, ref: Float64Array): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < ref.length; i++) {
    num += (x[i] - ref[i]) ** 2;
    den += ref[i] ** 2;
  }
  return Math.sqrt(num / den);
}

function attentionRef(q: HostTensor, k: HostTensor, v: HostTensor, dO: HostTensor, opts: AttentionOptions) {
  const [b, tq, h, d] = q.shape;
  const [, tk, hkv] = k.shape;
  const scale = opts.scale ?? 1 / Math.sqrt(d);
  const cap = opts.softcap ?? 0;
  const Qd = q.data as Float32Array;
  const Kd = k.data as Float32Array;
  const Vd = v.data as Float32Array;
  const Gd = dO.data as Float32Array;
  const out = new Float64Array(Qd.length);
  const lse = new Float64Array(b * h * tq);
  const dq = new Float64Array(Qd.length);
  const dk = new Float64Array(Kd.length);
  const dv = new Float64Array(Kd.length);
  const qi = (bb: number, i: number, hh: number) => ((bb * tq + i) * h + hh) * d;
  const ki = (bb: number, j: number, hh: number) => ((bb * tk + j) * hkv + hh) * d;
  for (let bb = 0; bb < b; bb++) {
    for (let hh = 0; hh < h; hh++) {
      const kh = Math.floor(hh / (h / hkv));
      const slope = opts.alibiSlopes ? opts.alibiSlopes[hh] : 0;
      for (let i = 0; i < tq; i++) {
        const s = new Float64Array(tk).fill(-Infinity);
        const dcap = new Float64Array(tk);
        for (let j = 0; j < tk; j++) {
          if (opts.causal && j > i + tk - tq) continue;
          let dot = 0;
          for (let x = 0; x < d; x++) dot += Qd[qi(bb, i, hh) + x] * Kd[ki(bb, j, kh) + x];
          let sc = dot * scale;
          dcap[j] = 1;
          if (cap > 0) {
            const th = Math.tanh(sc / cap);
            sc = cap * th;
            dcap[j] = 1 - th * th;
          }
          s[j] = sc - slope * Math.abs(i + tk - tq - j);
        }
        const m = Math.max(...s);
        let l = 0;
        for (let j = 0; j < tk; j++) l += Math.exp(s[j] - m);
        lse[(bb * h + hh) * tq + i] = m + Math.log(l);
        const p = Array.from(s, (x) => Math.exp(x - m) / l);
        for (let x = 0; x < d; x++) {
          let o = 0;
          for (let j = 0; j < tk; j++) o += p[j] * Vd[ki(bb, j, kh) + x];
          out[qi(bb, i, hh) + x] = o;
        }
        // backward: dP = dO·Vᵀ; dS = P∘(dP − Σ P∘dP); through softcap and scale
        const dp = new Float64Array(tk);
        let dsum = 0;
        for (let j = 0; j < tk; j++) {
          for (let x = 0; x < d; x++) dp[j] += Gd[qi(bb, i, hh) + x] * Vd[ki(bb, j, kh) + x];
          dsum += p[j] * dp[j];
        }
        for (let j = 0; j < tk; j++) {
          const ds = p[j] * (dp[j] - dsum) * dcap[j] * scale;
          for (let x = 0; x < d; x++) {
            dq[qi(bb, i, hh) + x] += ds * Kd[ki(bb, j, kh) + x];
            dk[ki(bb, j, kh) + x] += ds * Qd[qi(bb, i, hh) + x];
            dv[ki(bb, j, kh) + x] += p[j] * Gd[qi(bb, i, hh) + x];
          }
        }
      }
    }
  }
  return { out, lse, dq, dk, dv };
}
