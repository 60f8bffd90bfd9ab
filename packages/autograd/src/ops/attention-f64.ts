/**
 * Float64 attention, forward and backward, for gradcheck's float64 twin. It follows DESIGN.md's
 * conventions through @fa/core's own definitions (describeProblem, keyRange, logit, slopeOf),
 * so masks, softcap, ALiBi, GQA and varlen mean exactly what they mean for every engine; it
 * computes the T×T scores row by row, which is fine at gradcheck sizes and nowhere else. Sinks
 * (`sinks`, float64 values: p.sinks holds them rounded to f32) join each row's denominator as a
 * logit without a value; backward64 then also gives dsinks.
 */
import { describeProblem, dropoutKeeps, keyRange, logit, lseIndex, segment, slopeOf, type AttentionOptions, type AttentionProblem, type DeviceTensor } from '@fa/core';

/** Dropout's multiplier of entry (i, j) of (b, h): 1/(1 − p) where @fa/core's philox mask keeps it, 0 where it drops it. */
function keepScale(p: AttentionProblem, b: number, h: number, i: number, j: number): number {
  return !p.dropout ? 1 : dropoutKeeps(p.dropout, b * p.h + h, i, j) ? p.dropout.keepScale : 0;
}

function shapeOnly(shape: readonly number[]): DeviceTensor {
  // describeProblem validates device tensors by shape alone: no data is needed to resolve a problem.
  return { kind: 'device', backend: 'autograd-float64', dtype: 'f32', shape, handle: null, disposed: false };
}

/** Validates and resolves shapes and options exactly as every backend does. */
export function describeShapes(qShape: readonly number[], kShape: readonly number[], vShape: readonly number[], opts: AttentionOptions): AttentionProblem {
  return describeProblem(shapeOnly(qShape), shapeOnly(kShape), shapeOnly(vShape), opts);
}

interface Row {
  lo: number;
  hi: number;
  qOff: number;
  /** The row's offset in out and dOut (v's head dim). */
  oOff: number;
  kvh: number;
  slope: number;
}

function forEachRow(p: AttentionProblem, fn: (b: number, h: number, i: number, row: Row, tq: number, tk: number, k0: number) => void): void {
  const group = p.h / p.hkv;
  for (let b = 0; b < p.batch; b++) {
    const s = segment(p, b);
    for (let h = 0; h < p.h; h++) {
      const kvh = Math.floor(h / group);
      const slope = slopeOf(p, b, h);
      for (let i = 0; i < s.tq; i++) {
        const [lo, hi] = keyRange(p, i, s.tq, s.tk);
        fn(b, h, i, { lo, hi, qOff: ((s.q0 + i) * p.h + h) * p.d, oOff: ((s.q0 + i) * p.h + h) * p.vDim, kvh, slope }, s.tq, s.tk, s.k0);
      }
    }
  }
}

function dot(a: Float64Array, ao: number, b: Float64Array, bo: number, d: number): number {
  let s = 0;
  for (let x = 0; x < d; x++) s += a[ao + x] * b[bo + x];
  return s;
}

export function forward64(p: AttentionProblem, q: Float64Array, k: Float64Array, v: Float64Array, sinks?: ArrayLike<number>): { out: Float64Array; lse: Float64Array } {
  const D = p.d;
  const Dv = p.vDim;
  const out = new Float64Array(p.totalQ * p.h * Dv);
  const lse = new Float64Array(p.lseShape.reduce((a, s) => a * s, 1));
  const s = new Float64Array(Math.max(p.tk, 1));
  forEachRow(p, (b, h, i, r, tq, tk, k0) => {
    const li = lseIndex(p, b, h, i);
    const sink = sinks ? sinks[h] : -Infinity;
    if (r.lo > r.hi) {
      lse[li] = sink; // out 0; -Infinity without sinks
      return;
    }
    let m = sink;
    for (let j = r.lo; j <= r.hi; j++) {
      const kOff = ((k0 + j) * p.hkv + r.kvh) * D;
      s[j] = logit(p, dot(q, r.qOff, k, kOff, D), r.slope, i, j, tq, tk);
      if (s[j] > m) m = s[j];
    }
    let l = sink === -Infinity ? 0 : Math.exp(sink - m);
    for (let j = r.lo; j <= r.hi; j++) l += Math.exp(s[j] - m);
    const L = m + Math.log(l);
    lse[li] = L;
    for (let j = r.lo; j <= r.hi; j++) {
      const pj = Math.exp(s[j] - L) * keepScale(p, b, h, i, j);
      if (pj === 0) continue;
      const vOff = ((k0 + j) * p.hkv + r.kvh) * Dv;
      for (let x = 0; x < Dv; x++) out[r.oOff + x] += pj * v[vOff + x];
    }
  });
  return { out, lse };
}

export function backward64(
  p: AttentionProblem,
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  out: Float64Array,
  dOut: Float64Array,
  lse: Float64Array,
  sinks?: ArrayLike<number>,
): { dq: Float64Array; dk: Float64Array; dv: Float64Array; dsinks?: Float64Array } {
  const D = p.d;
  const Dv = p.vDim;
  const dq = new Float64Array(q.length);
  const dk = new Float64Array(k.length);
  const dv = new Float64Array(v.length);
  const dsinks = sinks ? new Float64Array(p.h) : undefined;
  forEachRow(p, (b, h, i, r, tq, tk, k0) => {
    const L = lse[lseIndex(p, b, h, i)];
    if (r.lo > r.hi || L === -Infinity) return;
    const Di = dot(dOut, r.oOff, out, r.oOff, Dv);
    if (dsinks) dsinks[h] -= Math.exp(sinks![h] - L) * Di;
    for (let j = r.lo; j <= r.hi; j++) {
      const kOff = ((k0 + j) * p.hkv + r.kvh) * D;
      const raw = dot(q, r.qOff, k, kOff, D);
      const pj = Math.exp(logit(p, raw, r.slope, i, j, tq, tk) - L);
      const vOff = ((k0 + j) * p.hkv + r.kvh) * Dv;
      const ks = keepScale(p, b, h, i, j);
      const dp = dot(dOut, r.oOff, v, vOff, Dv) * ks;
      let ds = pj * (dp - Di) * p.scale;
      if (p.softcap > 0) {
        const t = Math.tanh((raw * p.scale) / p.softcap);
        ds *= 1 - t * t;
      }
      for (let x = 0; x < D; x++) {
        dq[r.qOff + x] += ds * k[kOff + x];
        dk[kOff + x] += ds * q[r.qOff + x];
      }
      for (let x = 0; x < Dv; x++) dv[vOff + x] += pj * ks * dOut[r.oOff + x];
    }
  });
  return dsinks ? { dq, dk, dv, dsinks } : { dq, dk, dv };
}
