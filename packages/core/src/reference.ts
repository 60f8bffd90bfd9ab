/**
 * The float64 reference: naive attention, computed from the exact input values (f16 and bf16
 * bits are decoded exactly) in float64 arithmetic. It materialises the score matrix of one
 * (batch, head) at a time, exactly like naive attention, and therefore refuses problems whose
 * allocations exceed a configurable limit (FAError E_TOO_LARGE). `referenceRows` computes
 * sampled rows of huge problems in O(Tk·D) time and O(Tk) memory per row.
 *
 * Semantics come from mask.ts (keyRange, logit, slopeOf) so they are defined in one place.
 * A row that sees no key has output 0 and LSE -Infinity (the head's sink logit with sinks); NaN
 * in inputs propagates. Sinks join each row's softmax as one more logit without a value. Dropout
 * drops entries of P by philox.ts's mask after the softmax (LSE is the undropped one) and scales
 * the kept ones by 1/(1 − p).
 *
 * With `magnitudes: true` the reference also returns, per output element, the magnitude of the
 * terms that element is computed from (a running-error-analysis "condition" tensor: the sum of
 * |terms| through every step, the logits' own magnitudes included): an engine computing in
 * float32 errs by a small multiple of u32 times it. The conformance kit uses it as the
 * tolerance floor where cancellation or large-magnitude scores make a purely relative bound
 * unattainable. With `givenOut`, referenceBackward also returns how much dq and dk change when
 * rowsum(dO∘out) is formed from that out (an engine's, rounded to its dtype) instead of the
 * exact one.
 */
import { check } from './errors.js';
import { fromBF16Bits, fromF16Bits } from './dtype.js';
import { checkBytes, hostValues, requireHost } from './reference-util.js';
import { describeProblem, segment, lseIndex, type AttentionOptions, type AttentionProblem } from './problem.js';
import { keyRange, logit, slopeOf } from './mask.js';
import { isHostTensor, numel, type HostTensor } from './tensor.js';
import { dropoutKeepRow } from './philox.js';

const DEFAULT_MAX_BYTES = 512 * 1024 * 1024;
let maxBytesDefault = DEFAULT_MAX_BYTES;

/** Sets the default allocation limit (bytes) of referenceForward/referenceBackward/naive*. */
export function setReferenceMaxBytes(bytes: number): void {
  check(typeof bytes === 'number' && bytes > 0 && !Number.isNaN(bytes), 'E_ARG', `reference maxBytes must be a positive number, got ${String(bytes)}`);
  maxBytesDefault = bytes;
}

/** The current default allocation limit of the reference, in bytes (512 MiB unless changed). */
export function referenceMaxBytes(): number {
  return maxBytesDefault;
}

export interface ReferenceOptions {
  /** Refuse (E_TOO_LARGE) when the reference would allocate more than this many bytes. */
  maxBytes?: number;
  /** Also return the term-magnitude tensors used for error bounds (about doubles the cost). */
  magnitudes?: boolean;
  /** referenceBackward: the out a backward engine was given (q's shape); adds `outCorrection`. */
  givenOut?: ArrayLike<number>;
}

export interface ReferenceForward {
  /** out's shape (q's, with v's head dim), float64. */
  readonly out: Float64Array;
  /** problem.lseShape, float64; -Infinity for rows that see no key. */
  readonly lse: Float64Array;
  readonly problem: AttentionProblem;
  /** Present with `magnitudes: true`: error-magnitude tensors of out and lse (same shapes). */
  readonly mag?: { readonly out: Float64Array; readonly lse: Float64Array };
}

export interface ReferenceBackward extends ReferenceForward {
  /** q's shape. */
  readonly dq: Float64Array;
  /** k's shape (summed over the query heads of each GQA group). */
  readonly dk: Float64Array;
  readonly dv: Float64Array;
  /** With sinks: dsink_h = −Σ_rows e^(s_h − LSE)·rowsum(dO∘O), [H]. */
  readonly dsinks?: Float64Array;
  /** Present with `magnitudes: true`: term magnitudes of dq, dk, dv (and dsinks) (see the module comment). */
  readonly magGrad?: { readonly dq: Float64Array; readonly dk: Float64Array; readonly dv: Float64Array; readonly dsinks?: Float64Array };
  /**
   * Present with `givenOut`: the exact change of dq and dk when rowsum(dO∘out) is formed from
   * `givenOut` instead of the exact out (dS = P∘(dP − rowsum(dO∘out)) is linear in it). A backward
   * engine receives out rounded to the dtype, so this is what an otherwise exact engine differs by.
   */
  readonly outCorrection?: { readonly dq: Float64Array; readonly dk: Float64Array; readonly dsinks?: Float64Array };
}

function checkDOut(p: AttentionProblem, dOut: unknown, fn: string): HostTensor {
  requireHost(dOut, 'dOut', fn);
  check(isHostTensor(dOut), 'E_ARG', `${fn}: dOut must be a host tensor`);
  check(dOut.dtype === p.dtype, 'E_DTYPE', `${fn}: dOut must have the inputs' dtype ${p.dtype}, got ${dOut.dtype}`);
  check(dOut.shape.length === p.outShape.length && dOut.shape.every((s, i) => s === p.outShape[i]), 'E_SHAPE', `${fn}: dOut must have out's shape [${p.outShape.join(', ')}], got [${dOut.shape.join(', ')}]`);
  check(dOut.data.length === numel(dOut.shape), 'E_SHAPE', `${fn}: dOut data length ${dOut.data.length} does not match its shape`);
  return dOut;
}

interface Inputs {
  p: AttentionProblem;
  Q: Float32Array;
  K: Float32Array;
  V: Float32Array;
}

function prepare(fn: string, q: HostTensor, k: HostTensor, v: HostTensor, opts: AttentionOptions | undefined): AttentionProblem {
  requireHost(q, 'q', fn);
  requireHost(k, 'k', fn);
  requireHost(v, 'v', fn);
  return describeProblem(q, k, v, opts ?? {});
}

function inputBytes(p: AttentionProblem, nq: number, nk: number): number {
  return p.dtype === 'f32' ? 0 : (nq + 2 * nk) * 4;
}

/**
 * Scores of one (batch, head): fills S[i*tk + j] with logits for visible pairs (other entries
 * are left as they are and never read), and, when asked, Tn (tanh values for the softcap
 * derivative) and X (|scale|·Σ|q||k|, the magnitude of the scaled dot product).
 */
function scoresOf(x: Inputs, b: number, h: number, S: Float64Array, Tn: Float64Array | null, X: Float64Array | null): void {
  const { p, Q, K } = x;
  const { q0, tq, k0, tk } = segment(p, b);
  const D = p.d;
  const g = Math.floor(h / (p.h / p.hkv));
  const slope = slopeOf(p, b, h);
  const absScale = Math.abs(p.scale);
  const cap = p.softcap;
  for (let i = 0; i < tq; i++) {
    const [lo, hi] = keyRange(p, i, tq, tk);
    const qo = ((q0 + i) * p.h + h) * D;
    const row = i * tk;
    for (let j = lo; j <= hi; j++) {
      const ko = ((k0 + j) * p.hkv + g) * D;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += Q[qo + d] * K[ko + d];
      S[row + j] = logit(p, dot, slope, i, j, tq, tk);
      if (Tn !== null) Tn[row + j] = Math.tanh((dot * p.scale) / cap);
      if (X !== null) {
        let a = 0;
        for (let d = 0; d < D; d++) a += Math.abs(Q[qo + d] * K[ko + d]);
        X[row + j] = absScale * a;
      }
    }
  }
}

/** Magnitude of a logit's computation: see the module comment. */
function sAbs(p: AttentionProblem, s: number, xAbs: number, t: number, slope: number, i: number, j: number, tq: number, tk: number): number {
  const dx = p.softcap > 0 ? (1 - t * t) * xAbs : xAbs;
  return dx + Math.abs(s) + Math.abs(slope * (i + tk - tq - j));
}

interface FwdState {
  out: Float64Array;
  lse: Float64Array;
  magOut?: Float64Array;
  magLse?: Float64Array;
  /** Per packed row·head: Σ p·Sabs (only with magnitudes). */
  lrow?: Float64Array;
}

function forwardCore(x: Inputs, mag: boolean): FwdState {
  const { p, V } = x;
  const Dv = p.vDim; // out and V rows (q·k's head dim is p.d, in scoresOf)
  const out = new Float64Array(p.totalQ * p.h * Dv);
  const lse = new Float64Array(p.h * p.totalQ);
  const st: FwdState = { out, lse };
  const S = new Float64Array(p.tq * p.tk);
  const Tn = mag && p.softcap > 0 ? new Float64Array(p.tq * p.tk) : null;
  const X = mag ? new Float64Array(p.tq * p.tk) : null;
  const drop = p.dropout;
  const keep = new Uint8Array(drop ? p.tk : 0);
  if (mag) {
    st.magOut = new Float64Array(out.length);
    st.magLse = new Float64Array(lse.length);
    st.lrow = new Float64Array(p.totalQ * p.h);
  }
  for (let b = 0; b < p.batch; b++) {
    const { q0, tq, k0, tk } = segment(p, b);
    for (let h = 0; h < p.h; h++) {
      const g = Math.floor(h / (p.h / p.hkv));
      const slope = slopeOf(p, b, h);
      const sink = p.sinks ? p.sinks[h] : -Infinity;
      // S = scale·QKᵀ (+ softcap, ALiBi) on the visible pairs.
      scoresOf(x, b, h, S, Tn, X);
      for (let i = 0; i < tq; i++) {
        const [lo, hi] = keyRange(p, i, tq, tk);
        const li = lseIndex(p, b, h, i);
        const oo = ((q0 + i) * p.h + h) * Dv;
        if (lo > hi) {
          lse[li] = sink; // out stays 0; -Infinity without sinks
          if (mag && p.sinks) {
            st.lrow![(q0 + i) * p.h + h] = 0;
            st.magLse![li] = Math.abs(sink) + 1;
          }
          continue;
        }
        const row = i * tk;
        // Row softmax: P = exp(S - max) / sum, in place (the sink in the max and the sum only).
        let m = sink;
        for (let j = lo; j <= hi; j++) m = Math.max(m, S[row + j]);
        let sum = 0;
        for (let j = lo; j <= hi; j++) {
          const e = Math.exp(S[row + j] - m);
          S[row + j] = e;
          sum += e;
        }
        const eSink = sink === -Infinity ? 0 : Math.exp(sink - m);
        sum += eSink;
        lse[li] = m + Math.log(sum);
        const inv = 1 / sum;
        // O = P·V (with dropout: the kept entries of P, scaled by 1/(1 − p)).
        if (drop) dropoutKeepRow(drop, b * p.h + h, i, lo, hi + 1, keep);
        for (let j = lo; j <= hi; j++) {
          const pj = S[row + j] * inv;
          S[row + j] = pj;
          const pd = drop ? (keep[j - lo] ? pj * drop.keepScale : 0) : pj;
          if (pd === 0 && drop) continue;
          const vo = ((k0 + j) * p.hkv + g) * Dv;
          for (let d = 0; d < Dv; d++) out[oo + d] += pd * V[vo + d];
        }
        if (mag) {
          const magOut = st.magOut!;
          let L = 0;
          const sa = (j: number) => sAbs(p, Math.log(S[row + j]) + lse[li], X![row + j], Tn ? Tn[row + j] : 0, slope, i, j, tq, tk);
          for (let j = lo; j <= hi; j++) if (S[row + j] > 0) L += S[row + j] * sa(j);
          const pSink = eSink * inv;
          L += pSink * Math.abs(sink === -Infinity ? 0 : sink);
          st.lrow![(q0 + i) * p.h + h] = L;
          st.magLse![li] = L + Math.abs(lse[li]) + 1;
          if (pSink > 0) {
            const w = Math.abs(sink) + L; // the sink's "value" is 0: it pulls out towards 0
            for (let d = 0; d < Dv; d++) magOut[oo + d] += pSink * w * Math.abs(out[oo + d]);
          }
          for (let j = lo; j <= hi; j++) {
            const pj = S[row + j];
            if (!(pj > 0)) continue;
            const w = sa(j) + L;
            const vo = ((k0 + j) * p.hkv + g) * Dv;
            const ks = drop ? (keep[j - lo] ? drop.keepScale : 0) : 1; // (a dropped value weighs 0)
            for (let d = 0; d < Dv; d++) {
              const vv = V[vo + d] * ks;
              magOut[oo + d] += pj * (w * Math.abs(vv - out[oo + d]) + Math.abs(vv));
            }
          }
        }
      }
    }
  }
  return st;
}

function forwardBytes(p: AttentionProblem, mag: boolean): number {
  const nq = p.totalQ * p.h * Math.max(p.d, p.vDim);
  const nk = p.totalK * p.hkv * Math.max(p.d, p.vDim);
  const mat = p.tq * p.tk * 8;
  let bytes = inputBytes(p, nq, nk) + nq * 8 + p.h * p.totalQ * 8 + mat;
  if (mag) bytes += nq * 8 + p.h * p.totalQ * 16 + mat * (p.softcap > 0 ? 2 : 1);
  return bytes;
}

/**
 * Float64 naive attention. Returns out (q's shape) and lse (problem.lseShape) as Float64Array.
 * Throws FAError E_TOO_LARGE when it would allocate more than `maxBytes` (default 512 MiB, see
 * setReferenceMaxBytes), and the usual E_SHAPE/E_DTYPE/E_ARG for bad inputs.
 */
export function referenceForward(q: HostTensor, k: HostTensor, v: HostTensor, opts?: AttentionOptions, ropts: ReferenceOptions = {}): ReferenceForward {
  const p = prepare('referenceForward', q, k, v, opts);
  const mag = ropts.magnitudes === true;
  checkBytes('referenceForward', p, forwardBytes(p, mag), ropts.maxBytes ?? maxBytesDefault);
  const x: Inputs = { p, Q: hostValues(q), K: hostValues(k), V: hostValues(v) };
  const st = forwardCore(x, mag);
  return { out: st.out, lse: st.lse, problem: p, ...(mag ? { mag: { out: st.magOut!, lse: st.magLse! } } : {}) };
}

/**
 * Analytic float64 gradients of naive attention for the loss Σ dOut∘out:
 * dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − rowsum(dO∘O)), through the softcap's tanh
 * (ds/dx = scale·(1 − tanh²)), ALiBi being a constant; dQ = dS·K, dK = dSᵀ·Q, with dK and dV
 * summed over the query heads of each GQA group and computed per varlen segment.
 */
export function referenceBackward(q: HostTensor, k: HostTensor, v: HostTensor, dOut: HostTensor, opts?: AttentionOptions, ropts: ReferenceOptions = {}): ReferenceBackward {
  const fn = 'referenceBackward';
  const p = prepare(fn, q, k, v, opts);
  const dO = checkDOut(p, dOut, fn);
  const mag = ropts.magnitudes === true;
  const nq = p.totalQ * p.h * p.d;
  const nk = p.totalK * p.hkv * p.d;
  const no = p.totalQ * p.h * p.vDim; // out, dOut
  const nv = p.totalK * p.hkv * p.vDim; // v, dv
  const mat = p.tq * p.tk * 8;
  const m2 = mag ? 2 : 1;
  const bytes =
    forwardBytes(p, mag) + (p.dtype === 'f32' ? 0 : no * 4) + (nq + nk + nv) * 8 * m2 + (ropts.givenOut ? (nq + nk) * 8 + p.tq * 8 : 0) + mat * (1 + (p.softcap > 0 ? 1 : 0) + (mag ? 1 : 0)) + p.tq * 8 * m2;
  checkBytes(fn, p, bytes, ropts.maxBytes ?? maxBytesDefault);
  const x: Inputs = { p, Q: hostValues(q), K: hostValues(k), V: hostValues(v) };
  const DO = hostValues(dO);
  const st = forwardCore(x, mag);
  const { out, lse } = st;
  const { Q, K, V } = x;
  const D = p.d;
  const Dv = p.vDim;
  const dq = new Float64Array(nq);
  const dk = new Float64Array(nk);
  const dv = new Float64Array(nv);
  const S = new Float64Array(p.tq * p.tk);
  const Tn = p.softcap > 0 ? new Float64Array(p.tq * p.tk) : null;
  const X = mag ? new Float64Array(p.tq * p.tk) : null;
  const Drow = new Float64Array(p.tq);
  const DabsRow = mag ? new Float64Array(p.tq) : null;
  const given = ropts.givenOut;
  if (given !== undefined) check(given.length === no, 'E_SHAPE', `${fn}: givenOut has ${given.length} elements, out has ${no}`);
  const dDRow = given ? new Float64Array(p.tq) : null;
  const cq = given ? new Float64Array(nq) : null;
  const ck = given ? new Float64Array(nk) : null;
  const mq = mag ? new Float64Array(nq) : null;
  const mk = mag ? new Float64Array(nk) : null;
  const mv = mag ? new Float64Array(nv) : null;
  const absScale = Math.abs(p.scale);
  const cap = p.softcap;
  const drop = p.dropout;
  const keep = new Uint8Array(drop ? p.tk : 0);
  const dsinks = p.sinks ? new Float64Array(p.h) : undefined;
  const mds = p.sinks && mag ? new Float64Array(p.h) : undefined;
  const cds = p.sinks && given ? new Float64Array(p.h) : undefined;
  for (let b = 0; b < p.batch; b++) {
    const { q0, tq, k0, tk } = segment(p, b);
    for (let h = 0; h < p.h; h++) {
      const g = Math.floor(h / (p.h / p.hkv));
      const slope = slopeOf(p, b, h);
      scoresOf(x, b, h, S, Tn, X);
      // P = exp(S − lse); D = rowsum(dO∘O).
      for (let i = 0; i < tq; i++) {
        const [lo, hi] = keyRange(p, i, tq, tk);
        if (lo > hi) continue;
        const l = lse[lseIndex(p, b, h, i)];
        const row = i * tk;
        for (let j = lo; j <= hi; j++) S[row + j] = Math.exp(S[row + j] - l);
        const oo = ((q0 + i) * p.h + h) * Dv;
        let dd = 0;
        let da = 0;
        for (let d = 0; d < Dv; d++) dd += DO[oo + d] * out[oo + d];
        if (mag) {
          const mo = st.magOut!;
          for (let d = 0; d < Dv; d++) da += Math.abs(DO[oo + d]) * (Math.abs(out[oo + d]) + mo[oo + d]);
          DabsRow![i] = da;
        }
        Drow[i] = dd;
        if (given) {
          let g = 0;
          for (let d = 0; d < Dv; d++) g += DO[oo + d] * (given[oo + d] - out[oo + d]);
          dDRow![i] = g;
        }
        if (dsinks) {
          // the sink's share of the row, P_sink = e^(s_h − LSE), times dP_sink − D = 0 − D
          const pS = Math.exp(p.sinks![h] - l);
          dsinks[h] -= pS * dd;
          if (mds) mds[h] += pS * (da + Math.abs(dd) * (1 + Math.abs(p.sinks![h]) + st.lrow![(q0 + i) * p.h + h]));
          if (cds) cds[h] -= pS * dDRow![i];
        }
      }
      for (let i = 0; i < tq; i++) {
        const [lo, hi] = keyRange(p, i, tq, tk);
        if (lo > hi) continue;
        const row = i * tk;
        const qo = ((q0 + i) * p.h + h) * D;
        const oo = ((q0 + i) * p.h + h) * Dv;
        const Di = Drow[i];
        const L = mag ? st.lrow![(q0 + i) * p.h + h] : 0;
        const lseI = mag ? lse[lseIndex(p, b, h, i)] : 0;
        if (drop) dropoutKeepRow(drop, b * p.h + h, i, lo, hi + 1, keep);
        for (let j = lo; j <= hi; j++) {
          const P = S[row + j];
          // dropout: out used P∘M/(1 − p), so dV takes that and dP is masked and scaled the same way
          const ks = drop ? (keep[j - lo] ? drop.keepScale : 0) : 1;
          const ko = ((k0 + j) * p.hkv + g) * D;
          const vo = ((k0 + j) * p.hkv + g) * Dv;
          let dP = 0;
          let pa = 0;
          if (mag) {
            for (let d = 0; d < Dv; d++) {
              const t = DO[oo + d] * V[vo + d];
              dP += t;
              pa += Math.abs(t);
            }
          } else for (let d = 0; d < Dv; d++) dP += DO[oo + d] * V[vo + d];
          dP *= ks;
          pa *= ks;
          const dS = P * (dP - Di);
          const t = Tn !== null ? Tn[row + j] : 0;
          const deriv = Tn !== null ? p.scale * (1 - t * t) : p.scale;
          const dZ = dS * deriv;
          for (let d = 0; d < D; d++) {
            dq[qo + d] += dZ * K[ko + d];
            dk[ko + d] += dZ * Q[qo + d];
          }
          for (let d = 0; d < Dv; d++) dv[vo + d] += P * ks * DO[oo + d];
          if (given) {
            const cz = -P * deriv * dDRow![i];
            for (let d = 0; d < D; d++) {
              cq![qo + d] += cz * K[ko + d];
              ck![ko + d] += cz * Q[qo + d];
            }
          }
          if (mag && P > 0) {
            const xa = X![row + j];
            const sa = sAbs(p, Math.log(P) + lseI, xa, t, slope, i, j, tq, tk);
            const cdr = Tn !== null ? absScale * (1 - t * t) : absScale;
            let E = cdr * P * (pa + DabsRow![i] + (sa + L) * Math.abs(dP - Di));
            if (Tn !== null) E += absScale * Math.abs(dS) * 2 * (t * t + (Math.abs(t) * (1 - t * t) * xa) / cap);
            const W = P * ks * (1 + sa + L);
            for (let d = 0; d < D; d++) {
              mq![qo + d] += E * Math.abs(K[ko + d]);
              mk![ko + d] += E * Math.abs(Q[qo + d]);
            }
            for (let d = 0; d < Dv; d++) mv![vo + d] += W * Math.abs(DO[oo + d]);
          }
        }
      }
    }
  }
  return {
    out, lse, problem: p, dq, dk, dv,
    ...(dsinks ? { dsinks } : {}),
    ...(mag ? { mag: { out: st.magOut!, lse: st.magLse! }, magGrad: { dq: mq!, dk: mk!, dv: mv!, ...(mds ? { dsinks: mds } : {}) } } : {}),
    ...(given ? { outCorrection: { dq: cq!, dk: ck!, ...(cds ? { dsinks: cds } : {}) } } : {}),
  };
}

/** A row to compute with referenceRows: batch (sequence) b, query head h, query i of that sequence. */
export interface RowSpec {
  readonly b: number;
  readonly h: number;
  readonly i: number;
}

export interface ReferenceRow extends RowSpec {
  /** The row's output, length D. */
  readonly out: Float64Array;
  /** The row's logsumexp (-Infinity when it sees no key). */
  readonly lse: number;
}

/** Reads element `idx` of a host tensor as its exact value, without decoding the whole tensor. */
function elementReader(t: HostTensor): (idx: number) => number {
  if (t.dtype === 'f32') {
    const a = t.data as Float32Array;
    return (idx) => a[idx];
  }
  const a = t.data as Uint16Array;
  return t.dtype === 'bf16' ? (idx) => fromBF16Bits(a[idx]) : (idx) => fromF16Bits(a[idx]);
}

/**
 * Float64 reference for selected rows only: O(Tk·D) time and O(Tk + D) memory per row, no
 * allocation proportional to the problem. For checking huge problems (100K tokens) on
 * sampled rows. Each row's result is exactly what referenceForward computes for it.
 */
export function referenceRows(q: HostTensor, k: HostTensor, v: HostTensor, opts: AttentionOptions | undefined, rows: readonly RowSpec[]): ReferenceRow[] {
  const fn = 'referenceRows';
  const p = prepare(fn, q, k, v, opts);
  check(Array.isArray(rows), 'E_ARG', `${fn}: rows must be an array of { b, h, i }`);
  const rq = elementReader(q);
  const rk = elementReader(k);
  const rv = elementReader(v);
  const D = p.d;
  const Dv = p.vDim;
  const qrow = new Float64Array(D);
  let sbuf = new Float64Array(Math.max(1, Math.min(p.tk, 1 << 16)));
  const res: ReferenceRow[] = [];
  for (const r of rows) {
    const { b, h, i } = r ?? ({} as RowSpec);
    check(Number.isSafeInteger(b) && b >= 0 && b < p.batch, 'E_ARG', `${fn}: row b=${String(b)} is out of range [0, ${p.batch})`);
    check(Number.isSafeInteger(h) && h >= 0 && h < p.h, 'E_ARG', `${fn}: row h=${String(h)} is out of range [0, ${p.h})`);
    const { q0, tq, k0, tk } = segment(p, b);
    check(Number.isSafeInteger(i) && i >= 0 && i < tq, 'E_ARG', `${fn}: row i=${String(i)} is out of range [0, ${tq}) for sequence ${b}`);
    const g = Math.floor(h / (p.h / p.hkv));
    const slope = slopeOf(p, b, h);
    const [lo, hi] = keyRange(p, i, tq, tk);
    const out = new Float64Array(Dv);
    const sink = p.sinks ? p.sinks[h] : -Infinity;
    if (lo > hi) {
      res.push({ b, h, i, out, lse: sink });
      continue;
    }
    const qo = ((q0 + i) * p.h + h) * D;
    for (let d = 0; d < D; d++) qrow[d] = rq(qo + d);
    const n = hi - lo + 1;
    if (sbuf.length < n) sbuf = new Float64Array(n);
    let m = sink;
    for (let j = lo; j <= hi; j++) {
      const ko = ((k0 + j) * p.hkv + g) * D;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += qrow[d] * rk(ko + d);
      const s = logit(p, dot, slope, i, j, tq, tk);
      sbuf[j - lo] = s;
      m = Math.max(m, s);
    }
    let sum = 0;
    for (let t = 0; t < n; t++) {
      const e = Math.exp(sbuf[t] - m);
      sbuf[t] = e;
      sum += e;
    }
    if (sink !== -Infinity) sum += Math.exp(sink - m);
    const inv = 1 / sum;
    const drop = p.dropout;
    const keep = drop ? new Uint8Array(n) : undefined;
    if (drop) dropoutKeepRow(drop, b * p.h + h, i, lo, hi + 1, keep!);
    for (let j = lo; j <= hi; j++) {
      const pj = sbuf[j - lo] * inv * (drop ? (keep![j - lo] ? drop.keepScale : 0) : 1);
      const vo = ((k0 + j) * p.hkv + g) * Dv;
      for (let d = 0; d < Dv; d++) out[d] += pj * rv(vo + d);
    }
    res.push({ b, h, i, out, lse: m + Math.log(sum) });
  }
  return res;
}
