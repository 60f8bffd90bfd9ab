/**
 * The plan of a KV-cache call: which attention kernel it takes (one rule, below), its row tiles,
 * and the split of the key range over workgroups.
 *
 * The rule: a problem whose kv heads each have at most KV_DECODE_MAX_ROWS query rows (GQA group
 * × Tq: decode, speculative verification) takes the decode kernel (wgsl/kvdecode.ts: lanes of a
 * team share each K/V row, rows in registers); larger Tq (prefill) the tiled kernel
 * (wgsl/kvcache.ts: 16 rows per workgroup in workgroup memory, one key per thread).
 */
import { FAError, type KVCacheProblem } from '@fa/core';
import { KV_DECODE_MAX_D, KV_TILE, kvRowsFor } from './wgsl/kvcache.js';
import { KVD_MAX_ROW_KEYS, KVD_MAX_ROWS, KVD_THREADS, type KVDecodeSpec, kvdChunkElems, kvDecodeWorkgroupBytes } from './wgsl/kvdecode.js';

/** Workgroups the split aims for: enough to fill a large GPU (an H200 has 132 SMs). */
export const KV_TARGET_WORKGROUPS = 1024;
/**
 * Query rows per kv head (GQA group × Tq) up to which the decode kernel runs. On the H200 it beat
 * the tiled kernel 3.6–5.5× at every size measured, 4 to 256 rows (runs KV-1, KV-2 in
 * BENCHMARKS.md; both cost time linear in row tiles), so this limit could rise.
 */
export const KV_DECODE_MAX_ROWS = 128;

/** What the plan needs to know of the adapter and the backend's options. */
export interface KVCaps {
  readonly subgroups: boolean;
  /** Smallest subgroup size (0 without subgroups). */
  readonly subgroupMin: number;
  /** The backend compiles generic kernels (CPU adapters). */
  readonly generic: boolean;
  /** The adapter's maxComputeWorkgroupStorageSize (WebGPU guarantees 16384, the default). */
  readonly maxShared?: number;
}

/** Benchmark and test knobs (the backend's kv* options). */
export interface KVTuning {
  /** 'decode' / 'tiled' force a kernel; 'auto' (default) applies the rule. */
  readonly kernel?: 'auto' | 'decode' | 'tiled';
  /** Keys per split at least (rounded up to KV_TILE). */
  readonly minChunk?: number;
  /** Workgroups the split aims for, counted in KVD_THREADS-thread workgroups (default KV_TARGET_WORKGROUPS). */
  readonly targetWorkgroups?: number;
  /** Decode kernel: keys in flight per team (1, 2, 4 or 8; rows · keys ≤ 16, or 32 with subgroup sums). */
  readonly keysPerStep?: number;
  /** Decode kernel: load the next step's keys while computing this one (default: with the spread softmax; alone it was slower on the H200, runs 1 and KV-4). */
  readonly prefetch?: boolean;
  /** Decode kernel, 16-bit caches: bytes per lane per row load, 16 (8 elements, default) or 8 (4 elements, twice the lanes). */
  readonly chunkBytes?: 8 | 16;
  /** Decode kernel: q in workgroup memory instead of registers (default false). */
  readonly qShared?: boolean;
  /** Decode kernel: rescale a row's accumulators only when its maximum changed (default false; bit-identical results). */
  readonly lazyRescale?: boolean;
  /** Decode kernel, specialised with subgroup sums: how a team sums its partial dots (default 'xor'). */
  readonly teamSum?: 'xor' | 'transpose';
  /**
   * Decode kernel: 'spread' (default) — each lane of a team does the softmax of one (key, row) pair
   * instead of all of them (specialised code with subgroup sums and rows·keys ≤ lanes; elsewhere, or
   * when 'team' is asked for, every lane does every pair's softmax).
   */
  readonly softmax?: 'team' | 'spread';
  /** Decode kernel: block-table lookups one step ahead of the row loads that use them (default: with the spread softmax). */
  readonly rowsAhead?: boolean;
  /** Decode kernel: threads per workgroup, 64, 128 (default) or 256; the split target scales so the GPU gets as many threads. */
  readonly threads?: number;
  /** Decode kernel: the most query rows per workgroup, 1, 2, 4 or 8 (default 8; fewer: fewer registers, K/V re-read per row tile). */
  readonly rows?: number;
}

export interface KVPlan {
  readonly kernel: 'tiled' | 'decode';
  /** Rows per workgroup (the partial buffer's row stride). */
  readonly rows: number;
  readonly rowTiles: number;
  /** Workgroups per split: B · Hkv · rowTiles. */
  readonly groups: number;
  readonly chunk: number;
  readonly splits: number;
  /** The decode kernel's specialisation, and its lanes per key row (also in the uniform). */
  readonly decode?: KVDecodeSpec;
  readonly lanes?: number;
}

function pow2AtLeast(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/** The decode kernel's specialisation for a problem. */
export function decodeSpec(p: KVCacheProblem, caps: KVCaps, t: KVTuning = {}): { spec: KVDecodeSpec; lanes: number } {
  const f32 = p.dtype === 'f32';
  if (t.softmax !== undefined && t.softmax !== 'team' && t.softmax !== 'spread') throw new FAError('E_ARG', `kvSoftmax must be 'team' or 'spread'; got ${String(t.softmax)}`);
  if (t.threads !== undefined && ![64, 128, 256].includes(t.threads)) throw new FAError('E_ARG', `kvThreads must be 64, 128 or 256; got ${String(t.threads)}`);
  if (t.rows !== undefined && ![1, 2, 4, 8].includes(t.rows)) throw new FAError('E_ARG', `kvRows must be 1, 2, 4 or 8; got ${String(t.rows)}`);
  // (the spread softmax and the transposed sums need rows · keys a power of two)
  if (t.keysPerStep !== undefined && ![1, 2, 4, 8].includes(t.keysPerStep)) throw new FAError('E_ARG', `kvKeysPerStep must be 1, 2, 4 or 8; got ${String(t.keysPerStep)}`);
  const maxRows = t.rows ?? KVD_MAX_ROWS;
  const rows = caps.generic ? maxRows : Math.min(maxRows, pow2AtLeast((p.h / p.hkv) * p.tq));
  if (t.chunkBytes !== undefined && t.chunkBytes !== 8 && t.chunkBytes !== 16) throw new FAError('E_ARG', `kvChunkBytes must be 8 or 16; got ${String(t.chunkBytes)}`);
  if (t.teamSum !== undefined && t.teamSum !== 'xor' && t.teamSum !== 'transpose') throw new FAError('E_ARG', `kvTeamSum must be 'xor' or 'transpose'; got ${String(t.teamSum)}`);
  const e = kvdChunkElems(p.dtype, t.chunkBytes);
  // 4-element chunks: two per lane past 128 columns (generic kernels: always, D up to 256 on any L)
  const chunks = e === 4 && (caps.generic || p.d > 32 * e) ? 2 : 1;
  const lanes = Math.min(32, Math.max(4, pow2AtLeast(Math.ceil(p.d / (e * chunks)))));
  const slots = (chunks * e) / 4;
  // q and acc of every row plus KB K/V chunks in registers: fewer keys in flight for more rows
  const want = t.keysPerStep ?? (caps.generic ? 2 : rows * slots >= 8 ? 2 : 4);
  const subgroups = caps.subgroups && caps.subgroupMin >= lanes;
  // without subgroups the team sums go through KB·R·threads floats of workgroup memory
  const keys = Math.max(1, Math.min(want, Math.floor((subgroups ? KVD_MAX_ROW_KEYS : 16) / rows)));
  // rows start at multiples of D elements: chunk loads need D a multiple of the chunk
  const vec = !caps.generic && p.d % e === 0;
  // the spread softmax (default where it can run: specialised code with subgroup sums, R·KB ≤ L);
  // with it, loads one step ahead and block-table lookups one step before them (run KV-4 on the
  // H200: 48.6 → 93.5 % of the copy kernel in f32, 38.6 → 64.8 % in f16; without it both cost)
  const spread = (t.softmax ?? 'spread') === 'spread' && subgroups && !caps.generic && rows * keys <= lanes;
  let spec: KVDecodeSpec = {
    enc: p.dtype, rows, elems: e, chunks, keys, lanes: caps.generic ? 0 : lanes, subgroups, vec, generic: caps.generic,
    threads: t.threads ?? KVD_THREADS, prefetch: t.prefetch ?? spread, rowsAhead: t.rowsAhead ?? spread, qShared: t.qShared ?? false, lazyRescale: t.lazyRescale ?? false,
    // the transpose needs the lane count compiled in and subgroup shuffles; elsewhere the sums it replaces
    teamSum: t.teamSum === 'transpose' && subgroups && !caps.generic ? 'transpose' : 'xor',
    // its sums are a reduce-scatter, each lane left with one (key, row) pair: R·KB ≤ L
    spread,
  };
  // Workgroup memory within the adapter's limit: without subgroups the team sums take keys · rows ·
  // threads floats, so fewer keys a step (a kvKeysPerStep too included); what still does not fit
  // (kvThreads, kvRows, kvQShared) is refused.
  const maxShared = caps.maxShared ?? 16384;
  while (kvDecodeWorkgroupBytes(spec) > maxShared && spec.keys > 1 && !spec.subgroups) spec = { ...spec, keys: spec.keys / 2 };
  const bytes = kvDecodeWorkgroupBytes(spec);
  if (bytes > maxShared) {
    throw new FAError('E_ARG', `the KV decode kernel with kvThreads ${spec.threads}, ${spec.rows} rows${spec.qShared ? ' and kvQShared' : ''} needs ${bytes} bytes of workgroup memory; this adapter allows ${maxShared} (use fewer kvThreads or kvRows)`);
  }
  return { spec, lanes };
}

export function planKV(p: KVCacheProblem, caps: KVCaps, t: KVTuning = {}): KVPlan {
  const n = (p.h / p.hkv) * p.tq;
  // head dims past the decode kernel's take the tiled one, whatever kvKernel asks
  // (and a head dim of v's own, a latent cache among them: the decode kernel has one head dim)
  const kernel = p.d > KV_DECODE_MAX_D || p.vDim !== p.d ? 'tiled' : t.kernel === 'tiled' || t.kernel === 'decode' ? t.kernel : n <= KV_DECODE_MAX_ROWS ? 'decode' : 'tiled';
  const d = kernel === 'decode' ? decodeSpec(p, caps, t) : undefined;
  const rows = d ? d.spec.rows : kvRowsFor(p.d);
  const rowTiles = Math.max(1, Math.ceil(n / rows));
  const groups = p.batch * p.hkv * rowTiles;
  // as many splits as fill the target, in chunks of whole key tiles (at least minChunk keys)
  // (the target counts KVD_THREADS-thread workgroups: a decode kernel of 64 threads gets twice as many)
  const target = (t.targetWorkgroups ?? KV_TARGET_WORKGROUPS) * (d ? KVD_THREADS / d.spec.threads : 1);
  const want = Math.max(1, Math.ceil(target / Math.max(1, groups)));
  const chunk = Math.max(t.minChunk ?? KV_TILE, Math.ceil(Math.max(1, p.tk) / want / KV_TILE) * KV_TILE);
  const splits = Math.max(1, Math.ceil(p.tk / chunk));
  return { kernel, rows, rowTiles, groups, chunk, splits, ...(d ? { decode: d.spec, lanes: d.lanes } : {}) };
}
