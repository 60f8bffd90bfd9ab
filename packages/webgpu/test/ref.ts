/**
 * A small float64 reference (naive attention) for this package's own tests, written from
 * DESIGN.md's conventions. The conformance kit (@fa/core/testing) is the authority; this file
 * only backs the package's unit tests and the benchmark's accuracy check.
 */
import { type AttentionOptions, describeProblem, decode, keyRange, logit, segment, slopeOf, type HostTensor, tensor, encode, type DType } from '@fa/core';

export function toF64(t: HostTensor): Float64Array {
  const f = t.dtype === 'f32' ? (t.data as Float32Array) : decode(t.dtype, t.data as Uint16Array);
  return Float64Array.from(f);
}

export function fromF64(x: ArrayLike<number>, shape: number[], dtype: DType): HostTensor {
  const f = Float32Array.from(x);
  return dtype === 'f32' ? tensor(f, shape, 'f32') : tensor(encode(dtype, f), shape, dtype);
}

export interface RefResult {
  out: Float64Array;
  lse: Float64Array;
  dq?: Float64Array;
  dk?: Float64Array;
  dv?: Float64Array;
}

/** Forward and (with dOut) backward in float64. */
export function reference(q: HostTensor, k: HostTensor, v: HostTensor, opts: AttentionOptions, dOut?: HostTensor): RefResult {
  const p = describeProblem(q, k, v, opts);
  const Q = toF64(q), K = toF64(k), V = toF64(v);
  const dO = dOut ? toF64(dOut) : undefined;
  const { h: H, hkv: HKV, d: D } = p;
  const out = new Float64Array(p.totalQ * H * D);
  const lse = new Float64Array(p.totalQ * H);
  const dq = new Float64Array(Q.length), dk = new Float64Array(K.length), dv = new Float64Array(V.length);
  const g = H / HKV;
  for (let b = 0; b < p.batch; b++) {
    const sg = segment(p, b);
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / g);
      const slope = slopeOf(p, b, h);
      for (let i = 0; i < sg.tq; i++) {
        const qo = ((sg.q0 + i) * H + h) * D;
        const [lo, hi] = keyRange(p, i, sg.tq, sg.tk);
        const li = p.varlen ? h * p.totalQ + sg.q0 + i : (b * H + h) * p.tq + i;
        if (lo > hi) {
          lse[li] = -Infinity;
          continue;
        }
        const s = new Float64Array(hi - lo + 1);
        const raw = new Float64Array(hi - lo + 1);
        let m = -Infinity;
        for (let j = lo; j <= hi; j++) {
          const ko = ((sg.k0 + j) * HKV + hk) * D;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += Q[qo + d] * K[ko + d];
          raw[j - lo] = dot * p.scale;
          s[j - lo] = logit(p, dot, slope, i, j, sg.tq, sg.tk);
          if (s[j - lo] > m || Number.isNaN(s[j - lo])) m = Number.isNaN(m) ? m : Math.max(m, s[j - lo]);
        }
        let l = 0;
        for (let x = 0; x < s.length; x++) l += Math.exp(s[x] - m);
        lse[li] = m + Math.log(l);
        const pr = new Float64Array(s.length);
        for (let x = 0; x < s.length; x++) pr[x] = Math.exp(s[x] - lse[li]);
        for (let j = lo; j <= hi; j++) {
          const vo = ((sg.k0 + j) * HKV + hk) * D;
          for (let d = 0; d < D; d++) out[qo + d] += pr[j - lo] * V[vo + d];
        }
        if (dO) {
          let di = 0;
          for (let d = 0; d < D; d++) di += dO[qo + d] * out[qo + d];
          for (let j = lo; j <= hi; j++) {
            const vo = ((sg.k0 + j) * HKV + hk) * D;
            let dp = 0;
            for (let d = 0; d < D; d++) dp += dO[qo + d] * V[vo + d];
            let ds = pr[j - lo] * (dp - di);
            if (p.softcap > 0) {
              const t = Math.tanh(raw[j - lo] / p.softcap);
              ds *= 1 - t * t;
            }
            for (let d = 0; d < D; d++) {
              dq[qo + d] += ds * p.scale * K[vo + d];
              dk[vo + d] += ds * p.scale * Q[qo + d];
              dv[vo + d] += pr[j - lo] * dO[qo + d];
            }
          }
        }
      }
    }
  }
  return dO ? { out, lse, dq, dk, dv } : { out, lse };
}

/** ‖x − ref‖ / ‖ref‖ over finite entries (0 when both are all zero). */
export function relErr(x: ArrayLike<number>, ref: ArrayLike<number>): number {
  let num = 0, den = 0;
  for (let i = 0; i < ref.length; i++) {
    const r = ref[i], a = x[i];
    if (!Number.isFinite(r) && !Number.isFinite(a) && (Number.isNaN(r) === Number.isNaN(a)) && (Number.isNaN(r) || r === a)) continue;
    num += (a - r) * (a - r);
    den += r * r;
  }
  if (den === 0) return Math.sqrt(num);
  return Math.sqrt(num / den);
}

/** Deterministic pseudo-random normal values. */
export function randn(n: number, seed: number, scale = 1): Float32Array {
  let s = seed >>> 0 || 1;
  const u = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = scale * Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u());
  return out;
}
