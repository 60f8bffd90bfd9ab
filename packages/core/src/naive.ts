/**
 * Naive attention "in dtype": a bit-faithful simulation of naive attention run by PyTorch in
 * f16/bf16 (the `attention_ref(..., upcast=False)` of the FlashAttention tests), whose error
 * against the float64 reference is the baseline of the FlashAttention test rule: an engine's
 * error may be at most twice naive's.
 *
 * The model, per (batch, head); rd() rounds to the dtype, f32 arithmetic is modelled with
 * Math.fround after every operation, and a matmul accumulates in float32 (one rounding per
 * multiply-add, in index order) and rounds its result to the dtype once:
 *
 *   forward   qs = rd(q·scale)                 (q is scaled first, as in attention_ref)
 *             S  = rd(qs·kᵀ)                   (matmul)
 *             softcap c: S = rd(rd(tanh(rd(S/c)))·c)
 *             ALiBi: S = S + f32(−slope·|i+Tk−Tq−j|), in float32 (an f32 bias promotes S)
 *             mask: −∞ outside the window; P = rd(softmax(S)) with the softmax in float32
 *             (rows that see no key: P = 0); O = rd(P·V)   (matmul)
 *             sinks: the f32 logit s_h joins each row as one more column (no value), as model
 *             code concatenates it before the softmax and drops its column after
 *             dropout: O = rd(Σ P·M·V/(1 − p)) with philox.ts's mask M (P kept undropped)
 *   backward  dropout: dP = rd(dO·Vᵀ)·M/(1 − p), dV = rd(Σ P·M·dO/(1 − p))
 *             sinks: dsink_h = f32 Σ_rows P_sink·(0 − Σⱼ P·dP) (the softmax backward of that column)
 *   backward  dP = rd(dO·Vᵀ); dV = rd(Pᵀ·dO)     (matmuls, per query head)
 *             dS = rd(P·(dP − Σⱼ P·dP))         (softmax backward in float32)
 *             softcap: dT = rd(dS·c); dA = rd(dT·(1 − t²)); dS = rd(dA / c)
 *             dQs = rd(dS·K); dq = rd(dQs·scale); dK = rd(dSᵀ·qs)
 *             GQA: dK, dV of a kv head = rd(float32 sum of the rounded per-query-head grads)
 *
 * For f32, rd is Math.fround: it is plain float32 naive attention. `lse` is the float32
 * logsumexp of the softmax (m + log(sum)), given for information.
 */
import { check } from './errors.js';
import type { DType } from './dtype.js';
import { describeProblem, segment, lseIndex, type AttentionOptions, type AttentionProblem } from './problem.js';
import { keyRange } from './mask.js';
import { dropoutKeepRow } from './philox.js';
import type { HostTensor } from './tensor.js';
import { referenceMaxBytes } from './reference.js';
import { checkBytes, hostValues, requireHost } from './reference-util.js';

const fr = Math.fround;

const f64buf = new Float64Array(1);
const u32buf = new Uint32Array(f64buf.buffer);
f64buf[0] = 1;
const HI = u32buf[1] === 0x3ff00000 ? 1 : 0;
const POW2 = new Float64Array(2200);
for (let e = 0; e < POW2.length; e++) POW2[e] = 2 ** (e - 1100);

function makeRounder(mant: number, emin: number, max: number): (x: number) => number {
  return (x: number): number => {
    if (x !== x || x === 0) return x;
    f64buf[0] = x;
    let e = ((u32buf[HI] >>> 20) & 0x7ff) - 1023;
    if (e < emin) e = emin;
    const sc = POW2[e - mant + 1100];
    const y = x / sc; // exact: a division by a power of two
    let r = Math.round(y);
    if (r - y === 0.5 && r % 2 !== 0) r -= 1; // ties to even (Math.round rounds ties up)
    const res = r * sc;
    if (res > max) return Infinity;
    if (res < -max) return -Infinity;
    return res;
  };
}

const roundF16 = makeRounder(10, -14, 65504);
const roundBF16 = makeRounder(7, -126, (2 - 2 ** -7) * 2 ** 127);

/**
 * A fast function rounding a number to the nearest value of `dtype` (ties to even, overflow to
 * ±Infinity, NaN kept): Math.fround for f32. Agrees with roundScalar() on every input.
 */
export function dtypeRounder(dtype: DType): (x: number) => number {
  return dtype === 'f32' ? Math.fround : dtype === 'f16' ? roundF16 : roundBF16;
}

export interface NaiveOptions {
  /** Refuse (E_TOO_LARGE) above this many bytes; defaults to the reference's limit. */
  maxBytes?: number;
}

export interface NaiveForward {
  /** q's shape; every value is representable in the dtype. */
  readonly out: Float32Array;
  /** float32 logsumexp per row (lseShape); -Infinity for rows that see no key. */
  readonly lse: Float32Array;
  readonly problem: AttentionProblem;
}

export interface NaiveBackward extends NaiveForward {
  readonly dq: Float32Array;
  readonly dk: Float32Array;
  readonly dv: Float32Array;
  /** With sinks: dsinks [H] (float32 sums). */
  readonly dsinks?: Float32Array;
}

interface Ctx {
  p: AttentionProblem;
  rd: (x: number) => number;
  Qs: Float32Array;
  K: Float32Array;
  V: Float32Array;
  /** P (rounded to dtype) of the current (b, h), [tq, tk]. */
  P: Float64Array;
  /** tanh values of the softcap, [tq, tk]. */
  T: Float64Array | null;
  out: Float32Array;
  lse: Float32Array;
  orow: Float64Array;
  /** With sinks: the sink column's rounded P of each row of the current (b, h), [tq]. */
  Psink: Float64Array;
  /** With dropout: one row's keep flags. */
  keep: Uint8Array;
}

/** Forward of one (batch, head): fills ctx.P (and ctx.T), writes out and lse. */
function forwardHead(c: Ctx, b: number, h: number): void {
  const { p, rd, Qs, K, V, P, T, out, lse, orow } = c;
  const { q0, tq, k0, tk } = segment(p, b);
  const D = p.d;
  const Dv = p.vDim;
  const g = Math.floor(h / (p.h / p.hkv));
  const cap = fr(p.softcap);
  const slope = p.alibi ? p.alibi[b * p.h + h] : 0;
  const sink = p.sinks ? p.sinks[h] : -Infinity;
  for (let i = 0; i < tq; i++) {
    const [lo, hi] = keyRange(p, i, tq, tk);
    const li = lseIndex(p, b, h, i);
    const row = i * tk;
    const qo = ((q0 + i) * p.h + h) * D;
    const oo = ((q0 + i) * p.h + h) * Dv;
    if (lo > hi) {
      lse[li] = p.sinks ? sink : -Infinity; // P row = 0, out row = 0 (the sink column takes it all)
      c.Psink[i] = p.sinks ? 1 : 0;
      continue;
    }
    let m = sink;
    for (let j = lo; j <= hi; j++) {
      const ko = ((k0 + j) * p.hkv + g) * D;
      let acc = 0;
      for (let d = 0; d < D; d++) acc = fr(acc + Qs[qo + d] * K[ko + d]);
      let s = rd(acc);
      if (T !== null) {
        const t = rd(fr(Math.tanh(rd(fr(s / cap)))));
        T[row + j] = t;
        s = rd(fr(t * cap));
      }
      if (slope !== 0) s = fr(s + fr(-slope * Math.abs(i + tk - tq - j)));
      P[row + j] = s;
      m = Math.max(m, s);
    }
    let sum = 0;
    for (let j = lo; j <= hi; j++) {
      const e = fr(Math.exp(fr(P[row + j] - m)));
      P[row + j] = e;
      sum = fr(sum + e);
    }
    if (p.sinks) {
      const e = fr(Math.exp(fr(sink - m)));
      sum = fr(sum + e);
      c.Psink[i] = rd(fr(e / sum));
    }
    lse[li] = fr(m + fr(Math.log(sum)));
    orow.fill(0, 0, Dv);
    const drop = p.dropout;
    if (drop) dropoutKeepRow(drop, b * p.h + h, i, lo, hi + 1, c.keep);
    for (let j = lo; j <= hi; j++) {
      const pj = rd(fr(P[row + j] / sum));
      P[row + j] = pj;
      const pd = drop ? (c.keep[j - lo] ? rd(fr(pj * drop.keepScale)) : 0) : pj;
      if (pd === 0) continue;
      const vo = ((k0 + j) * p.hkv + g) * Dv;
      for (let d = 0; d < Dv; d++) orow[d] = fr(orow[d] + pd * V[vo + d]);
    }
    for (let d = 0; d < Dv; d++) out[oo + d] = rd(orow[d]);
  }
}

function setup(fn: string, q: HostTensor, k: HostTensor, v: HostTensor, opts: AttentionOptions | undefined, extraBytes: (p: AttentionProblem) => number, maxBytes: number | undefined): Ctx {
  requireHost(q, 'q', fn);
  requireHost(k, 'k', fn);
  requireHost(v, 'v', fn);
  const p = describeProblem(q, k, v, opts ?? {});
  const nq = p.totalQ * p.h * p.d;
  const nk = p.totalK * p.hkv * p.d;
  const no = p.totalQ * p.h * p.vDim;
  const nv = p.totalK * p.hkv * p.vDim;
  const mat = p.tq * p.tk * 8;
  const bytes = (p.dtype === 'f32' ? 0 : (nq + nk + nv) * 4) + nq * 4 + no * 4 + p.h * p.totalQ * 4 + mat * (p.softcap > 0 ? 2 : 1) + extraBytes(p);
  checkBytes(fn, p, bytes, maxBytes ?? referenceMaxBytes());
  const rd = dtypeRounder(p.dtype);
  const Q = hostValues(q);
  const Qs = new Float32Array(nq);
  const sc = fr(p.scale);
  for (let x = 0; x < nq; x++) Qs[x] = rd(fr(Q[x] * sc));
  return {
    p, rd, Qs,
    K: hostValues(k),
    V: hostValues(v),
    P: new Float64Array(p.tq * p.tk),
    T: p.softcap > 0 ? new Float64Array(p.tq * p.tk) : null,
    out: new Float32Array(no),
    lse: new Float32Array(p.h * p.totalQ),
    orow: new Float64Array(p.vDim),
    Psink: new Float64Array(p.tq),
    keep: new Uint8Array(p.dropout ? p.tk : 0),
  };
}

/** Naive attention simulated in the inputs' dtype (see the module comment for the exact model). */
export function naiveForward(q: HostTensor, k: HostTensor, v: HostTensor, opts?: AttentionOptions, nopts: NaiveOptions = {}): NaiveForward {
  const c = setup('naiveForward', q, k, v, opts, () => 0, nopts.maxBytes);
  for (let b = 0; b < c.p.batch; b++) for (let h = 0; h < c.p.h; h++) forwardHead(c, b, h);
  return { out: c.out, lse: c.lse, problem: c.p };
}

/** Naive attention and its autograd backward simulated in the inputs' dtype. */
export function naiveBackward(q: HostTensor, k: HostTensor, v: HostTensor, dOut: HostTensor, opts?: AttentionOptions, nopts: NaiveOptions = {}): NaiveBackward {
  const fn = 'naiveBackward';
  const c = setup(
    fn, q, k, v, opts,
    (p) => {
      const nq = p.totalQ * p.h * p.d;
      const nk = p.totalK * p.hkv * p.d;
      const nv = p.totalK * p.hkv * p.vDim;
      return (p.dtype === 'f32' ? 0 : p.totalQ * p.h * p.vDim * 4) + nq * 4 + nk * 8 + (nv * 8 + p.tk * (p.d + p.vDim) * 8) + p.tk * 16 + p.d * 8;
    },
    nopts.maxBytes,
  );
  const { p, rd, Qs, K, V, P, T } = c;
  requireHost(dOut, 'dOut', fn);
  check(dOut.dtype === p.dtype, 'E_DTYPE', `${fn}: dOut must have the inputs' dtype ${p.dtype}, got ${dOut.dtype}`);
  check(dOut.shape.length === p.outShape.length && dOut.shape.every((s, i) => s === p.outShape[i]) && dOut.data.length === p.outShape.reduce((a, b) => a * b, 1), 'E_SHAPE', `${fn}: dOut must have out's shape [${p.outShape.join(', ')}], got [${dOut.shape.join(', ')}]`);
  const DO = hostValues(dOut);
  const D = p.d;
  const Dv = p.vDim;
  const nq = p.totalQ * p.h * D;
  const nk = p.totalK * p.hkv * D;
  const nv = p.totalK * p.hkv * Dv;
  const dq = new Float32Array(nq);
  const gk = new Float64Array(nk); // float32 sums over the group's query heads
  const gv = new Float64Array(nv);
  const dkh = new Float64Array(p.tk * D);
  const dvh = new Float64Array(p.tk * Dv);
  const dProw = new Float64Array(p.tk);
  const acc = new Float64Array(D);
  const cap = fr(p.softcap);
  const sc = fr(p.scale);
  const dsinks = p.sinks ? new Float32Array(p.h) : undefined;
  for (let b = 0; b < p.batch; b++) {
    const { q0, tq, k0, tk } = segment(p, b);
    for (let h = 0; h < p.h; h++) {
      forwardHead(c, b, h);
      const g = Math.floor(h / (p.h / p.hkv));
      dkh.fill(0, 0, tk * D);
      dvh.fill(0, 0, tk * Dv);
      for (let i = 0; i < tq; i++) {
        const [lo, hi] = keyRange(p, i, tq, tk);
        if (lo > hi) continue;
        const row = i * tk;
        const qo = ((q0 + i) * p.h + h) * D;
        const oo = ((q0 + i) * p.h + h) * Dv;
        const drop = p.dropout;
        if (drop) dropoutKeepRow(drop, b * p.h + h, i, lo, hi + 1, c.keep);
        const ks = (j: number) => (drop ? (c.keep[j - lo] ? drop.keepScale : 0) : 1);
        // dP = rd(dO·Vᵀ); r = Σ P·dP (float32)
        let r = 0;
        for (let j = lo; j <= hi; j++) {
          const vo = ((k0 + j) * p.hkv + g) * Dv;
          let a = 0;
          for (let d = 0; d < Dv; d++) a = fr(a + DO[oo + d] * V[vo + d]);
          const dp = drop ? rd(fr(rd(a) * ks(j))) : rd(a);
          dProw[j] = dp;
          r = fr(r + P[row + j] * dp);
        }
        if (dsinks) dsinks[h] = fr(dsinks[h] + rd(fr(c.Psink[i] * -r)));
        acc.fill(0, 0, D);
        for (let j = lo; j <= hi; j++) {
          const pj = P[row + j];
          let ds = rd(fr(pj * fr(dProw[j] - r)));
          if (T !== null) {
            const t = T[row + j];
            const dt = rd(fr(ds * cap));
            const da = rd(fr(dt * fr(1 - fr(t * t))));
            ds = rd(fr(da / cap));
          }
          const ko = ((k0 + j) * p.hkv + g) * D;
          const ro = j * D;
          for (let d = 0; d < D; d++) {
            acc[d] = fr(acc[d] + ds * K[ko + d]);
            dkh[ro + d] = fr(dkh[ro + d] + ds * Qs[qo + d]);
          }
          const rv = j * Dv;
          const pd = drop ? rd(fr(pj * ks(j))) : pj;
          for (let d = 0; d < Dv; d++) dvh[rv + d] = fr(dvh[rv + d] + pd * DO[oo + d]);
        }
        for (let d = 0; d < D; d++) dq[qo + d] = rd(fr(rd(acc[d]) * sc));
      }
      for (let j = 0; j < tk; j++) {
        const ko = ((k0 + j) * p.hkv + g) * D;
        const ro = j * D;
        for (let d = 0; d < D; d++) gk[ko + d] = fr(gk[ko + d] + rd(dkh[ro + d]));
        const vo = ((k0 + j) * p.hkv + g) * Dv;
        const rv = j * Dv;
        for (let d = 0; d < Dv; d++) gv[vo + d] = fr(gv[vo + d] + rd(dvh[rv + d]));
      }
    }
  }
  const dk = new Float32Array(nk);
  const dv = new Float32Array(nv);
  for (let x = 0; x < nk; x++) dk[x] = rd(gk[x]);
  for (let x = 0; x < nv; x++) dv[x] = rd(gv[x]);
  return { out: c.out, lse: c.lse, problem: p, dq, dk, dv, ...(dsinks ? { dsinks } : {}) };
}
