/**
 * Exactness on sampled rows: the float64 reference costs O(T·D) per query row, so checking 64
 * rows is cheap even at 100K tokens, where the full reference (O(T²·D), a T×T matrix) is not.
 *
 * - out and lse come from @fa/core's referenceRows (float64, exact input values).
 * - dq of a row needs only that row's probabilities: dq_i = scale·Σ_j P_ij (dP_ij − δ_i) k_j
 *   with P_ij = e^(s_ij − lse_i), dP_ij = dO_i·v_j, δ_i = dO_i·out_i. @fa/core has no per-row
 *   backward reference, so rowGradient() below computes it (float64), with the same term
 *   magnitudes as core's referenceBackward({ magnitudes: true }) for the tolerance floor; a test
 *   checks both against core's full reference on small problems.
 * - For f16/bf16 the FlashAttention test rule compares with naive attention run in the dtype;
 *   naiveRow() is a per-row transcription of core's naive.ts (same rounding model).
 *
 * The tolerance is core's conformance-kit policy (testing/tolerance.ts) restricted to the
 * sampled rows: float32 ‖x − ref‖ ≤ 1e-5·‖ref‖ + 4·u32·‖mag‖; f16/bf16
 * max|x − ref| ≤ 2·max|naive − ref| + 4·u·max|ref| + 4·u32·max(mag) (+ 4·u·max(outSens) for dq);
 * lse per row |lse − ref| ≤ F·(1e-5 + 8·u32·mag_lse), F = 1 (f32) or 4 (f16/bf16).
 * Only the options the demo uses are supported here: causal or not, default scale, one batch.
 */
import { dtypeRounder, referenceRows, UNIT_ROUNDOFF, type DType, type HostTensor } from '@fa/core';

const U32 = UNIT_ROUNDOFF.f32;

/** `n` distinct rows of [0, T): the first, the last and random ones (seeded), sorted. */
export function sampleRows(T: number, n: number, seed = 7): number[] {
  if (T <= n) return Array.from({ length: T }, (_, i) => i);
  const set = new Set<number>([0, T - 1]);
  let a = seed >>> 0 || 1;
  while (set.size < n) {
    a = (Math.imul(a, 1664525) + 1013904223) >>> 0;
    set.add(a % T);
  }
  return [...set].sort((x, y) => x - y);
}

export interface ErrStat {
  /** max |x − ref| over the sampled entries. */
  readonly maxAbs: number;
  /** ‖x − ref‖ / ‖ref‖ over the sampled entries. */
  readonly rel: number;
  /** The rule's error and bound ("rel": relative 2-norm; "abs": max-abs; "row": worst row's ratio). */
  readonly err: number;
  readonly bound: number;
  readonly rule: 'rel' | 'abs' | 'row';
  readonly pass: boolean;
  /** The row with the largest |x − ref|. */
  readonly worstRow: number;
}

export interface RowsCheck {
  readonly rows: readonly number[];
  readonly out: ErrStat;
  readonly lse: ErrStat;
  readonly dq?: ErrStat;
  /** Every check passed. */
  readonly verified: boolean;
  /** One line describing the rule. */
  readonly rule: string;
  readonly seconds: number;
}

/** Values of a host tensor as float32 (f16/bf16 decoded exactly). */
export function valuesOf(t: HostTensor): Float32Array {
  if (t.dtype === 'f32') return t.data as Float32Array;
  const out = new Float32Array(t.data.length);
  const rd = t.dtype === 'bf16' ? bf16ToF32 : f16ToF32;
  const src = t.data as Uint16Array;
  for (let i = 0; i < src.length; i++) out[i] = rd(src[i]);
  return out;
}

const u32v = new Uint32Array(1);
const f32v = new Float32Array(u32v.buffer);
function bf16ToF32(b: number): number {
  u32v[0] = b << 16;
  return f32v[0];
}
function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** Float64 gradient of one query row, with core's term magnitudes. */
export interface RowGradient {
  readonly dq: Float64Array;
  /** Term magnitudes of out, lse and dq, and dq's sensitivity to a relative error of out. */
  readonly magOut: Float64Array;
  readonly magLse: number;
  readonly magDq: Float64Array;
  readonly outSens: Float64Array;
}

/**
 * Row i of a one-head problem ([T, D] row-major arrays), keys [0, hi]. `out`/`lse` are the
 * row's float64 reference (from referenceRows). Mirrors reference.ts (forwardCore with
 * magnitudes, then the backward) for one row without softcap or ALiBi.
 */
export function rowGradient(Q: Float32Array, K: Float32Array, V: Float32Array, DO: Float32Array, D: number, i: number, hi: number, scale: number, out: Float64Array, lse: number): RowGradient {
  const absScale = Math.abs(scale);
  const qo = i * D;
  const n = hi + 1;
  const P = new Float64Array(n);
  const SA = new Float64Array(n); // |logit terms|: X + |s|
  const DP = new Float64Array(n);
  const PA = new Float64Array(n); // Σ|dO·v|
  let L = 0;
  for (let j = 0; j <= hi; j++) {
    const ko = j * D;
    let dot = 0;
    let xa = 0;
    let dp = 0;
    let pa = 0;
    for (let d = 0; d < D; d++) {
      const qk = Q[qo + d] * K[ko + d];
      dot += qk;
      xa += Math.abs(qk);
      const t = DO[qo + d] * V[ko + d];
      dp += t;
      pa += Math.abs(t);
    }
    const s = dot * scale;
    const p = Math.exp(s - lse);
    P[j] = p;
    SA[j] = absScale * xa + Math.abs(s);
    DP[j] = dp;
    PA[j] = pa;
    if (p > 0) L += p * SA[j];
  }
  const magOut = new Float64Array(D);
  for (let j = 0; j <= hi; j++) {
    const p = P[j];
    if (!(p > 0)) continue;
    const w = SA[j] + L;
    const vo = j * D;
    for (let d = 0; d < D; d++) {
      const vv = V[vo + d];
      magOut[d] += p * (w * Math.abs(vv - out[d]) + Math.abs(vv));
    }
  }
  let delta = 0;
  let d0 = 0;
  let da = 0;
  for (let d = 0; d < D; d++) {
    delta += DO[qo + d] * out[d];
    const a = Math.abs(DO[qo + d]);
    d0 += a * Math.abs(out[d]);
    da += a * magOut[d];
  }
  const dabs = da + d0;
  const dq = new Float64Array(D);
  const magDq = new Float64Array(D);
  const outSens = new Float64Array(D);
  for (let j = 0; j <= hi; j++) {
    const p = P[j];
    const dZ = p * (DP[j] - delta) * scale;
    const ko = j * D;
    const E = p > 0 ? absScale * p * (PA[j] + dabs + (SA[j] + L) * Math.abs(DP[j] - delta)) : 0;
    const ED = p > 0 ? absScale * p * d0 : 0;
    for (let d = 0; d < D; d++) {
      const kk = K[ko + d];
      dq[d] += dZ * kk;
      const ka = Math.abs(kk);
      magDq[d] += E * ka;
      outSens[d] += ED * ka;
    }
  }
  return { dq, magOut, magLse: L + Math.abs(lse) + 1, magDq, outSens };
}

/**
 * Naive attention in `dtype` for one query row (core's naive.ts model: q scaled and rounded
 * first, float32 accumulation with one rounding to the dtype per matmul, softmax in float32,
 * P rounded to the dtype), forward and the row's dq.
 */
export function naiveRow(Q: Float32Array, K: Float32Array, V: Float32Array, DO: Float32Array, D: number, i: number, hi: number, scale: number, dtype: DType): { out: Float32Array; dq: Float32Array } {
  const fr = Math.fround;
  const rd = dtypeRounder(dtype);
  const sc = fr(scale);
  const qo = i * D;
  const qs = new Float32Array(D);
  for (let d = 0; d < D; d++) qs[d] = rd(fr(Q[qo + d] * sc));
  const n = hi + 1;
  const P = new Float64Array(n);
  let m = -Infinity;
  for (let j = 0; j <= hi; j++) {
    const ko = j * D;
    let acc = 0;
    for (let d = 0; d < D; d++) acc = fr(acc + qs[d] * K[ko + d]);
    const s = rd(acc);
    P[j] = s;
    m = Math.max(m, s);
  }
  let sum = 0;
  for (let j = 0; j <= hi; j++) {
    const e = fr(Math.exp(fr(P[j] - m)));
    P[j] = e;
    sum = fr(sum + e);
  }
  const orow = new Float64Array(D);
  for (let j = 0; j <= hi; j++) {
    const pj = rd(fr(P[j] / sum));
    P[j] = pj;
    const vo = j * D;
    for (let d = 0; d < D; d++) orow[d] = fr(orow[d] + pj * V[vo + d]);
  }
  const out = new Float32Array(D);
  for (let d = 0; d < D; d++) out[d] = rd(orow[d]);
  // backward: dP = rd(dO·Vᵀ); r = Σ P·dP (float32); dS = rd(P·(dP − r)); dq = rd(rd(dS·K)·scale)
  const dP = new Float64Array(n);
  let r = 0;
  for (let j = 0; j <= hi; j++) {
    const vo = j * D;
    let a = 0;
    for (let d = 0; d < D; d++) a = fr(a + DO[qo + d] * V[vo + d]);
    dP[j] = rd(a);
    r = fr(r + P[j] * dP[j]);
  }
  const acc = new Float64Array(D);
  for (let j = 0; j <= hi; j++) {
    const ds = rd(fr(P[j] * fr(dP[j] - r)));
    const ko = j * D;
    for (let d = 0; d < D; d++) acc[d] = fr(acc[d] + ds * K[ko + d]);
  }
  const dq = new Float32Array(D);
  for (let d = 0; d < D; d++) dq[d] = rd(fr(rd(acc[d]) * sc));
  return { out, dq };
}

interface Acc {
  num: number;
  den: number;
  maxAbs: number;
  maxRef: number;
  magSq: number;
  magMax: number;
  naiveMax: number;
  sensMax: number;
  worstRow: number;
  nonFinite: number;
}
const newAcc = (): Acc => ({ num: 0, den: 0, maxAbs: 0, maxRef: 0, magSq: 0, magMax: 0, naiveMax: 0, sensMax: 0, worstRow: -1, nonFinite: 0 });

function addRow(a: Acc, row: number, x: ArrayLike<number>, ref: ArrayLike<number>, mag: ArrayLike<number>, naive?: ArrayLike<number>, sens?: ArrayLike<number>): void {
  for (let d = 0; d < ref.length; d++) {
    const e = Math.abs(x[d] - ref[d]);
    if (!Number.isFinite(x[d])) a.nonFinite++;
    a.num += e * e;
    a.den += ref[d] * ref[d];
    if (e > a.maxAbs || a.worstRow < 0) {
      if (e > a.maxAbs) a.maxAbs = e;
      a.worstRow = row;
    }
    a.maxRef = Math.max(a.maxRef, Math.abs(ref[d]));
    a.magSq += mag[d] * mag[d];
    a.magMax = Math.max(a.magMax, mag[d]);
    if (naive) a.naiveMax = Math.max(a.naiveMax, Math.abs(naive[d] - ref[d]));
    if (sens) a.sensMax = Math.max(a.sensMax, sens[d]);
  }
}

function finish(a: Acc, dtype: DType, withSens: boolean): ErrStat {
  const rel = a.den > 0 ? Math.sqrt(a.num / a.den) : Math.sqrt(a.num);
  if (dtype === 'f32') {
    const norm = Math.sqrt(a.num);
    const refNorm = Math.sqrt(a.den);
    const bound = refNorm > 0 ? (1e-5 * refNorm + 4 * U32 * Math.sqrt(a.magSq)) / refNorm : 1e-30 + 4 * U32 * Math.sqrt(a.magSq);
    const err = refNorm > 0 ? norm / refNorm : norm;
    return { maxAbs: a.maxAbs, rel, err, bound, rule: 'rel', pass: a.nonFinite === 0 && err <= bound, worstRow: a.worstRow };
  }
  const u = UNIT_ROUNDOFF[dtype];
  const bound = 2 * a.naiveMax + 4 * u * a.maxRef + 4 * U32 * a.magMax + (withSens ? 4 * u * a.sensMax : 0);
  return { maxAbs: a.maxAbs, rel, err: a.maxAbs, bound, rule: 'abs', pass: a.nonFinite === 0 && a.maxAbs <= bound, worstRow: a.worstRow };
}

export interface RowsInput {
  readonly q: HostTensor;
  readonly k: HostTensor;
  readonly v: HostTensor;
  readonly dOut?: HostTensor;
  readonly causal: boolean;
  /** The engine's results, as float32 values: out [T·D], lse [T], dq [T·D] (optional). */
  readonly out: Float32Array;
  readonly lse: Float32Array;
  readonly dq?: Float32Array;
}

/**
 * Checks the sampled rows of a one-head problem ([1, T, 1, D] tensors) against the float64
 * reference: out and lse always, dq when given.
 */
export function checkRows(inp: RowsInput, rows: readonly number[]): RowsCheck {
  const t0 = performance.now();
  const { q, k, v } = inp;
  const [, T, , D] = q.shape;
  const dtype = q.dtype;
  const scale = 1 / Math.sqrt(D);
  const ref = referenceRows(q, k, v, inp.causal ? { causal: true } : {}, rows.map((i) => ({ b: 0, h: 0, i })));
  const withDq = inp.dq !== undefined && inp.dOut !== undefined;
  const Qv = valuesOf(q);
  const Kv = valuesOf(k);
  const Vv = valuesOf(v);
  const DOv = inp.dOut ? valuesOf(inp.dOut) : new Float32Array(Qv.length);
  const F = dtype === 'f32' ? 1 : 4;
  const aOut = newAcc();
  const aDq = newAcc();
  let lseRatio = -1; // worst |lse − ref| / bound over the rows
  let lseMaxAbs = 0;
  let lseWorstRow = rows[0] ?? 0;
  let lseNum = 0;
  let lseDen = 0;
  let lseBoundAtWorst = 0;
  let lseErrAtWorst = 0;
  for (let r = 0; r < rows.length; r++) {
    const i = rows[r];
    const hi = inp.causal ? i : T - 1;
    const rr = ref[r];
    const g = rowGradient(Qv, Kv, Vv, DOv, D, i, hi, scale, rr.out, rr.lse);
    const naive = dtype === 'f32' ? undefined : naiveRow(Qv, Kv, Vv, DOv, D, i, hi, scale, dtype);
    addRow(aOut, i, inp.out.subarray(i * D, i * D + D), rr.out, g.magOut, naive?.out);
    if (withDq) addRow(aDq, i, inp.dq!.subarray(i * D, i * D + D), g.dq, g.magDq, naive?.dq, g.outSens);
    const e = Math.abs(inp.lse[i] - rr.lse);
    const b = F * (1e-5 + 8 * U32 * g.magLse);
    const ratio = Number.isFinite(e) ? e / b : Infinity;
    lseNum += e * e;
    lseDen += rr.lse * rr.lse;
    if (ratio > lseRatio) {
      lseRatio = ratio;
      lseWorstRow = i;
      lseBoundAtWorst = b;
      lseErrAtWorst = e;
    }
    if (!(e <= lseMaxAbs)) lseMaxAbs = e;
  }
  const out = finish(aOut, dtype, false);
  const lse: ErrStat = {
    maxAbs: lseMaxAbs,
    rel: lseDen > 0 ? Math.sqrt(lseNum / lseDen) : Math.sqrt(lseNum),
    err: lseErrAtWorst,
    bound: lseBoundAtWorst,
    rule: 'row',
    pass: lseRatio <= 1,
    worstRow: lseWorstRow,
  };
  const dq = withDq ? finish(aDq, dtype, true) : undefined;
  const rule =
    dtype === 'f32'
      ? 'float32 rule: ‖x − ref‖ ≤ 1e-5·‖ref‖ + 4·u32·‖mag‖'
      : `${dtype} rule: max|x − ref| ≤ 2·max|naive ${dtype} − ref| + 4·u·max|ref|`;
  return {
    rows,
    out,
    lse,
    ...(dq ? { dq } : {}),
    verified: out.pass && lse.pass && (dq ? dq.pass : true),
    rule,
    seconds: (performance.now() - t0) / 1e3,
  };
}
