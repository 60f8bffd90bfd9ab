/** Shared helpers of the CPU-engine tests: seeded problems and the f32 comparison rule. */
import fc from 'fast-check';
import { decode, encode, referenceBackward, tensor, type AttentionOptions, type DType, type HostTensor } from '../dist/index.js';

/** xorshift32 uniform values in [−scale, scale). */
export function values(n: number, seed: number, scale = 1): Float32Array {
  let s = (seed * 2654435761) >>> 0 || 1;
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    a[i] = (s / 2 ** 32 - 0.5) * 2 * scale;
  }
  return a;
}

export function hostOf(v: Float32Array, shape: readonly number[], dtype: DType): HostTensor {
  return dtype === 'f32' ? tensor(v, shape, 'f32') : tensor(encode(dtype, v), shape, dtype);
}

/** Values of a host tensor as float32 (f16/bf16 decoded). */
export function valuesOf(t: { dtype: DType; data: Float32Array | Uint16Array }): Float32Array {
  return t.dtype === 'f32' ? (t.data as Float32Array) : decode(t.dtype, t.data as Uint16Array);
}

export interface ProblemSpec {
  readonly b: number;
  readonly h: number;
  readonly hkv: number;
  readonly d: number;
  /** Per sequence lengths (varlen when `varlen`), else tq/tk of every sequence. */
  readonly tqs: readonly number[];
  readonly tks: readonly number[];
  readonly varlen: boolean;
  readonly causal: boolean;
  readonly window?: readonly [number, number];
  readonly softcap?: number;
  readonly scale?: number;
  readonly alibi?: 'h' | 'bh';
  readonly seed: number;
}

export interface Problem {
  readonly q: HostTensor;
  readonly k: HostTensor;
  readonly v: HostTensor;
  readonly dOut: HostTensor;
  readonly opts: AttentionOptions;
}

export function buildProblem(s: ProblemSpec, dtype: DType = 'f32'): Problem {
  const sum = (a: readonly number[]) => a.reduce((x, y) => x + y, 0);
  const totalQ = s.varlen ? sum(s.tqs) : s.b * s.tqs[0];
  const totalK = s.varlen ? sum(s.tks) : s.b * s.tks[0];
  const qShape = s.varlen ? [totalQ, s.h, s.d] : [s.b, s.tqs[0], s.h, s.d];
  const kShape = s.varlen ? [totalK, s.hkv, s.d] : [s.b, s.tks[0], s.hkv, s.d];
  const nq = totalQ * s.h * s.d;
  const nk = totalK * s.hkv * s.d;
  const opts: { -readonly [K in keyof AttentionOptions]: AttentionOptions[K] } = {};
  if (s.causal) opts.causal = true;
  if (s.window) opts.window = s.window;
  if (s.softcap) opts.softcap = s.softcap;
  if (s.scale !== undefined) opts.scale = s.scale;
  if (s.alibi) {
    const n = s.alibi === 'h' ? s.h : s.b * s.h;
    opts.alibiSlopes = Array.from(values(n, s.seed + 9), (x) => Math.abs(x));
  }
  if (s.varlen) {
    const cu = (a: readonly number[]) => Int32Array.from([0, ...a.map((_, i) => sum(a.slice(0, i + 1)))]);
    opts.cuSeqlensQ = cu(s.tqs);
    opts.cuSeqlensK = cu(s.tks);
  }
  return {
    q: hostOf(values(nq, s.seed + 1, 2), qShape, dtype),
    k: hostOf(values(nk, s.seed + 2, 2), kShape, dtype),
    v: hostOf(values(nk, s.seed + 3), kShape, dtype),
    dOut: hostOf(values(nq, s.seed + 4), qShape, dtype),
    opts,
  };
}

/** Random small problems over every option. */
export const problemSpec: fc.Arbitrary<ProblemSpec> = fc
  .record({
    b: fc.integer({ min: 1, max: 3 }),
    hkv: fc.integer({ min: 1, max: 2 }),
    g: fc.constantFrom(1, 2, 3),
    d: fc.integer({ min: 1, max: 24 }),
    varlen: fc.boolean(),
    lens: fc.array(fc.tuple(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 40 })), { minLength: 3, maxLength: 3 }),
    causal: fc.boolean(),
    window: fc.option(fc.tuple(fc.integer({ min: -1, max: 12 }), fc.integer({ min: -1, max: 12 })), { nil: undefined }),
    softcap: fc.option(fc.double({ min: 0.5, max: 20, noNaN: true }), { nil: undefined }),
    scale: fc.option(fc.double({ min: 0.05, max: 2, noNaN: true }), { nil: undefined }),
    alibi: fc.option(fc.constantFrom<'h' | 'bh'>('h', 'bh'), { nil: undefined }),
    seed: fc.integer({ min: 1, max: 1e6 }),
  })
  .map((r) => {
    const lens = r.lens.slice(0, r.b);
    // not varlen: one common length, at least 1 query
    const tqs = r.varlen ? lens.map((x) => x[0]) : [Math.max(1, lens[0][0])];
    const tks = r.varlen ? lens.map((x) => x[1]) : [lens[0][1]];
    return { b: r.b, h: r.hkv * r.g, hkv: r.hkv, d: r.d, tqs, tks, varlen: r.varlen, causal: r.causal, window: r.window, softcap: r.softcap, scale: r.scale, alibi: r.alibi, seed: r.seed };
  });

const U32 = 2 ** -24;

/**
 * The f32 rule of DESIGN.md, ‖x − ref‖ ≤ 1e-5·‖ref‖, with the conformance kit's floor for
 * structural cancellation (16·u32·‖mag‖, mag = the reference's term magnitudes). Returns a
 * message on failure, undefined when it holds.
 */
export function relCheck(name: string, got: ArrayLike<number>, ref: ArrayLike<number>, mag: ArrayLike<number>, tol = 1e-5): string | undefined {
  if (got.length !== ref.length) return `${name}: ${got.length} elements, expected ${ref.length}`;
  let e2 = 0;
  let r2 = 0;
  let m2 = 0;
  for (let i = 0; i < ref.length; i++) {
    if (Number.isFinite(ref[i]) !== Number.isFinite(got[i])) return `${name}[${i}] = ${got[i]}, reference ${ref[i]}`;
    const e = got[i] - ref[i];
    e2 += e * e;
    r2 += ref[i] * ref[i];
    m2 += mag[i] * mag[i];
  }
  const bound = tol * Math.sqrt(r2) + 16 * U32 * Math.sqrt(m2) + 1e-30;
  return Math.sqrt(e2) <= bound ? undefined : `${name}: ‖x − ref‖ = ${Math.sqrt(e2).toExponential(3)} > ${bound.toExponential(3)} (‖ref‖ = ${Math.sqrt(r2).toExponential(3)})`;
}

/** LSE per row: −∞ exactly where the reference is, else within 1e-5·(1 + |ref| + mag·u32·16). */
export function lseCheck(got: ArrayLike<number>, ref: ArrayLike<number>, mag: ArrayLike<number>): string | undefined {
  for (let i = 0; i < ref.length; i++) {
    if (ref[i] === -Infinity) {
      if (got[i] !== -Infinity) return `lse[${i}] = ${got[i]}, reference −∞`;
      continue;
    }
    if (!(Math.abs(got[i] - ref[i]) <= 1e-5 * (1 + Math.abs(ref[i])) + 16 * U32 * mag[i])) return `lse[${i}] = ${got[i]}, reference ${ref[i]}`;
  }
  return undefined;
}

/** Reference results with magnitudes (for the floors). */
export function referenceOf(p: Problem) {
  return referenceBackward(p.q, p.k, p.v, p.dOut, p.opts, { magnitudes: true });
}
