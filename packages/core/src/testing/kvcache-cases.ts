/**
 * The conformance kit's KV-cache cases: a fixed list of templates (instantiated per dtype, like
 * the dense edge templates) covering contiguous and paged caches with shuffled block tables,
 * block sizes 1, 4–256, ragged lengths including 0 and a full cache, appends that cross a block
 * boundary, Tq > 1 with causal (speculative verification, chunked prefill), GQA ratios 1–8,
 * every score option, empty sequences, and index inputs as the engine's index tensors.
 *
 * Every cache row a call must not read (past a sequence's length, and blocks no table uses) is
 * NaN, and table entries past a sequence's last block are −1: an engine that reads them fails.
 */
import type { DType } from '../dtype.js';
import { DTYPES } from '../dtype.js';
import { describeKVCacheProblem, kvCacheRow, type KVCacheOptions, type KVCacheProblem } from '../kvcache.js';
import { numel, type HostTensor } from '../tensor.js';
import { createRng, hostTensor, randomValues } from './random.js';
import { sinkLogits } from './cases.js';

export interface KVCacheCaseSpec {
  readonly dtype: DType;
  readonly d: number;
  /** V's head dim (vCache, vNew, out), when it differs from d (DeepSeek-style caches: 192/128). */
  readonly dv?: number;
  /** With dv: a latent cache (MLA decode), one tensor as kCache and vCache, V its first dv columns (KVCacheOptions.vFromK). */
  readonly latent?: boolean;
  readonly h?: number;
  readonly hkv?: number;
  /** Queries per sequence (default 1: decode). */
  readonly tq?: number;
  /** Tokens cached per sequence before the call; B is its length. */
  readonly seqlens: readonly number[];
  /** Tokens appended by the call (default 0: no kNew/vNew). */
  readonly tnew?: number;
  /** Paged with this block size; contiguous when absent. */
  readonly blockSize?: number;
  /**
   * Room beyond the longest sequence (default 3): a contiguous cache's extra rows; a paged cache's
   * extra table columns (−1) and unused blocks (NaN). 0 makes the longest sequence fill its cache.
   */
  readonly spare?: number;
  readonly causal?: boolean;
  readonly window?: readonly [number, number];
  readonly softcap?: number;
  readonly scale?: number;
  readonly alibi?: 'H' | 'BH';
  /** Attention sinks (seeded logits per query head, as the dense kit's). */
  readonly sinks?: boolean;
  /** cacheLeftpad per sequence (rows before it stay NaN: a call that reads them fails). */
  readonly leftpad?: readonly number[];
  /** cacheBatchIdx (contiguous caches): the cache row of each sequence; the cache has max + 2 rows. */
  readonly batchIdx?: readonly number[];
  /** Rotary inside the call: rotaryDim (even, ≤ D), GPT-J pairs when interleaved. */
  readonly rotary?: { readonly dim: number; readonly interleaved?: boolean };
  /** Multiplier of q and the keys. */
  readonly magnitude?: number;
  /** Paged: give every sequence all maxBlocksPerSeq blocks (room to grow over several calls). */
  readonly fullTable?: boolean;
  /** Pass lengths and table as index tensors made with backend.uploadIndex. */
  readonly deviceIndex?: boolean;
  readonly seed?: number;
}

export interface KVCacheCase {
  readonly id: number;
  /** e.g. "#kv007 bf16 B3 Tq4 +4 lens[40,1,63] paged32 H4/2 D64 causal". */
  readonly name: string;
  readonly spec: KVCacheCaseSpec;
  readonly dtype: DType;
  readonly tags: readonly string[];
  /** Σ over sequences of Tq·(len + Tnew)·H·D. */
  readonly work: number;
}

export interface KVCacheInputs {
  readonly q: HostTensor;
  /** The caches before the call (callers that let an engine append must clone them first). */
  readonly kCache: HostTensor;
  readonly vCache: HostTensor;
  readonly kNew?: HostTensor;
  readonly vNew?: HostTensor;
  readonly cacheSeqlens: Int32Array;
  /** Paged: [B · maxBlocksPerSeq], row-major. */
  readonly blockTable?: Int32Array;
  readonly maxBlocksPerSeq: number;
  /** The score options (no index inputs, no kNew/vNew). */
  readonly options: Omit<KVCacheOptions, 'cacheSeqlens' | 'blockTable' | 'kNew' | 'vNew'>;
  /** The problem, validated with host index arrays. */
  readonly problem: KVCacheProblem;
}

function hashSpec(s: object): number {
  const str = JSON.stringify(s);
  let h = 2166136261;
  for (let i = 0; i < str.length; i++) h = Math.imul(h ^ str.charCodeAt(i), 16777619);
  return h >>> 0;
}

function alibiSlopes(kind: 'H' | 'BH', batch: number, h: number, seed: number): number[] {
  if (kind === 'H') return Array.from({ length: h }, (_, i) => Math.fround(2 ** ((-8 * (i + 1)) / h)));
  const rng = createRng(seed ^ 0xa11b1);
  return Array.from({ length: batch * h }, (_, i) => Math.fround(i % 5 === 3 ? -rng.uniform(0.05, 0.5) : rng.uniform(0.02, 1)));
}

/** Builds a case (name, tags) from a spec. */
export function makeKVCacheCase(spec: KVCacheCaseSpec, id = 0): KVCacheCase {
  const s = { ...spec, seed: spec.seed ?? hashSpec(spec) };
  const h = s.h ?? 1;
  const hkv = s.hkv ?? h;
  const tq = s.tq ?? 1;
  const tnew = s.tnew ?? 0;
  const spare = s.spare ?? 3;
  const lens = s.seqlens;
  const tags = new Set<string>([s.dtype, `D${s.d}`, s.blockSize ? 'paged' : 'contiguous', `ratio${h / hkv}`]);
  if (s.blockSize) tags.add(`bs${s.blockSize}`);
  if (tnew > 0) tags.add('append');
  if (tq > 1) tags.add('tq>1');
  if (s.causal) tags.add('causal');
  if (s.causal && tq > 1) tags.add('tq>1+causal');
  if (s.window) tags.add('window');
  if (s.softcap !== undefined) tags.add('softcap');
  if (s.alibi) tags.add(`alibi-${s.alibi}`);
  if (s.sinks) tags.add('sinks');
  if (s.leftpad) tags.add('leftpad');
  if (s.batchIdx) tags.add('batch-idx');
  if (s.rotary) tags.add(s.rotary.interleaved ? 'rotary-interleaved' : 'rotary');
  if (s.dv !== undefined && s.dv !== s.d) tags.add('dv'), tags.add(`Dv${s.dv}`);
  if (s.latent) tags.add('latent');
  if (s.scale !== undefined) tags.add('scale');
  if ((s.magnitude ?? 1) >= 10) tags.add('large-magnitude');
  if (s.deviceIndex) tags.add('device-index');
  if (h > hkv) tags.add('gqa');
  if (lens.length > 1 && new Set(lens).size > 1) tags.add('ragged');
  let work = 0;
  for (const len of lens) {
    const n = len + tnew;
    work += tq * n * h * s.d;
    if (n === 0) tags.add('empty-seq');
    if (s.blockSize && tnew > 0 && Math.floor(len / s.blockSize) !== Math.floor((n - 1) / s.blockSize)) tags.add('append-crosses-block');
    if (s.blockSize && tnew > 0 && len % s.blockSize === 0 && len > 0) tags.add('append-starts-block');
    if (s.causal && tq > n) tags.add('masked-rows');
  }
  if (!s.blockSize && spare === 0) tags.add('full-cache');
  const parts = [`#kv${String(id).padStart(3, '0')}`, s.dtype, `B${lens.length}`, `Tq${tq}`];
  if (tnew > 0) parts.push(`+${tnew}`);
  parts.push(`lens[${lens.join(',')}]`, s.blockSize ? `paged${s.blockSize}` : `cap${Math.max(0, ...lens.map((l) => l + tnew)) + spare}`, `H${h}/${hkv}`, s.dv !== undefined && s.dv !== s.d ? `D${s.d}/${s.dv}` : `D${s.d}`);
  if (s.causal) parts.push('causal');
  if (s.window) parts.push(`window[${s.window[0]},${s.window[1]}]`);
  if (s.softcap !== undefined) parts.push(`softcap${s.softcap}`);
  if (s.alibi) parts.push(`alibi(${s.alibi})`);
  if (s.sinks) parts.push('sinks');
  if (s.leftpad) parts.push(`leftpad[${s.leftpad.join(',')}]`);
  if (s.batchIdx) parts.push(`rows[${s.batchIdx.join(',')}]`);
  if (s.rotary) parts.push(`rotary${s.rotary.dim}${s.rotary.interleaved ? 'i' : ''}`);
  if (s.latent) parts.push('latent');
  if (s.scale !== undefined) parts.push(`scale${s.scale}`);
  if ((s.magnitude ?? 1) !== 1) parts.push(`x${s.magnitude}`);
  if (s.deviceIndex) parts.push('index-tensors');
  return { id, name: parts.join(' '), spec: s, dtype: s.dtype, tags: [...tags], work };
}

/** The seeded inputs of a case. */
export function kvCacheCaseInputs(c: KVCacheCase): KVCacheInputs {
  const s = c.spec;
  const rng = createRng(s.seed!);
  const h = s.h ?? 1;
  const hkv = s.hkv ?? h;
  const tq = s.tq ?? 1;
  const tnew = s.tnew ?? 0;
  const spare = s.spare ?? 3;
  const B = s.seqlens.length;
  const d = s.d;
  const dv = s.dv ?? d;
  const w = hkv * d;
  const wv = hkv * dv;
  const mag = s.magnitude ?? 1;
  const lens = Int32Array.from(s.seqlens);
  const longest = Math.max(0, ...s.seqlens.map((l) => l + tnew));
  let cacheShape: number[];
  let table: Int32Array | undefined;
  let maxBlocks = 1;
  if (s.blockSize) {
    const bs = s.blockSize;
    const used = s.seqlens.map((l) => Math.ceil((l + tnew) / bs));
    maxBlocks = Math.max(1, Math.max(0, ...used) + Math.ceil(spare / bs));
    const need = s.fullTable ? used.map(() => maxBlocks) : used;
    const numBlocks = need.reduce((a, b) => a + b, 0) + Math.min(spare, 2);
    const perm = Array.from({ length: numBlocks }, (_, i) => i);
    for (let i = numBlocks - 1; i > 0; i--) {
      const j = rng.int(0, i);
      [perm[i], perm[j]] = [perm[j], perm[i]];
    }
    table = new Int32Array(B * maxBlocks).fill(-1);
    let next = 0;
    for (let b = 0; b < B; b++) for (let j = 0; j < need[b]; j++) table[b * maxBlocks + j] = perm[next++];
    cacheShape = [numBlocks, bs, hkv, d];
  } else {
    cacheShape = [s.batchIdx ? Math.max(...s.batchIdx) + 2 : B, longest + spare, hkv, d];
  }
  const vCacheShape = [...cacheShape.slice(0, 3), dv];
  const kv = new Float32Array(numel(cacheShape)).fill(NaN);
  const vv = new Float32Array(numel(vCacheShape)).fill(NaN);
  const q = hostTensor(randomValues(rng, B * tq * h * d, mag), [B, tq, h, d], s.dtype);
  const kNew = tnew > 0 ? hostTensor(randomValues(rng, B * tnew * w, mag), [B, tnew, hkv, d], s.dtype) : undefined;
  const vNew = tnew > 0 && !s.latent ? hostTensor(randomValues(rng, B * tnew * wv), [B, tnew, hkv, dv], s.dtype) : undefined;
  const options: { -readonly [K in keyof KVCacheInputs['options']]: KVCacheInputs['options'][K] } = {};
  if (s.causal) options.causal = true;
  if (s.window) options.window = [s.window[0], s.window[1]];
  if (s.softcap !== undefined) options.softcap = s.softcap;
  if (s.scale !== undefined) options.scale = s.scale;
  if (s.alibi) options.alibiSlopes = alibiSlopes(s.alibi, B, h, s.seed!);
  if (s.sinks) options.sinks = sinkLogits(h, s.seed!);
  if (s.leftpad) options.cacheLeftpad = Int32Array.from(s.leftpad);
  if (s.batchIdx) options.cacheBatchIdx = Int32Array.from(s.batchIdx);
  if (s.latent) options.vFromK = dv;
  if (s.rotary) {
    // GPT-NeoX's tables (base 10000) for every position the call can rotate
    const half = s.rotary.dim / 2, maxPos = cacheShape[1] * (s.blockSize ? maxBlocks : 1) + tq;
    const cos = new Float32Array(maxPos * half), sin = new Float32Array(maxPos * half);
    for (let t = 0; t < maxPos; t++) for (let m = 0; m < half; m++) {
      const a = t * 10000 ** (-m / half);
      cos[t * half + m] = Math.cos(a);
      sin[t * half + m] = Math.sin(a);
    }
    options.rotaryCos = hostTensor(cos, [maxPos, half], 'f32');
    options.rotarySin = hostTensor(sin, [maxPos, half], 'f32');
    if (s.rotary.interleaved) options.rotaryInterleaved = true;
  }
  // Describe the call on placeholder caches to get the address rule, then fill the live rows.
  const k0 = hostTensor(kv, cacheShape, s.dtype);
  const p0 = describeKVCacheProblem(q, k0, s.latent ? k0 : hostTensor(vv, vCacheShape, s.dtype), { ...options, cacheSeqlens: lens, ...(table ? { blockTable: table } : {}) });
  for (let b = 0; b < B; b++) {
    for (let t = s.leftpad ? s.leftpad[b] : 0; t < lens[b]; t++) {
      const row = kvCacheRow(p0, b, t);
      kv.set(randomValues(rng, w, mag), row * w);
      vv.set(randomValues(rng, wv), row * wv);
    }
  }
  const kCache = hostTensor(kv, cacheShape, s.dtype);
  const vCache = s.latent ? kCache : hostTensor(vv, vCacheShape, s.dtype);
  const all = { ...options, cacheSeqlens: lens, ...(table ? { blockTable: table } : {}), ...(kNew ? { kNew, ...(vNew ? { vNew } : {}) } : {}) };
  const problem = describeKVCacheProblem(q, kCache, vCache, all);
  return { q, kCache, vCache, ...(kNew ? { kNew, ...(vNew ? { vNew } : {}) } : {}), cacheSeqlens: lens, ...(table ? { blockTable: table } : {}), maxBlocksPerSeq: maxBlocks, options, problem };
}

type T = Omit<KVCacheCaseSpec, 'dtype'>;

/** The KV-cache templates: every feature of the call at least once (per dtype). */
export function kvCacheTemplates(): T[] {
  const base: T[] = [
    // decode (Tq = 1, one appended token), contiguous and paged, ragged with an empty sequence
    { seqlens: [5, 0, 17], tnew: 1, d: 32, h: 4, hkv: 2 },
    { seqlens: [31, 16, 0, 47], tnew: 1, blockSize: 16, d: 64, h: 8, hkv: 1 },
    { seqlens: [24, 7], tnew: 1, blockSize: 8, d: 16, h: 6, hkv: 2 },
    { seqlens: [300, 5], tnew: 1, blockSize: 256, d: 16, h: 2, hkv: 1 },
    { seqlens: [100, 64], tnew: 1, blockSize: 64, d: 128, h: 2 },
    { seqlens: [70, 0, 5], tnew: 1, blockSize: 16, d: 256, h: 2, hkv: 1 },
    { seqlens: [9, 2], tnew: 1, d: 1, h: 2, hkv: 1 },
    { seqlens: [130], d: 80, h: 5 },
    // block size 1, Tq > 1
    { seqlens: [3, 7], tnew: 2, tq: 2, blockSize: 1, causal: true, d: 16, h: 2 },
    // full caches: no room left, and an append that fills the last row
    { seqlens: [20, 12], spare: 0, d: 32, h: 2, hkv: 1 },
    { seqlens: [18, 3], tnew: 2, spare: 0, d: 16, h: 3, hkv: 1 },
    { seqlens: [12, 4], tnew: 4, blockSize: 4, spare: 0, d: 16, h: 2 },
    // appends crossing block boundaries: chunked prefill and speculative verification (causal)
    { seqlens: [14, 30], tnew: 5, tq: 5, blockSize: 16, causal: true, d: 32, h: 4, hkv: 1 },
    { seqlens: [40, 1, 63], tnew: 4, tq: 4, blockSize: 32, causal: true, d: 64, h: 4, hkv: 2 },
    { seqlens: [5, 12], tnew: 16, tq: 16, blockSize: 16, causal: true, d: 32, h: 2, hkv: 1 },
    { seqlens: [200], tnew: 3, tq: 3, blockSize: 128, causal: true, d: 64, h: 4 },
    { seqlens: [11, 0], tnew: 3, tq: 2, blockSize: 4, d: 40, h: 2 },
    // more queries than keys (rows that see nothing), empty sequences, no append
    { seqlens: [0, 0], tnew: 2, tq: 3, causal: true, d: 16, h: 2 },
    { seqlens: [0, 0, 0], tq: 2, d: 32, h: 2, hkv: 1 },
    { seqlens: [0, 9], blockSize: 16, d: 16, h: 2 },
    { seqlens: [40, 25], tq: 6, causal: true, d: 32, h: 2 },
    // score options
    { seqlens: [50, 33], tnew: 1, blockSize: 16, window: [8, 0], d: 32, h: 4, hkv: 2 },
    { seqlens: [17, 40], tnew: 2, tq: 2, window: [3, -1], causal: true, d: 16, h: 2 },
    { seqlens: [33, 12], tnew: 1, blockSize: 16, softcap: 5, d: 64, h: 2 },
    { seqlens: [29, 60], tnew: 1, blockSize: 32, alibi: 'H', d: 32, h: 4, hkv: 1 },
    { seqlens: [10, 45, 3], tnew: 3, tq: 3, alibi: 'BH', causal: true, d: 16, h: 2 },
    { seqlens: [37], tnew: 1, scale: -0.5, d: 32, h: 2 },
    { seqlens: [64, 20], tnew: 1, blockSize: 16, magnitude: 30, d: 64, h: 2 },
    // attention sinks: decode (split over the keys where engines split long rows), rows that see no key
    { seqlens: [5, 0, 17], tnew: 1, d: 32, h: 4, hkv: 2, sinks: true },
    { seqlens: [1500, 40], tnew: 1, blockSize: 256, d: 64, h: 8, hkv: 2, sinks: true },
    { seqlens: [0, 9], tq: 2, causal: true, window: [4, 0], softcap: 10, d: 16, h: 2, sinks: true },
    // head dim 512 (paged decode) and 576 (MLA's latent + rope width, contiguous)
    { seqlens: [40, 7], tnew: 1, blockSize: 16, d: 512, h: 4, hkv: 1 },
    { seqlens: [33], tnew: 1, d: 576, h: 4, hkv: 1, sinks: true },
    // FlashAttention-2's extras: left padding, cache rows by batch index, rotary inside the call
    { seqlens: [20, 9, 31], tnew: 1, leftpad: [5, 0, 30], d: 32, h: 4, hkv: 2 },
    { seqlens: [12, 30], tnew: 3, tq: 3, causal: true, window: [6, 0], alibi: 'H', leftpad: [4, 11], d: 16, h: 2 },
    { seqlens: [7, 18, 0], tnew: 2, batchIdx: [3, 0, 1], d: 32, h: 2, hkv: 1 },
    { seqlens: [25, 40], tnew: 1, rotary: { dim: 32 }, d: 64, h: 4, hkv: 2 },
    { seqlens: [14, 3], tnew: 4, tq: 4, causal: true, blockSize: 8, rotary: { dim: 16, interleaved: true }, leftpad: [6, 1], d: 16, h: 2, sinks: true },
    { seqlens: [9, 21], tq: 2, rotary: { dim: 40 }, batchIdx: [1, 2], leftpad: [2, 20], d: 40, h: 2 },
    // a head dim of v's own (DeepSeek-style caches: K rows 192 = 128 + 64 rope, V rows 128): paged
    // decode, and a causal append with sinks where V is the wider
    { seqlens: [30, 0, 12], tnew: 1, blockSize: 16, d: 192, dv: 128, h: 4, hkv: 2 },
    { seqlens: [9, 20], tnew: 3, tq: 3, causal: true, d: 24, dv: 40, h: 2, hkv: 1, sinks: true },
    // MLA decode: one latent cache (576 = 512 + 64 rope) as K and V (its first 512 columns), 16 query heads
    { seqlens: [37, 0, 9], tnew: 1, blockSize: 16, d: 576, dv: 512, h: 16, hkv: 1, latent: true },
    { seqlens: [12, 5], tnew: 2, tq: 2, causal: true, d: 40, dv: 24, h: 4, hkv: 2, latent: true, sinks: true },
  ];
  // lengths and tables as the engine's index tensors
  const onDevice = [base[0], base[1], base[12], base[13], base[19]].map((t) => ({ ...t, deviceIndex: true }));
  return [...base, ...onDevice];
}

export interface KVCacheCaseOptions {
  /** Seed of the inputs (default 1). */
  readonly seed?: number;
  /** Dtypes (default f32, f16, bf16). */
  readonly dtypes?: readonly DType[];
  /** Largest head dim; larger templates use the largest allowed (default 576). */
  readonly maxD?: number;
  /** Each template once, in one dtype (rotating), instead of in every dtype. */
  readonly quick?: boolean;
}

/** The KV-cache cases: every template in every dtype (quick: in one dtype each). */
export function kvCacheCases(o: KVCacheCaseOptions = {}): KVCacheCase[] {
  const dtypes = o.dtypes && o.dtypes.length > 0 ? [...o.dtypes] : [...DTYPES];
  const maxD = o.maxD ?? 576;
  const seed = o.seed ?? 1;
  const templates = kvCacheTemplates();
  const passes = o.quick ? 1 : dtypes.length;
  const out: KVCacheCase[] = [];
  for (let pass = 0; pass < passes; pass++) {
    templates.forEach((t, n) => {
      const dtype = dtypes[(n + pass) % dtypes.length];
      const d = t.d <= maxD ? t.d : maxD;
      const spec = { ...t, d, ...(t.dv !== undefined ? { dv: Math.min(t.dv, maxD) } : {}), dtype };
      out.push(makeKVCacheCase({ ...spec, seed: hashSpec(spec) ^ seed }, out.length));
    });
  }
  return out;
}
