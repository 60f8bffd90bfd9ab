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
 * The tolerance is the conformance kit's policy, applied to the sampled rows by the kit's own
 * compareTensor/compareLse (@fa/core/testing): float32 ‖x − ref‖ ≤ 1e-5·‖ref‖ + u32·‖mag‖ +
 * 2·‖corr‖; f16/bf16 max|x − ref| ≤ 2·max|naive − ref| + 4·u·max|ref| + u32·max(mag) +
 * 2·max|corr|; lse per row |lse − ref| ≤ F·(1e-5 + 8·u32·mag_lse). corr (dq only) is how much an
 * exact backward's dq moves because it is given the engine's out (rowsum(dO∘out) uses it).
 * Only the options the demo uses are supported here: causal or not, default scale, one batch.
 */
import { dtypeRounder, referenceRows, type DType, type HostTensor } from '@fa/core';
import { compareLse, compareTensor, type TensorMetric } from '@fa/core/testing';

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
  /** Term magnitudes of out, lse and dq (core's referenceBackward with magnitudes). */
  readonly magOut: Float64Array;
  readonly magLse: number;
  readonly magDq: Float64Array;
  /** With `givenOut`: the change of dq when rowsum(dO∘out) uses the given out (core's outCorrection). */
  readonly corr: Float64Array;
}

/**
 * Row i of a one-head problem ([T, D] row-major arrays), keys [0, hi]. `out`/`lse` are the
 * row's float64 reference (from referenceRows); `givenOut` the out the engine's backward was
 * given (its forward's). Mirrors reference.ts (forwardCore with magnitudes, then the backward
 * with magnitudes and givenOut) for one row without softcap or ALiBi.
 */
export function rowGradient(Q: Float32Array, K: Float32Array, V: Float32Array, DO: Float32Array, D: number, i: number, hi: number, scale: number, out: Float64Array, lse: number, givenOut?: ArrayLike<number>): RowGradient {
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
  let dabs = 0;
  let dDelta = 0;
  for (let d = 0; d < D; d++) {
    delta += DO[qo + d] * out[d];
    dabs += Math.abs(DO[qo + d]) * (Math.abs(out[d]) + magOut[d]);
    if (givenOut) dDelta += DO[qo + d] * (givenOut[d] - out[d]);
  }
  const dq = new Float64Array(D);
  const magDq = new Float64Array(D);
  const corr = new Float64Array(D);
  for (let j = 0; j <= hi; j++) {
    const p = P[j];
    const dZ = p * (DP[j] - delta) * scale;
    const cz = -p * scale * dDelta;
    const ko = j * D;
    const E = p > 0 ? absScale * p * (PA[j] + dabs + (SA[j] + L) * Math.abs(DP[j] - delta)) : 0;
    for (let d = 0; d < D; d++) {
      const kk = K[ko + d];
      dq[d] += dZ * kk;
      corr[d] += cz * kk;
      magDq[d] += E * Math.abs(kk);
    }
  }
  return { dq, magOut, magLse: L + Math.abs(lse) + 1, magDq, corr };
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

/** The sampled rows of one tensor, gathered for the kit's comparison. */
class Gather {
  readonly got: number[] = [];
  readonly ref: number[] = [];
  readonly mag: number[] = [];
  readonly naive: number[] = [];
  readonly corr: number[] = [];
  readonly row: number[] = [];
  add(row: number, got: ArrayLike<number>, ref: ArrayLike<number>, mag: ArrayLike<number>, naive?: ArrayLike<number>, corr?: ArrayLike<number>): void {
    for (let d = 0; d < ref.length; d++) {
      this.got.push(got[d]);
      this.ref.push(ref[d]);
      this.mag.push(mag[d]);
      if (naive) this.naive.push(naive[d]);
      if (corr) this.corr.push(corr[d]);
      this.row.push(row);
    }
  }
}

function stat(g: Gather, m: TensorMetric): ErrStat {
  let num = 0;
  let den = 0;
  let maxAbs = 0;
  let worst = 0;
  for (let i = 0; i < g.ref.length; i++) {
    const e = Math.abs(g.got[i] - g.ref[i]);
    num += e * e;
    den += g.ref[i] * g.ref[i];
    if (e > maxAbs || !(e === e)) {
      maxAbs = e;
      worst = i;
    }
  }
  const rule = m.rule === 'f32-norm' ? 'rel' : m.rule === 'lse-row' ? 'row' : 'abs';
  const wi = m.worst?.index ?? worst;
  return { maxAbs, rel: den > 0 ? Math.sqrt(num / den) : Math.sqrt(num), err: m.err, bound: m.bound, rule, pass: m.pass, worstRow: g.row[wi] ?? -1 };
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
 * reference under the conformance kit's rules: out and lse always, dq when given.
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
  const gOut = new Gather();
  const gDq = new Gather();
  const lseGot: number[] = [];
  const lseRef: number[] = [];
  const lseMag: number[] = [];
  for (let r = 0; r < rows.length; r++) {
    const i = rows[r];
    const hi = inp.causal ? i : T - 1;
    const rr = ref[r];
    const outRow = inp.out.subarray(i * D, i * D + D);
    const g = rowGradient(Qv, Kv, Vv, DOv, D, i, hi, scale, rr.out, rr.lse, outRow);
    const naive = dtype === 'f32' ? undefined : naiveRow(Qv, Kv, Vv, DOv, D, i, hi, scale, dtype);
    gOut.add(i, outRow, rr.out, g.magOut, naive?.out);
    if (withDq) gDq.add(i, inp.dq!.subarray(i * D, i * D + D), g.dq, g.magDq, naive?.dq, g.corr);
    lseGot.push(inp.lse[i]);
    lseRef.push(rr.lse);
    lseMag.push(g.magLse);
  }
  const lowp = dtype !== 'f32';
  const out = stat(gOut, compareTensor({ tensor: 'out', dtype, got: gOut.got, ref: gOut.ref, mag: gOut.mag, ...(lowp ? { naive: gOut.naive } : {}) }));
  const lseMetric = compareLse(dtype, lseGot, lseRef, lseMag);
  const lseG = new Gather();
  for (let r = 0; r < rows.length; r++) lseG.add(rows[r], [lseGot[r]], [lseRef[r]], [lseMag[r]]);
  const lse = stat(lseG, lseMetric);
  const dq = withDq ? stat(gDq, compareTensor({ tensor: 'dq', dtype, got: gDq.got, ref: gDq.ref, mag: gDq.mag, correction: gDq.corr, ...(lowp ? { naive: gDq.naive } : {}) })) : undefined;
  const rule =
    dtype === 'f32'
      ? 'float32: ‖x − ref‖ ≤ 1e-5·‖ref‖ + u32·‖mag‖ + 2·‖corr‖'
      : `${dtype}: max|x − ref| ≤ 2·max|naive − ref| + 4u·max|ref| + …`;
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
