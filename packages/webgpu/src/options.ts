/** Options of the WebGPU engine: device acquisition, tile overrides, code generation, f16 path. */
import type { AcquireOptions } from './gpu.js';
import type { KernelKind } from './tiles.js';
import type { Tile } from './wgsl/spec.js';

export interface WebGPUBackendOptions extends AcquireOptions {
  /** Force a tile shape (tests, tuning); fields left out come from the chosen candidate. */
  readonly tile?: Partial<Tile>;
  /** Per-kernel tile overrides (benchmark tuning); win over `tile`. */
  readonly tiles?: Partial<Record<KernelKind, Partial<Tile>>>;
  /**
   * Per-kernel candidates tried first, in place of the built-in preferred tiles; unlike `tiles`,
   * a problem they do not fit (e.g. D = 256 in 48 KiB) falls back to the built-in list — exactly
   * how a default behaves, so benchmarks and the kit can try a would-be default.
   */
  readonly preferredTiles?: Partial<Record<KernelKind, readonly Tile[]>>;
  /**
   * 'specialised': one pipeline per (dtype, D, softcap, ALiBi) — fastest kernels.
   * 'generic': those read at run time — few pipelines, for CPU adapters whose compiler is slow.
   * 'auto' (default): generic on CPU adapters (llvmpipe, SwiftShader), specialised elsewhere.
   */
  readonly codegen?: 'auto' | 'specialised' | 'generic';
  /**
   * f16 tensors on an adapter with `shader-f16`: true (default) reads and writes them as WGSL
   * f16 (`enable f16;`, f16 staging in workgroup memory); false keeps the packed path (two per
   * u32, `unpack2x16float`) that adapters without `shader-f16` use. Arithmetic is f32 either way.
   */
  readonly nativeF16?: boolean;
  /**
   * Stream-ordered calls made in one turn of the event loop share one command buffer, submitted
   * when the turn ends (or before anything that reads back, writes an index or submits on its own)
   * instead of one submission a call: model code issuing hundreds of small calls a step pays one
   * submit. Default false. Errors of a batch surface at the next sync or read, naming the batch.
   */
  readonly batchCalls?: boolean;
  /**
   * KV-cache calls: the fewest keys per split of a sequence's key range (default: one key tile,
   * 128). The split count otherwise aims to fill the GPU; changes summation order only.
   */
  readonly kvMinChunk?: number;
  /**
   * KV-cache calls: which attention kernel. 'auto' (default): the decode kernel where a kv head
   * has at most KV_DECODE_MAX_ROWS (128) query rows (GQA group × Tq), the tiled kernel above.
   * 'decode' / 'tiled' force one (tests, benchmarks).
   */
  readonly kvKernel?: 'auto' | 'decode' | 'tiled';
  /** KV-cache benchmark tuning: workgroups the split aims for (default 1024). */
  readonly kvTargetWorkgroups?: number;
  /** KV-cache benchmark tuning: the decode kernel's keys in flight per team (default by rows: 4 or 2). */
  readonly kvKeysPerStep?: number;
  /** KV-cache benchmark tuning: the decode kernel loads the next keys while computing (default: on with the spread softmax, else off). */
  readonly kvPrefetch?: boolean;
  /** KV-cache benchmark tuning: the decode kernel's row loads for 16-bit caches, 16 or 8 bytes per lane (default 16). */
  readonly kvChunkBytes?: 8 | 16;
  /** KV-cache benchmark tuning: the decode kernel keeps q in workgroup memory (default false). */
  readonly kvQShared?: boolean;
  /** KV-cache benchmark tuning: the decode kernel rescales a row only when its maximum changed (default false; same results). */
  readonly kvLazyRescale?: boolean;
  /**
   * KV-cache benchmark tuning: how the decode kernel's teams sum their partial dots where it uses
   * subgroups and specialised code: 'xor' (default, a butterfly per value) or 'transpose' (fewer
   * shuffles; another summation order). Elsewhere the kernel sums through workgroup memory or loops.
   */
  readonly kvTeamSum?: 'xor' | 'transpose';
  /** KV-cache benchmark tuning: the decode kernel looks up block-table rows a step before it loads them (default: on with the spread softmax, else off; same results). */
  readonly kvRowsAhead?: boolean;
  /** KV-cache benchmark tuning: the decode kernel's threads per workgroup, 64, 128 (default) or 256 (the split scales with it). */
  readonly kvThreads?: number;
  /** KV-cache benchmark tuning: the decode kernel's most query rows per workgroup, 1, 2, 4 or 8 (default 8). */
  readonly kvRows?: number;
  /**
   * KV-cache benchmark tuning: 'spread' — the specialised decode kernel (with subgroups) gives each
   * lane of a team the softmax of one (key, row) pair instead of every lane doing all of them
   * (default 'spread' where it can run; 'team' elsewhere or when asked for: another summation
   * order). 'spread' is ignored without subgroups or where rows · keys per step exceed the lanes.
   */
  readonly kvSoftmax?: 'team' | 'spread';
}
