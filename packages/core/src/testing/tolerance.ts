/**
 * The tolerance policy of the conformance kit, in one place.
 *
 * Notation: ref is the float64 reference (from the exact input values); mag is the reference's
 * term-magnitude tensor of the same shape (referenceForward/Backward with magnitudes: true:
 * per element, the sum of the absolute values of the terms that element is computed from,
 * the logits' own magnitudes included: what float32 rounding errors are proportional to);
 * corr (dq and dk only) is the reference's outCorrection for the out the engine's backward
 * was given (referenceBackward with givenOut): backward receives out rounded to the dtype and
 * forms rowsum(dO∘out) from it, and corr is exactly how much that moves an exact engine's
 * gradient; u32 = 2^-24; u is the unit roundoff of the case's dtype (f16 2^-11, bf16 2^-8).
 *
 * f32, for out, dq, dk, dv (2-norms over the whole tensor):
 *     ‖x − ref‖ ≤ 1e-5·‖ref‖ + u32·‖mag‖ + 2·‖corr‖
 *   The first term is DESIGN.md's rule. The second is a floor that only matters where a purely
 *   relative rule is unattainable by any float32 engine: where the reference cancels to (near)
 *   zero (a row that sees a single key has dS = P·(dP − rowsum(dO∘O)) = 0 exactly, yet every
 *   float32 engine leaves noise of size u32·|dO||V| there; window [0,0] makes all of dq and dk
 *   such noise) and with large-magnitude scores (a logit of size L carries an error of about
 *   u32·L in float32, which moves softmax weights by that relative amount). Without
 *   cancellation mag ≈ |ref| and the floor adds about 6e-8 relative: the rule stays 1e-5.
 *   ‖ref‖ = 0 with mag = 0 (nothing to compute) demands x = 0 (to 1e-30).
 *   Calibration: a float32 tiled FlashAttention simulation (test/helpers/flash-sim.ts) needs at
 *   most 0.07·u32·‖mag‖ of the floor on the generated cases: a ~15× margin.
 *
 * f16, bf16, for out, dq, dk, dv (max-abs over the tensor; the FlashAttention test rule):
 *     max|x − ref| ≤ 2·max|naive − ref| + 4·u·max|ref| + 4·u32·max(mag) + 2·max|corr|
 *   naive is naive attention simulated in the dtype (naive.ts). 4·u·max|ref| is two ulps of the
 *   dtype at the tensor's largest magnitude (one ulp at m is at most 2·u·m): an engine that
 *   accumulates in float32 and rounds once errs by half an ulp plus float32 noise, so two ulps
 *   cover tensors where naive happens to be exact (T = 1: out = v exactly), with a margin for
 *   double rounding. mag covers structural cancellation as for f32, corr the rounded out.
 *   Should naive overflow (the generator avoids it and a test asserts so), its term is replaced
 *   by 8·u·max|ref|, and the metric says so.
 *
 * LSE (float32 in every dtype), per row:
 *     rows whose reference is −∞ (no visible key): exactly −∞, and the row's out and dq must
 *     be exactly 0 (and dk, dv of keys that no query sees); every other row:
 *     |lse − ref| ≤ F·(1e-5 + 8·u32·mag_lse),   mag_lse = |lse| + Σⱼ pⱼ·|logit terms|ⱼ + 1,
 *   with F = 1 for f32 and F = 4 for f16/bf16 (the inputs are exact in every dtype and LSE is
 *   float32, so low precision only gets a small margin). For |lse| ≲ 10 and ordinary scores
 *   this is 1e-5 absolute plus a few float32 ulps of the LSE. (The simulation uses at most
 *   1.4·u32·mag_lse.)
 *
 * dsinks (f32 [H], with sinks) follows the rule of the case's dtype, as dq: its naive term is
 * naive attention's dsinks (the sink as a concatenated score column, naive.ts), and corr is the
 * change that rowsum(dO∘out) from the given out makes.
 *
 * Everywhere: NaN or ±∞ in a result where the reference is finite fails, as does a result of
 * the wrong dtype or shape.
 */
import type { DType } from '../dtype.js';
import { UNIT_ROUNDOFF } from '../dtype.js';

export const F32_REL_TOL = 1e-5;
export const LSE_ABS_TOL = 1e-5;
export const MAG_FACTOR = 1;
/**
 * The float32 floor of the max-abs rule (f16/bf16) counts u32·max(mag) four times: the rule looks
 * at the worst element, not a norm, and an element whose exact value cancels to 0 (a row that sees
 * one key has dq = 0) carries an engine's float32 dot-product error of a few u32 of its term
 * magnitude (a SIMD engine's 96-term dP against its float64 rowsum(dO∘O): 1.14·u32·mag, seen on
 * wasm, case "f16 B3 Tq1 Tk1 H3/1 D96 causal window[8,2]").
 */
export const LOWP_MAG_FACTOR = 4;
export const CORRECTION_FACTOR = 2;
export const LSE_MAG_FACTOR = 8;
export const NAIVE_FACTOR = 2;
export const ULP_FLOOR_UNITS = 4;
export const NAIVE_OVERFLOW_UNITS = 8;
export const LSE_LOW_PRECISION_FACTOR = 4;
export const ZERO_ABS = 1e-30;
const U32 = UNIT_ROUNDOFF.f32;

export type TensorName = 'out' | 'lse' | 'dq' | 'dk' | 'dv' | 'dsinks';

export interface TensorMetric {
  readonly tensor: TensorName;
  /** Which rule applied: 'f32-norm', 'lowp-max' or 'lse-row'. */
  readonly rule: string;
  readonly pass: boolean;
  /** The error in the rule's units (f32-norm: relative ‖x−ref‖/‖ref‖ when ‖ref‖ > 0, else absolute). */
  readonly err: number;
  /** The bound in the same units. */
  readonly bound: number;
  /** ‖ref‖ (f32-norm) or max|ref| (lowp-max, lse-row). */
  readonly refScale: number;
  /** lowp-max: max|naive − ref|. */
  readonly naiveErr?: number;
  /** The worst element: flat index, the engine's value and the reference's. */
  readonly worst?: { readonly index: number; readonly got: number; readonly want: number };
  /** A short explanation of a failure or of a special case. */
  readonly note?: string;
}

function firstBad(got: ArrayLike<number>, ref: ArrayLike<number>): number {
  for (let i = 0; i < got.length; i++) if (!Number.isFinite(got[i]) && Number.isFinite(ref[i])) return i;
  return -1;
}

export interface CompareInput {
  readonly tensor: TensorName;
  readonly dtype: DType;
  /** The engine's values. */
  readonly got: ArrayLike<number>;
  /** The float64 reference. */
  readonly ref: ArrayLike<number>;
  /** The reference's term magnitudes for this tensor (mag / magGrad). */
  readonly mag: ArrayLike<number>;
  /** f16/bf16: naive attention in the dtype (required). */
  readonly naive?: ArrayLike<number>;
  /**
   * dq, dk: the reference's outCorrection for the out the engine's backward was given (how much
   * an exact engine's gradient moves because out is rounded); added to the bound.
   */
  readonly correction?: ArrayLike<number>;
}

/**
 * Compares one of out, dq, dk, dv against the reference under the policy above.
 */
export function compareTensor(x: CompareInput): TensorMetric {
  const { tensor, dtype, got, ref, mag, naive, correction } = x;
  if (got.length !== ref.length) {
    return { tensor, rule: 'shape', pass: false, err: Infinity, bound: 0, refScale: 0, note: `has ${got.length} elements, expected ${ref.length}` };
  }
  const bad = firstBad(got, ref);
  if (bad >= 0) {
    return { tensor, rule: dtype === 'f32' ? 'f32-norm' : 'lowp-max', pass: false, err: Infinity, bound: 0, refScale: 0, worst: { index: bad, got: got[bad], want: ref[bad] }, note: `${got[bad]} where the reference is finite` };
  }
  if (dtype === 'f32') {
    let e2 = 0;
    let r2 = 0;
    let m2 = 0;
    let c2 = 0;
    let wi = -1;
    let we = -1;
    for (let i = 0; i < ref.length; i++) {
      const e = Math.abs(got[i] - ref[i]);
      e2 += e * e;
      r2 += ref[i] * ref[i];
      m2 += mag[i] * mag[i];
      if (correction) c2 += correction[i] * correction[i];
      if (e > we) {
        we = e;
        wi = i;
      }
    }
    const en = Math.sqrt(e2);
    const rn = Math.sqrt(r2);
    const boundAbs = F32_REL_TOL * rn + MAG_FACTOR * U32 * Math.sqrt(m2) + CORRECTION_FACTOR * Math.sqrt(c2) + ZERO_ABS;
    const pass = en <= boundAbs;
    const rel = rn > 0;
    return {
      tensor, rule: 'f32-norm', pass,
      err: rel ? en / rn : en,
      bound: rel ? boundAbs / rn : boundAbs,
      refScale: rn,
      ...(wi >= 0 ? { worst: { index: wi, got: got[wi], want: ref[wi] } } : {}),
      ...(rel ? {} : { note: 'reference is all zero: absolute error' }),
    };
  }
  if (!naive || naive.length !== ref.length) throw new RangeError(`compareTensor: ${dtype} needs naive attention's ${tensor} (${ref.length} elements)`);
  const u = UNIT_ROUNDOFF[dtype];
  let err = 0;
  let wi = -1;
  let nerr = 0;
  let rmax = 0;
  let mmax = 0;
  for (let i = 0; i < ref.length; i++) {
    const e = Math.abs(got[i] - ref[i]);
    if (e > err) {
      err = e;
      wi = i;
    }
    const ne = Math.abs(naive[i] - ref[i]);
    if (!(ne <= nerr)) nerr = Number.isNaN(ne) ? Infinity : ne;
    const ra = Math.abs(ref[i]);
    if (ra > rmax) rmax = ra;
    if (mag[i] > mmax) mmax = mag[i];
  }
  const overflow = !Number.isFinite(nerr);
  const naiveTerm = overflow ? NAIVE_OVERFLOW_UNITS * u * rmax : NAIVE_FACTOR * nerr;
  let cmax = 0;
  if (correction) for (let i = 0; i < correction.length; i++) cmax = Math.max(cmax, Math.abs(correction[i]));
  const bound = naiveTerm + ULP_FLOOR_UNITS * u * rmax + LOWP_MAG_FACTOR * U32 * mmax + CORRECTION_FACTOR * cmax + ZERO_ABS;
  return {
    tensor, rule: 'lowp-max', pass: err <= bound, err, bound, refScale: rmax, naiveErr: nerr,
    ...(wi >= 0 ? { worst: { index: wi, got: got[wi], want: ref[wi] } } : {}),
    ...(overflow ? { note: `naive ${dtype} attention overflowed; its term is ${NAIVE_OVERFLOW_UNITS}·u·max|ref|` } : {}),
  };
}

/** Compares LSE rows under the policy above (err and bound are those of the worst row). */
export function compareLse(dtype: DType, got: ArrayLike<number>, ref: ArrayLike<number>, mag: ArrayLike<number>): TensorMetric {
  const tensor = 'lse';
  if (got.length !== ref.length) return { tensor, rule: 'shape', pass: false, err: Infinity, bound: 0, refScale: 0, note: `has ${got.length} elements, expected ${ref.length}` };
  const F = dtype === 'f32' ? 1 : LSE_LOW_PRECISION_FACTOR;
  let worstRatio = -1;
  let wi = -1;
  let werr = 0;
  let wbound = 0;
  let rmax = 0;
  for (let i = 0; i < ref.length; i++) {
    const r = ref[i];
    const g = got[i];
    if (r === -Infinity) {
      if (g !== -Infinity) return { tensor, rule: 'lse-row', pass: false, err: Infinity, bound: 0, refScale: rmax, worst: { index: i, got: g, want: r }, note: `row sees no key: lse must be -Infinity, got ${g}` };
      continue;
    }
    if (!Number.isFinite(g) && Number.isFinite(r)) return { tensor, rule: 'lse-row', pass: false, err: Infinity, bound: 0, refScale: rmax, worst: { index: i, got: g, want: r }, note: `${g} where the reference is finite` };
    if (Math.abs(r) > rmax) rmax = Math.abs(r);
    const e = Math.abs(g - r);
    const b = F * (LSE_ABS_TOL + LSE_MAG_FACTOR * U32 * mag[i]);
    const ratio = e / b;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      wi = i;
      werr = e;
      wbound = b;
    }
  }
  return {
    tensor, rule: 'lse-row', pass: worstRatio <= 1, err: werr, bound: wbound, refScale: rmax,
    ...(wi >= 0 ? { worst: { index: wi, got: got[wi], want: ref[wi] } } : {}),
  };
}

/** One line per metric: "out 3.1e-7 ≤ 1.0e-5 (f32-norm)". */
export function formatMetric(m: TensorMetric): string {
  const f = (x: number) => (Number.isFinite(x) ? x.toExponential(2) : String(x));
  let s = `${m.tensor} ${m.rule === 'f32-norm' ? 'rel ' : ''}err ${f(m.err)} ${m.pass ? '<=' : '>'} bound ${f(m.bound)} (${m.rule}`;
  if (m.naiveErr !== undefined) s += `, naive err ${f(m.naiveErr)}`;
  s += ')';
  if (m.note) s += `: ${m.note}`;
  return s;
}
