/**
 * The seeded conformance case generator. A fixed list of edge-case templates (instantiated for
 * every dtype asked for) guarantees that every option and edge is covered whatever the seed;
 * seeded random combinations fill the list up to `count`. Every case is small (its work,
 * Σ Tq·Tk·H·D over sequences, is capped) so 300+ cases with backward run in well under a
 * minute in pure JS.
 */
import type { DType } from '../dtype.js';
import { DTYPES } from '../dtype.js';
import type { AttentionOptions, AttentionProblem } from '../problem.js';
import { describeProblem } from '../problem.js';
import { keyRange } from '../mask.js';
import type { HostTensor } from '../tensor.js';
import { createRng, randomTensor, hostTensor, type Rng } from './random.js';

/** Head dims the generator uses (engines that lack one say so through supports()). */
export const CASE_HEAD_DIMS: readonly number[] = [1, 8, 16, 32, 40, 64, 80, 96, 128, 192, 256, 512];
/** Sequence lengths around common tile sizes. */
export const EDGE_LENGTHS: readonly number[] = [1, 17, 33, 63, 65, 127, 129];

/** What to build: everything but dtype, d and tq has a default. */
export interface CaseSpec {
  readonly dtype: DType;
  readonly d: number;
  /** V's head dim (and out's), when it differs from d (DeepSeek MLA: d 192, dv 128). */
  readonly dv?: number;
  /** Query length (non-varlen). */
  readonly tq?: number;
  /** Key length (non-varlen); defaults to tq. */
  readonly tk?: number;
  readonly batch?: number;
  readonly h?: number;
  readonly hkv?: number;
  /** Varlen: per-sequence query and key lengths (give both; batch is their length). */
  readonly seqlensQ?: readonly number[];
  readonly seqlensK?: readonly number[];
  readonly causal?: boolean;
  readonly window?: readonly [number, number];
  readonly softcap?: number;
  readonly scale?: number;
  /** 'H': one slope per head (2^(-8(h+1)/H)); 'BH': seeded slopes per (batch, head), some negative. */
  readonly alibi?: 'H' | 'BH';
  /** Attention sinks: seeded logits per query head, from well below to well above the rows' own logsumexp. */
  readonly sinks?: boolean;
  /** Dropout probability (the mask's seed and offset follow from the case seed). */
  readonly dropout?: number;
  /** Multiplier of q and k (large values give large-magnitude scores). Default 1. */
  readonly magnitude?: number;
  readonly deterministic?: boolean;
  /** Seed of the inputs; defaults to a hash of the spec. */
  readonly seed?: number;
  /** Check the backward pass too (default true). */
  readonly backward?: boolean;
}

export interface ConformanceCase {
  readonly id: number;
  /** Readable and unique within a list, e.g. "#012 f16 B2 Tq33 Tk65 H4/2 D64 causal window[3,-1] softcap5". */
  readonly name: string;
  readonly dtype: DType;
  readonly batch: number;
  readonly h: number;
  readonly hkv: number;
  readonly d: number;
  /** V's head dim (d unless the spec gives dv). */
  readonly dv: number;
  /** Longest query/key sequence (the common length unless varlen). */
  readonly tq: number;
  readonly tk: number;
  readonly seqlensQ?: readonly number[];
  readonly seqlensK?: readonly number[];
  /** The options to pass to the engine (cuSeqlens included for varlen). */
  readonly options: AttentionOptions;
  readonly magnitude: number;
  readonly seed: number;
  readonly backward: boolean;
  /** Features the case exercises (for coverage accounting), e.g. 'causal', 'gqa', 'varlen-empty-k'. */
  readonly tags: readonly string[];
  /** Σ over sequences of Tq·Tk·H·D. */
  readonly work: number;
}

export interface CaseInputs {
  readonly q: HostTensor;
  readonly k: HostTensor;
  readonly v: HostTensor;
  /** The upstream gradient for the backward check (q's shape and dtype). */
  readonly dOut: HostTensor;
  readonly options: AttentionOptions;
}

function hashSpec(s: CaseSpec): number {
  const str = JSON.stringify(s);
  let h = 2166136261;
  for (let i = 0; i < str.length; i++) h = Math.imul(h ^ str.charCodeAt(i), 16777619);
  return h >>> 0;
}

function fmtNum(x: number): string {
  return Number.isInteger(x) ? String(x) : String(Number(x.toPrecision(3)));
}

/** Sink logits per head: a spread from negligible (−4) to dominant (+9) against rows of up to ~130 keys. */
export function sinkLogits(h: number, seed: number): number[] {
  const rng = createRng(seed ^ 0x5171c);
  return Array.from({ length: h }, (_, i) => Math.fround(i % 4 === 1 ? rng.uniform(5, 9) : rng.uniform(-4, 3)));
}

function alibiSlopes(kind: 'H' | 'BH', batch: number, h: number, seed: number): number[] {
  if (kind === 'H') return Array.from({ length: h }, (_, i) => Math.fround(2 ** ((-8 * (i + 1)) / h)));
  const rng = createRng(seed ^ 0xa11b1);
  return Array.from({ length: batch * h }, (_, i) => Math.fround(i % 5 === 3 ? -rng.uniform(0.05, 0.5) : rng.uniform(0.02, 1)));
}

/** Builds a case (name, tags, options) from a spec. */
export function makeCase(spec: CaseSpec, id = 0): ConformanceCase {
  const varlen = spec.seqlensQ !== undefined;
  if (varlen !== (spec.seqlensK !== undefined)) throw new RangeError('makeCase: give both seqlensQ and seqlensK, or neither');
  const seqQ = varlen ? [...spec.seqlensQ!] : undefined;
  const seqK = varlen ? [...spec.seqlensK!] : undefined;
  if (varlen && seqQ!.length !== seqK!.length) throw new RangeError('makeCase: seqlensQ and seqlensK must have the same length');
  const batch = varlen ? seqQ!.length : spec.batch ?? 1;
  const tq = varlen ? Math.max(0, ...seqQ!) : spec.tq ?? 1;
  const tk = varlen ? Math.max(0, ...seqK!) : spec.tk ?? tq;
  const h = spec.h ?? 1;
  const hkv = spec.hkv ?? h;
  const d = spec.d;
  const dv = spec.dv ?? d;
  const seed = spec.seed ?? hashSpec(spec);
  const magnitude = spec.magnitude ?? 1;
  const options: { -readonly [K in keyof AttentionOptions]: AttentionOptions[K] } = {};
  if (spec.causal) options.causal = true;
  if (spec.window) options.window = [spec.window[0], spec.window[1]];
  if (spec.softcap !== undefined) options.softcap = spec.softcap;
  if (spec.scale !== undefined) options.scale = spec.scale;
  if (spec.alibi) options.alibiSlopes = alibiSlopes(spec.alibi, batch, h, seed);
  if (spec.sinks) options.sinks = sinkLogits(h, seed);
  // (a seed above 2^32 exercises both key words; the offset a counter word)
  if (spec.dropout !== undefined) options.dropout = { p: spec.dropout, seed: (seed >>> 0) + 2 ** 32 * ((seed >>> 0) % 7), offset: (seed >>> 0) % 1009 };
  if (spec.deterministic) options.deterministic = true;
  if (varlen) {
    options.cuSeqlensQ = cumsum(seqQ!);
    options.cuSeqlensK = cumsum(seqK!);
  }
  const lensQ = varlen ? seqQ! : Array.from({ length: batch }, () => tq);
  const lensK = varlen ? seqK! : Array.from({ length: batch }, () => tk);

  // Tags, for coverage accounting.
  const tags = new Set<string>([spec.dtype, `D${d}`]);
  if (dv !== d) tags.add('dv'), tags.add(`Dv${dv}`);
  let left = -1;
  let right = -1;
  if (spec.window) [left, right] = spec.window;
  if (spec.causal) {
    right = 0;
    tags.add('causal');
  }
  if (spec.window) {
    tags.add('window');
    tags.add(`window[${spec.window[0]},${spec.window[1]}]`);
    if (spec.causal) {
      tags.add('window+causal');
      tags.add(`window[${spec.window[0]},${spec.window[1]}]+causal`);
    }
  }
  if (hkv === 1 && h > 1) tags.add('mqa');
  else if (hkv < h) tags.add('gqa');
  if (h > 1) tags.add('multi-head');
  if (batch > 1) tags.add('multi-batch');
  if (varlen) {
    tags.add('varlen');
    for (let b = 0; b < batch; b++) {
      if (lensQ[b] === 0 && lensK[b] === 0) tags.add('varlen-empty-both');
      else if (lensK[b] === 0) tags.add('varlen-empty-k');
      else if (lensQ[b] === 0) tags.add('varlen-empty-q');
    }
  }
  if (spec.softcap !== undefined) tags.add('softcap');
  if (spec.alibi) tags.add(`alibi-${spec.alibi}`);
  if (spec.scale !== undefined) {
    tags.add('scale');
    if (spec.scale < 0) tags.add('scale-negative');
    if (Math.abs(spec.scale) > 1) tags.add('scale-large');
  }
  if (spec.sinks) tags.add('sinks');
  if (spec.dropout !== undefined) tags.add('dropout');
  if (magnitude >= 10) tags.add('large-magnitude');
  if (spec.deterministic) tags.add('deterministic');
  let work = 0;
  let masked = 0;
  let rows = 0;
  const pw = { windowLeft: left, windowRight: right } as AttentionProblem;
  for (let b = 0; b < batch; b++) {
    work += (lensQ[b] * lensK[b] * h * (d + dv)) / 2;
    for (let i = 0; i < lensQ[b]; i++) {
      const [lo, hi] = keyRange(pw, i, lensQ[b], lensK[b]);
      rows++;
      if (lo > hi) masked++;
    }
    if (lensQ[b] === 1 && lensK[b] === 1) tags.add('T1');
    if (lensQ[b] !== lensK[b] && lensQ[b] > 0 && lensK[b] > 0) tags.add(lensQ[b] < lensK[b] ? 'tq<tk' : 'tq>tk');
    for (const L of [lensQ[b], lensK[b]]) if (L > 1 && EDGE_LENGTHS.includes(L)) tags.add(`T${L}`);
  }
  if (masked > 0) tags.add('masked-rows');
  if (rows > 0 && masked === rows) tags.add('all-rows-masked');

  const parts = [`#${String(id).padStart(3, '0')}`, spec.dtype, `B${batch}`];
  if (varlen) parts.push(`varlen[q:${seqQ!.join(',')} k:${seqK!.join(',')}]`);
  else parts.push(`Tq${tq}`, `Tk${tk}`);
  parts.push(`H${h}/${hkv}`, dv === d ? `D${d}` : `D${d}/${dv}`);
  if (spec.causal) parts.push('causal');
  if (spec.window) parts.push(`window[${spec.window[0]},${spec.window[1]}]`);
  if (spec.softcap !== undefined) parts.push(`softcap${fmtNum(spec.softcap)}`);
  if (spec.alibi) parts.push(`alibi(${spec.alibi})`);
  if (spec.scale !== undefined) parts.push(`scale${fmtNum(spec.scale)}`);
  if (spec.sinks) parts.push('sinks');
  if (spec.dropout !== undefined) parts.push(`dropout${fmtNum(spec.dropout)}`);
  if (magnitude !== 1) parts.push(`x${fmtNum(magnitude)}`);
  if (spec.deterministic) parts.push('det');
  return {
    id,
    name: parts.join(' '),
    dtype: spec.dtype,
    batch, h, hkv, d, dv, tq, tk,
    ...(varlen ? { seqlensQ: seqQ, seqlensK: seqK } : {}),
    options,
    magnitude,
    seed,
    backward: spec.backward ?? true,
    tags: [...tags],
    work,
  };
}

function cumsum(lens: readonly number[]): number[] {
  const cu = [0];
  for (const l of lens) cu.push(cu[cu.length - 1] + l);
  return cu;
}

/** Shapes of q, k, v and out (v and out differ from k and q in the head dim only) for a case. */
export function caseShapes(c: ConformanceCase): { q: number[]; k: number[]; v: number[]; out: number[] } {
  const dv = c.dv ?? c.d;
  if (c.seqlensQ) {
    const tQ = c.seqlensQ.reduce((a, b) => a + b, 0);
    const tK = c.seqlensK!.reduce((a, b) => a + b, 0);
    return { q: [tQ, c.h, c.d], k: [tK, c.hkv, c.d], v: [tK, c.hkv, dv], out: [tQ, c.h, dv] };
  }
  return { q: [c.batch, c.tq, c.h, c.d], k: [c.batch, c.tk, c.hkv, c.d], v: [c.batch, c.tk, c.hkv, dv], out: [c.batch, c.tq, c.h, dv] };
}

/** The seeded inputs of a case: q, k scaled by its magnitude; v and dOut normal; all in its dtype. */
export function caseInputs(c: ConformanceCase): CaseInputs {
  const rng: Rng = createRng(c.seed);
  const { q: qs, k: ks, v: vs, out: os } = caseShapes(c);
  return {
    q: randomTensor(rng, qs, c.dtype, c.magnitude),
    k: randomTensor(rng, ks, c.dtype, c.magnitude),
    v: randomTensor(rng, vs, c.dtype),
    dOut: randomTensor(rng, os, c.dtype),
    options: c.options,
  };
}

/** The validated problem of a case, without generating its random inputs. */
export function caseProblem(c: ConformanceCase): AttentionProblem {
  const { q, k, v } = caseShapes(c);
  const z = (s: number[]) => hostTensor(new Float32Array(s.reduce((a, b) => a * b, 1)), s, c.dtype);
  return describeProblem(z(q), z(k), z(v), c.options);
}

export interface ConformanceCaseOptions {
  /** Seed of the random part (default 1). */
  readonly seed?: number;
  /**
   * Number of cases (default 320; with quick, one per edge template and dtype, 210 for three
   * dtypes). The edge templates come first, each in one dtype, then each in the next dtype...:
   * a count of at least 70 (the number of templates) covers every template.
   */
  readonly count?: number;
  /** Dtypes to generate (default f32, f16, bf16). */
  readonly dtypes?: readonly DType[];
  /** Largest head dim; larger ones are replaced by the largest allowed (default 512). */
  readonly maxD?: number;
  /** Smaller cases, for slow engines (software GPUs): work per case ≤ 3e5, edge templates only by default. */
  readonly quick?: boolean;
  /** Set false to check only the forward pass. */
  readonly backward?: boolean;
}

/** Work cap (Σ Tq·Tk·H·D) of a case. */
export const MAX_CASE_WORK = 1.5e6;
export const QUICK_CASE_WORK = 3e5;

type T = Omit<CaseSpec, 'dtype'>;

/** Edge-case templates: every option and edge appears here at least once (per dtype). */
export function edgeTemplates(): T[] {
  return [
    // sizes
    { tq: 1, tk: 1, d: 32 },
    { tq: 1, tk: 65, d: 64, causal: true },
    { tq: 65, tk: 1, d: 16, causal: true },
    { tq: 17, d: 40, h: 2 },
    { tq: 33, d: 80, causal: true },
    { tq: 63, d: 96, h: 2, batch: 2 },
    { tq: 65, d: 128, causal: true },
    { tq: 127, d: 8, h: 2, batch: 2, causal: true },
    { tq: 129, d: 32, h: 2, causal: true },
    { tq: 129, tk: 127, d: 16 },
    { tq: 33, tk: 47, d: 256, h: 2 },
    { tq: 17, tk: 33, d: 1 },
    { tq: 24, tk: 40, d: 8, batch: 3, h: 4 },
    // Tq != Tk with causal (bottom-right) and windows
    { tq: 33, tk: 65, d: 64, h: 2, causal: true },
    { tq: 65, tk: 33, d: 64, h: 2, causal: true },
    { tq: 17, tk: 63, d: 32, window: [3, -1] },
    { tq: 63, tk: 17, d: 32, window: [-1, 5] },
    { tq: 40, tk: 24, d: 16, window: [2, 2], causal: true },
    { tq: 33, tk: 17, d: 16, window: [2, 0] },
    // windows on a square problem, with and without causal
    { tq: 33, d: 32, window: [0, 0] },
    { tq: 33, d: 32, window: [3, -1] },
    { tq: 33, d: 32, window: [-1, 5] },
    { tq: 33, d: 32, window: [2, 2] },
    { tq: 33, d: 32, window: [0, 0], causal: true },
    { tq: 33, d: 32, window: [3, -1], causal: true },
    { tq: 33, d: 32, window: [-1, 5], causal: true },
    { tq: 33, d: 32, window: [2, 2], causal: true },
    // GQA and MQA
    { tq: 33, d: 64, h: 4, hkv: 2, causal: true },
    { tq: 17, tk: 40, d: 32, h: 8, hkv: 2, window: [4, 4] },
    { tq: 20, tk: 20, d: 16, h: 6, hkv: 3, batch: 2 },
    { tq: 33, d: 64, h: 4, hkv: 1 },
    { tq: 20, tk: 50, d: 16, h: 3, hkv: 1, causal: true },
    // varlen, with empty sequences
    { seqlensQ: [5, 0, 17, 9], seqlensK: [7, 0, 0, 33], d: 32, h: 4, hkv: 2, causal: true },
    { seqlensQ: [0, 12, 3], seqlensK: [20, 5, 8], d: 16, h: 2, window: [2, 1], alibi: 'BH' },
    { seqlensQ: [33, 1, 65], seqlensK: [65, 17, 1], d: 64, h: 2, softcap: 5 },
    { seqlensQ: [3, 4], seqlensK: [0, 0], d: 16, h: 2 },
    { seqlensQ: [16, 33, 17], seqlensK: [16, 33, 17], d: 40, h: 2, hkv: 1, causal: true },
    // softcap, ALiBi, scale
    { tq: 33, d: 64, softcap: 5 },
    { tq: 40, tk: 17, d: 32, softcap: 0.5, causal: true },
    { tq: 33, d: 64, softcap: 30, magnitude: 30 },
    { tq: 33, d: 32, h: 4, alibi: 'H', causal: true },
    { tq: 17, tk: 33, d: 64, batch: 2, h: 2, alibi: 'BH' },
    { tq: 33, tk: 20, d: 32, h: 2, hkv: 1, alibi: 'H', softcap: 8, window: [6, 2] },
    { tq: 33, d: 32, scale: 0.3 },
    { tq: 33, d: 32, scale: -0.5, causal: true },
    { tq: 33, d: 16, scale: 2 },
    { tq: 17, tk: 33, d: 64, scale: 1e-3 },
    { tq: 33, d: 16, scale: -1.5, window: [4, 1] },
    // large-magnitude scores
    { tq: 65, d: 64, magnitude: 20, causal: true },
    { tq: 33, tk: 129, d: 128, magnitude: 50 },
    { seqlensQ: [9, 30], seqlensK: [40, 12], d: 32, h: 4, hkv: 2, magnitude: 35, causal: true },
    { tq: 33, d: 16, magnitude: 40, alibi: 'H', h: 2 },
    // deterministic flag
    { tq: 33, d: 64, h: 4, hkv: 1, causal: true, deterministic: true },
    // attention sinks, alone and with every option; rows that see no key (LSE = the sink)
    { tq: 33, d: 64, h: 4, hkv: 2, causal: true, sinks: true },
    { seqlensQ: [5, 0, 17, 9], seqlensK: [7, 3, 0, 33], d: 32, h: 4, hkv: 2, window: [2, 1], sinks: true },
    { tq: 1, tk: 65, d: 128, h: 8, hkv: 2, softcap: 20, sinks: true },
    { tq: 33, tk: 20, d: 16, h: 2, alibi: 'BH', magnitude: 4, sinks: true },
    // V's head dim of its own (DeepSeek MLA: 192/128), smaller and larger than q·k's, with options
    { tq: 20, tk: 33, d: 192, dv: 128, h: 2, causal: true },
    { tq: 33, tk: 40, d: 64, dv: 32, h: 4, hkv: 2, causal: true },
    { tq: 17, d: 24, dv: 48, h: 2, softcap: 5, sinks: true },
    { seqlensQ: [5, 0, 17], seqlensK: [9, 4, 0], d: 48, dv: 16, h: 2, window: [3, 1], alibi: 'H' },
    { tq: 9, tk: 12, d: 8, dv: 1, h: 2, hkv: 1 },
    { tq: 9, d: 1, dv: 8 },
    // head dims past 256 (Gemma-class global layers: 512; MLA decode's latent 576/512 is a KV case)
    { tq: 33, tk: 65, d: 512, causal: true },
    { tq: 17, tk: 40, d: 320, h: 2, hkv: 1, window: [8, 0] },
    { tq: 24, d: 512, dv: 256, h: 2, sinks: true },
    // dropout (philox.ts's mask, the same on every engine), alone and with other options
    { tq: 33, d: 32, h: 2, dropout: 0.3 },
    { seqlensQ: [5, 0, 17], seqlensK: [9, 4, 0], d: 16, h: 4, hkv: 2, causal: true, dropout: 0.5 },
    { tq: 17, tk: 40, d: 64, softcap: 5, sinks: true, dropout: 0.1 },
    { tq: 9, d: 24, dv: 8, h: 2, dropout: 0.9 },
  ];
}

const RANDOM_LENGTHS = [1, 2, 5, 8, 16, 17, 24, 31, 32, 33, 40, 48, 63, 64, 65, 96, 127, 128, 129];

function randomSpec(rng: Rng, dtype: DType, dims: readonly number[], budget: number): CaseSpec {
  const d = rng.pick(dims);
  const hkv = rng.pick([1, 1, 2, 2, 3, 4]);
  const group = rng.pick([1, 1, 2, 3, 4]);
  const h = Math.min(8, hkv * group) - (Math.min(8, hkv * group) % hkv);
  const len = () => (rng.bool(0.6) ? rng.pick(RANDOM_LENGTHS) : rng.int(1, rng.bool(0.5) ? 48 : 130));
  const varlen = rng.bool(0.25);
  let batch = rng.int(1, 3);
  let tq = len();
  let tk = rng.bool(0.5) ? tq : len();
  let seqlensQ: number[] | undefined;
  let seqlensK: number[] | undefined;
  if (varlen) {
    batch = rng.int(1, 4);
    seqlensQ = Array.from({ length: batch }, () => (rng.bool(0.15) ? 0 : len()));
    seqlensK = seqlensQ.map((l) => (rng.bool(0.15) ? 0 : rng.bool(0.5) && l > 0 ? l : len()));
  }
  const spec: { -readonly [K in keyof CaseSpec]: CaseSpec[K] } = { dtype, d, h, hkv, batch, tq, tk, seqlensQ, seqlensK };
  if (!varlen) {
    delete spec.seqlensQ;
    delete spec.seqlensK;
  } else {
    delete spec.tq;
    delete spec.tk;
    delete spec.batch;
  }
  if (rng.bool(0.35)) spec.causal = true;
  if (rng.bool(0.3)) spec.window = [rng.pick([-1, 0, 1, 3, 8, 31]), rng.pick([-1, 0, 2, 5, 16])];
  if (rng.bool(0.2)) spec.softcap = rng.pick([0.5, 5, 20, 50]);
  if (rng.bool(0.2)) spec.alibi = rng.pick(['H', 'BH'] as const);
  const large = rng.bool(0.1);
  if (large) spec.magnitude = rng.pick([20, 35, 50]);
  else if (rng.bool(0.15)) spec.scale = rng.pick([0.05, 0.3, -0.7, 1.5, 2]);
  if (rng.bool(0.1)) spec.deterministic = true;
  if (rng.bool(0.15)) spec.sinks = true;
  if (rng.bool(0.12)) spec.dv = rng.pick(dims);
  if (rng.bool(0.1)) spec.dropout = rng.pick([0.1, 0.25, 0.5]);
  // Fit the work budget by shortening the sequences, then fewer heads/batches.
  const work = () => {
    const dd = Math.max(d, spec.dv ?? d);
    if (spec.seqlensQ) return spec.seqlensQ.reduce((a, l, b) => a + l * spec.seqlensK![b], 0) * spec.h! * dd;
    return spec.batch! * spec.tq! * spec.tk! * spec.h! * dd;
  };
  while (work() > budget) {
    if (spec.seqlensQ) {
      spec.seqlensQ = spec.seqlensQ.map((l) => Math.floor(l * 0.75));
      spec.seqlensK = spec.seqlensK!.map((l) => Math.floor(l * 0.75));
    } else if (spec.batch! > 1 && rng.bool(0.3)) spec.batch = spec.batch! - 1;
    else {
      tq = Math.max(1, Math.floor(spec.tq! * 0.75));
      tk = Math.max(1, Math.floor(spec.tk! * 0.75));
      spec.tq = tq;
      spec.tk = tk;
      if (tq === 1 && tk === 1) spec.h = spec.hkv;
    }
  }
  return spec as CaseSpec;
}

function clampSpec(s: CaseSpec, dims: readonly number[], budget: number): CaseSpec {
  const fit = (x: number) => (dims.includes(x) ? x : Math.max(...dims.filter((y) => y <= x), dims[0]));
  const d = fit(s.d);
  const out: { -readonly [K in keyof CaseSpec]: CaseSpec[K] } = { ...s, d };
  if (s.dv !== undefined) out.dv = fit(s.dv);
  const work = () => {
    const dd = Math.max(d, out.dv ?? d);
    if (out.seqlensQ) return out.seqlensQ.reduce((a, l, b) => a + l * out.seqlensK![b], 0) * (out.h ?? 1) * dd;
    return (out.batch ?? 1) * (out.tq ?? 1) * (out.tk ?? out.tq ?? 1) * (out.h ?? 1) * dd;
  };
  while (work() > budget) {
    if (out.seqlensQ) {
      out.seqlensQ = out.seqlensQ.map((l) => Math.ceil(l * 0.7));
      out.seqlensK = out.seqlensK!.map((l) => Math.ceil(l * 0.7));
    } else {
      const tq = out.tq ?? 1;
      out.tk = Math.max(1, Math.ceil((out.tk ?? tq) * 0.7));
      out.tq = Math.max(1, Math.ceil(tq * 0.7));
    }
  }
  return out;
}

/**
 * The conformance cases: every edge template for every dtype, then seeded random
 * combinations up to `count`. Deterministic in its options.
 */
export function conformanceCases(o: ConformanceCaseOptions = {}): ConformanceCase[] {
  const seed = o.seed ?? 1;
  const quick = o.quick === true;
  const dtypes = o.dtypes && o.dtypes.length > 0 ? [...o.dtypes] : [...DTYPES];
  const templates = edgeTemplates();
  const count = o.count ?? (quick ? templates.length * dtypes.length : 320);
  const maxD = o.maxD ?? 512;
  const dims = CASE_HEAD_DIMS.filter((d) => d <= maxD);
  if (dims.length === 0) throw new RangeError(`conformanceCases: maxD ${maxD} is below the smallest head dim ${CASE_HEAD_DIMS[0]}`);
  const budget = quick ? QUICK_CASE_WORK : MAX_CASE_WORK;
  const specs: CaseSpec[] = [];
  // Every template in one dtype (rotating), then again in the next dtype, and so on: a list cut
  // short still has every template (and every dtype); the full list has each in every dtype.
  for (let pass = 0; pass < dtypes.length; pass++) {
    templates.forEach((t, n) => {
      const dtype = dtypes[(n + pass) % dtypes.length];
      specs.push(clampSpec({ ...t, dtype, seed: hashSpec({ ...t, dtype }) ^ seed }, dims, budget));
    });
  }
  const rng = createRng(seed * 7919 + 17);
  let n = 0;
  while (specs.length < count) specs.push(randomSpec(rng, dtypes[n++ % dtypes.length], dims, budget));
  return specs.slice(0, count).map((s, i) => makeCase(o.backward === false ? { ...s, backward: false } : s, i));
}
