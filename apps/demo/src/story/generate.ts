/**
 * Part 7 of the story: generating tokens with a KV cache at a long context, on the chosen engine
 * (forwardWithKVCache). Runs in Node and in browsers: no node:* imports.
 *
 * The cache holds `context` tokens of keys and values for Hkv heads (paged in blocks of 256,
 * blocks in shuffled order, as a serving system allocates them); each step appends one token
 * (its key and value written in place) and attends with H query heads (GQA). Lengths and the
 * block table live on the engine as index tensors and advance with writeIndex: the loop reads
 * nothing back but each step's output.
 *
 * The check: each step's output against attention recomputed over the whole sequence so far
 * with the engine's ordinary forward (what generating without a cache computes for the newest
 * token), and the last step against the float64 reference.
 */
import {
  allocHost,
  bytesPerElement,
  describeKVCacheProblem,
  referenceForward,
  tensor,
  type AttentionBackend,
  type DType,
  type DeviceIndexTensor,
  type HostTensor,
  type Tensor,
} from '@fa/core';
import { valuesOf } from './exact.js';
import { gaussian, hostIn, rng } from './random.js';

export const GEN_BLOCK = 256;
export const GEN_HEADS = 8;
export const GEN_KV_HEADS = 2;

export interface GenerationConfig {
  readonly context: number;
  readonly steps: number;
  readonly d: number;
  readonly dtype: DType;
  readonly seed: number;
  readonly h?: number;
  readonly hkv?: number;
}

/** Bandwidth of plain copies on the engine, measured in the same run (bytes/s, and how). */
export interface CopyBandwidth {
  readonly bytesPerSecond: number;
  readonly method: string;
}

export interface GenerationResult {
  readonly context: number;
  readonly steps: number;
  readonly h: number;
  readonly hkv: number;
  readonly d: number;
  readonly dtype: DType;
  readonly blockSize: number;
  /** Seconds per generated token (the call and reading its output), each step. */
  readonly perToken: readonly number[];
  readonly medianSeconds: number;
  /** K and V rows the last step reads (the cache as long as it then is). */
  readonly bytesPerToken: number;
  /** bytesPerToken / median seconds. */
  readonly bandwidth: number;
  readonly copy: CopyBandwidth | null;
  /** The cache's memory (K and V, every block allocated). */
  readonly cacheBytes: number;
  /** What attention without a cache materialises per head for the whole sequence: T×T float32 scores. */
  readonly scoresBytesPerHead: number;
  /** FLOPs of one cached step, and of recomputing causal attention over all T tokens. */
  readonly cachedFlops: number;
  readonly recomputeFlops: number;
  /** Largest relative difference (2-norm over a step's out) between cached and recomputed, over the steps. */
  readonly maxRelDiff: number;
  readonly maxLseDiff: number;
  /** The last step against the float64 reference: relative error of out. */
  readonly referenceRel: number;
  readonly tolerance: number;
  readonly pass: boolean;
}

/** ‖a − b‖ / ‖b‖. */
function relDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let n = 0;
  let d = 0;
  for (let i = 0; i < b.length; i++) {
    n += (a[i] - b[i]) ** 2;
    d += b[i] ** 2;
  }
  return d === 0 ? Math.sqrt(n) : Math.sqrt(n / d);
}

type Syncable = { sync?: () => Promise<void> };

/**
 * Generates `steps` tokens after a `context`-token cache; undefined with the engine's reason
 * when it declines the KV-cache call.
 */
export async function runGeneration(b: AttentionBackend, c: GenerationConfig, copyBandwidth?: (kCache: Tensor, bytes: number) => Promise<CopyBandwidth | null>): Promise<GenerationResult | { skipped: string }> {
  const h = c.h ?? GEN_HEADS;
  const hkv = c.hkv ?? GEN_KV_HEADS;
  const { context, steps, d, dtype } = c;
  const total = context + steps;
  const w = hkv * d;
  const next = rng(c.seed);
  const shared = b.name === 'cpu';
  // the whole sequence's keys and values (what recomputing without a cache reads), and the queries
  const kAll = hostIn(gaussian(total * w, next), dtype, [1, total, hkv, d], shared);
  const vAll = hostIn(gaussian(total * w, next), dtype, [1, total, hkv, d], shared);
  const qs = Array.from({ length: steps }, () => hostIn(gaussian(h * d, next), dtype, [1, 1, h, d], shared));
  // the paged cache: blocks in shuffled order, the first `context` tokens in place
  const maxBlocks = Math.ceil(total / GEN_BLOCK);
  const order = Array.from({ length: maxBlocks }, (_, i) => i);
  for (let i = maxBlocks - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const table = Int32Array.from(order);
  const shape = [maxBlocks, GEN_BLOCK, hkv, d];
  const kHost = tensor(allocHost(dtype, maxBlocks * GEN_BLOCK * w), shape, dtype);
  const vHost = tensor(allocHost(dtype, maxBlocks * GEN_BLOCK * w), shape, dtype);
  for (let t = 0; t < context; t++) {
    const row = (table[Math.floor(t / GEN_BLOCK)] * GEN_BLOCK + (t % GEN_BLOCK)) * w;
    kHost.data.set(kAll.data.subarray(t * w, (t + 1) * w) as never, row);
    vHost.data.set(vAll.data.subarray(t * w, (t + 1) * w) as never, row);
  }
  const token = (all: HostTensor, t: number) => tensor(all.data.subarray(t * w, (t + 1) * w), [1, 1, hkv, d], dtype);
  const owned: (Tensor | DeviceIndexTensor)[] = [];
  const up = async (t: HostTensor) => {
    const x = await b.upload(t);
    if (x !== t) owned.push(x);
    return x;
  };
  const kc = await up(kHost);
  const vc = await up(vHost);
  const lens = await b.uploadIndex([context]);
  const tbl = await b.uploadIndex(table, [1, maxBlocks]);
  owned.push(lens, tbl);
  try {
    const first = { cacheSeqlens: lens, blockTable: tbl, kNew: token(kAll, context), vNew: token(vAll, context), causal: true };
    const sup = b.supportsKVCache(describeKVCacheProblem(qs[0], kc, vc, first, b.name));
    if (!sup.ok) return { skipped: sup.reason };
    // warm-up (pipelines, worker threads): the first token's step, untimed; the timed step rewrites the same row
    const warm = await b.forwardWithKVCache(await up(qs[0]), kc, vc, { ...first, kNew: await up(first.kNew), vNew: await up(first.vNew) });
    for (const t of [warm.out, warm.lse]) b.disposeTensor(t);
    const perToken: number[] = [];
    let maxRel = 0;
    let maxLse = 0;
    let lastOut: Float32Array | undefined;
    for (let s = 0; s < steps; s++) {
      const len = context + s;
      const q = await up(qs[s]);
      const kn = await up(token(kAll, len));
      const vn = await up(token(vAll, len));
      const t0 = performance.now();
      const r = await b.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, blockTable: tbl, kNew: kn, vNew: vn, causal: true });
      const outH = await b.read(r.out);
      perToken.push((performance.now() - t0) / 1e3);
      const lseH = await b.read(r.lse);
      for (const t of [r.out, r.lse]) b.disposeTensor(t);
      await b.writeIndex(lens, [len + 1]);
      // recompute over the whole sequence so far with the ordinary forward
      const kSeq = tensor(kAll.data.subarray(0, (len + 1) * w), [1, len + 1, hkv, d], dtype);
      const vSeq = tensor(vAll.data.subarray(0, (len + 1) * w), [1, len + 1, hkv, d], dtype);
      const [kd, vd] = [await b.upload(kSeq), await b.upload(vSeq)];
      const dense = await b.forward(q, kd, vd, { causal: true });
      const out = valuesOf(outH);
      const ref = valuesOf(await b.read(dense.out));
      const lseD = valuesOf(await b.read(dense.lse));
      const lseC = valuesOf(lseH);
      for (const t of [dense.out, dense.lse, kd, vd]) b.disposeTensor(t);
      maxRel = Math.max(maxRel, relDiff(out, ref));
      for (let i = 0; i < lseC.length; i++) maxLse = Math.max(maxLse, Math.abs(lseC[i] - lseD[i]));
      lastOut = out;
    }
    // the last step against the float64 reference (one query row per head: O(T·D))
    const last = context + steps;
    const ref = referenceForward(qs[steps - 1], tensor(kAll.data.subarray(0, last * w), [1, last, hkv, d], dtype), tensor(vAll.data.subarray(0, last * w), [1, last, hkv, d], dtype), { causal: true });
    const referenceRel = relDiff(lastOut!, ref.out);
    const u = dtype === 'f32' ? 2 ** -24 : dtype === 'f16' ? 2 ** -11 : 2 ** -8;
    // f32: the kit's 1e-5; f16/bf16: both sides round out to the dtype, a few units of its roundoff
    const tolerance = dtype === 'f32' ? 1e-5 : 8 * u;
    const sorted = [...perToken].sort((x, y) => x - y);
    const median = sorted[Math.floor(sorted.length / 2)];
    const bpe = bytesPerElement(dtype);
    const bytesPerToken = 2 * last * w * bpe + h * d * bpe;
    const copy = copyBandwidth ? await copyBandwidth(kc, kHost.data.byteLength) : null;
    return {
      context, steps, h, hkv, d, dtype, blockSize: GEN_BLOCK,
      perToken, medianSeconds: median, bytesPerToken, bandwidth: bytesPerToken / median, copy,
      cacheBytes: 2 * kHost.data.byteLength,
      scoresBytesPerHead: 4 * last * last,
      cachedFlops: 4 * h * last * d,
      recomputeFlops: 2 * h * last * last * d,
      maxRelDiff: maxRel, maxLseDiff: maxLse, referenceRel, tolerance,
      pass: maxRel <= tolerance && referenceRel <= tolerance && maxLse <= 1e-4 * Math.max(1, Math.log(last)),
    };
  } finally {
    for (const t of owned) b.disposeTensor(t);
    const s = b as unknown as Syncable;
    if (typeof s.sync === 'function') await s.sync.call(b);
  }
}
