/**
 * A realistic FlashAttention engine simulated in float32 (every operation rounded with
 * Math.fround): key tiles of `tile` columns with an online softmax, LSE saved in float32,
 * and a FlashAttention-2 backward that recomputes P from the LSE and uses D = rowsum(dO∘O)
 * with the engine's own (dtype-rounded) O. With `roundP`, P and dS are rounded to the dtype
 * before the P·V, Pᵀ·dO, dS·K and dSᵀ·Q products, as tensor-core kernels do.
 *
 * The conformance kit must accept it in every case: it is the kind of engine the tolerance
 * policy is written for. Variants with deliberate mistakes must be rejected.
 */
import {
  describeBackward, describeProblem, dropoutKeeps, dtypeRounder, keyRange, lseIndex, segment, slopeOf,
  type AttentionBackend, type AttentionOptions, type AttentionProblem, type HostTensor, type Tensor, type Support,
} from '../../dist/index.js';
import { hostTensor, referenceKVCacheMethods, tensorValues } from '../../dist/testing/index.js';

const fr = Math.fround;

export interface FlashSimOptions {
  readonly name?: string;
  readonly tile?: number;
  readonly roundP?: boolean;
  readonly supports?: (p: AttentionProblem) => Support;
}

function f32(t: Tensor): Float32Array {
  return Float32Array.from(tensorValues(t as HostTensor));
}

/** s for one pair in float32: scale, softcap, ALiBi. */
function logit32(p: AttentionProblem, dot: number, slope: number, i: number, j: number, tq: number, tk: number): { s: number; t: number } {
  let s = fr(fr(dot) * fr(p.scale));
  let t = 0;
  if (p.softcap > 0) {
    const c = fr(p.softcap);
    t = fr(Math.tanh(fr(s / c)));
    s = fr(c * t);
  }
  if (slope !== 0) s = fr(s - fr(fr(slope) * Math.abs(i + tk - tq - j)));
  return { s, t };
}

export function flashSimBackend(o: FlashSimOptions = {}): AttentionBackend {
  const Bc = o.tile ?? 16;
  const kv = referenceKVCacheMethods(o.name ?? 'flash-sim');
  return {
    name: o.name ?? 'flash-sim',
    device: 'float32 simulation',
    dtypes: ['f32', 'f16', 'bf16'],
    supports: (p) => (o.supports ? o.supports(p) : { ok: true }),
    async forward(q, k, v, opts?: AttentionOptions) {
      const p = describeProblem(q, k, v, opts);
      const rd = dtypeRounder(p.dtype);
      const rp = o.roundP ? rd : fr;
      const Q = f32(q), K = f32(k), V = f32(v);
      const D = p.d;
      const Dv = p.vDim;
      const out = new Float32Array(p.totalQ * p.h * Dv);
      const lse = new Float32Array(p.h * p.totalQ);
      const acc = new Float64Array(Dv);
      for (let b = 0; b < p.batch; b++) {
        const { q0, tq, k0, tk } = segment(p, b);
        for (let h = 0; h < p.h; h++) {
          const g = Math.floor(h / (p.h / p.hkv));
          const slope = slopeOf(p, b, h);
          const sink = p.sinks ? p.sinks[h] : undefined;
          for (let i = 0; i < tq; i++) {
            const [lo, hi] = keyRange(p, i, tq, tk);
            const qo = ((q0 + i) * p.h + h) * D;
            const li = lseIndex(p, b, h, i);
            if (lo > hi) {
              lse[li] = sink ?? -Infinity;
              continue;
            }
            // a sink seeds the state as a key with a zero value row
            let m = sink ?? -Infinity;
            let l = sink === undefined ? 0 : 1;
            acc.fill(0);
            for (let j0 = Math.floor(lo / Bc) * Bc; j0 <= hi; j0 += Bc) {
              const j1 = Math.min(hi, j0 + Bc - 1);
              const js = Math.max(lo, j0);
              const s = new Float64Array(j1 - js + 1);
              let mt = m;
              for (let j = js; j <= j1; j++) {
                const ko = ((k0 + j) * p.hkv + g) * D;
                let dot = 0;
                for (let d = 0; d < D; d++) dot = fr(dot + Q[qo + d] * K[ko + d]);
                s[j - js] = logit32(p, dot, slope, i, j, tq, tk).s;
                mt = Math.max(mt, s[j - js]);
              }
              const alpha = m === -Infinity ? 0 : fr(Math.exp(fr(m - mt)));
              l = fr(l * alpha);
              for (let d = 0; d < Dv; d++) acc[d] = fr(acc[d] * alpha);
              for (let j = js; j <= j1; j++) {
                const e = fr(Math.exp(fr(s[j - js] - mt)));
                l = fr(l + e);
                const ks = p.dropout ? (dropoutKeeps(p.dropout, b * p.h + h, i, j) ? p.dropout.keepScale : 0) : 1;
                if (ks === 0) continue;
                const pe = rp(fr(e * ks));
                const vo = ((k0 + j) * p.hkv + g) * Dv;
                for (let d = 0; d < Dv; d++) acc[d] = fr(acc[d] + pe * V[vo + d]);
              }
              m = mt;
            }
            const oo = ((q0 + i) * p.h + h) * Dv;
            for (let d = 0; d < Dv; d++) out[oo + d] = fr(acc[d] / l);
            lse[li] = fr(m + fr(Math.log(l)));
          }
        }
      }
      return { out: hostTensor(out, p.outShape, p.dtype), lse: hostTensor(lse, p.lseShape, 'f32') };
    },
    async backward(q, k, v, out, dOut, lse, opts?: AttentionOptions) {
      const p = describeBackward(q, k, v, out, dOut, lse, opts);
      const rd = dtypeRounder(p.dtype);
      const rp = o.roundP ? rd : fr;
      const Q = f32(q), K = f32(k), V = f32(v), O = f32(out), DO = f32(dOut), L = f32(lse);
      const D = p.d;
      const Dv = p.vDim;
      const dq = new Float64Array(Q.length);
      const dk = new Float64Array(K.length);
      const dv = new Float64Array(V.length);
      const sc = fr(p.scale);
      const dsinks = p.sinks ? new Float32Array(p.h) : undefined;
      for (let b = 0; b < p.batch; b++) {
        const { q0, tq, k0, tk } = segment(p, b);
        for (let h = 0; h < p.h; h++) {
          const g = Math.floor(h / (p.h / p.hkv));
          const slope = slopeOf(p, b, h);
          for (let i = 0; i < tq; i++) {
            const [lo, hi] = keyRange(p, i, tq, tk);
            if (lo > hi) continue;
            const qo = ((q0 + i) * p.h + h) * D;
            const oo = ((q0 + i) * p.h + h) * Dv;
            const l = L[lseIndex(p, b, h, i)];
            let Di = 0;
            for (let d = 0; d < Dv; d++) Di = fr(Di + DO[oo + d] * O[oo + d]);
            if (dsinks) dsinks[h] = fr(dsinks[h] - fr(fr(Math.exp(fr(p.sinks![h] - l))) * Di));
            for (let j = lo; j <= hi; j++) {
              const ko = ((k0 + j) * p.hkv + g) * D;
              let dot = 0;
              for (let d = 0; d < D; d++) dot = fr(dot + Q[qo + d] * K[ko + d]);
              const { s, t } = logit32(p, dot, slope, i, j, tq, tk);
              const P = fr(Math.exp(fr(s - l)));
              const vo = ((k0 + j) * p.hkv + g) * Dv;
              let dP = 0;
              for (let d = 0; d < Dv; d++) dP = fr(dP + DO[oo + d] * V[vo + d]);
              const ks = p.dropout ? (dropoutKeeps(p.dropout, b * p.h + h, i, j) ? p.dropout.keepScale : 0) : 1;
              dP = fr(dP * ks);
              let dS = fr(P * fr(dP - Di));
              if (p.softcap > 0) dS = fr(dS * fr(1 - fr(t * t)));
              const dSr = rp(dS);
              const Pr = rp(fr(P * ks));
              for (let d = 0; d < D; d++) {
                dq[qo + d] = fr(dq[qo + d] + dSr * K[ko + d]);
                dk[ko + d] = fr(dk[ko + d] + dSr * Q[qo + d]);
              }
              for (let d = 0; d < Dv; d++) dv[vo + d] = fr(dv[vo + d] + Pr * DO[oo + d]);
            }
          }
        }
      }
      for (let x = 0; x < dq.length; x++) dq[x] = fr(dq[x] * sc);
      for (let x = 0; x < dk.length; x++) dk[x] = fr(dk[x] * sc);
      const grads = { dq: hostTensor(dq, p.qShape, p.dtype), dk: hostTensor(dk, p.kShape, p.dtype), dv: hostTensor(dv, p.vShape, p.dtype) };
      return dsinks ? { ...grads, dsinks: hostTensor(dsinks, [p.h], 'f32') } : grads;
    },
    // KV-cache calls: the reference's (these engines test the dense kit)
    ...kv,
    async upload(t: HostTensor) {
      return t;
    },
    async read(t: Tensor) {
      return t as HostTensor;
    },
    disposeTensor: (t) => kv.disposeIndex(t),
    async dispose() {},
  };
}
