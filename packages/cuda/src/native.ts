/**
 * Loading the native addon and its TypeScript shape. Loading never throws: without the addon,
 * or when it fails to load, the result says why.
 *
 * Order, as node-gyp-build's: a local build (build/Release/fa_cuda.node, made by
 * `npm run build:native`, or by the install script where no prebuilt addon fits), then the
 * prebuilt addon shipped in prebuilds/<platform>-<arch>/ (prebuilt.ts). An installed package
 * has no local build unless the prebuilt one did not fit, so it loads the prebuilt one; in a
 * development checkout the addon built from the current sources wins. PREBUILDS_ONLY=1
 * (node-gyp-build's switch) skips the local build.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';
import { findPrebuilts, PACKAGE_ROOT, PREBUILDS_DIR } from './prebuilt.js';

export interface NativeProbe {
  readonly ok: boolean;
  readonly reason?: string;
  readonly device?: string;
  readonly sms?: number;
  readonly cc?: readonly [number, number];
  readonly smemPerBlockOptin?: number;
  readonly totalMem?: number;
  /** cudaDriverGetVersion (0 without a driver) and cudaRuntimeGetVersion. */
  readonly driver: number;
  readonly runtime: number;
}

/** Device memory owned by one context. Freed by dispose() or, as a safety net, by the GC. */
export interface NativeBuffer {
  readonly bytes: number;
  readonly disposed: boolean;
  /** The device address (0n once disposed). */
  readonly address: bigint;
  /** A caller's memory (Context.wrap): dispose forgets it, never frees it. */
  readonly external: boolean;
  dispose(): void;
}

/** Which kernels compute f32: the split tensor-core ones where they fit the GPU ('auto'), always them, or FFMA. */
export type NativeF32Path = 'auto' | 'tensor-cores' | 'ffma';

/** What forward/backward take; the binding validates every field again in C++. */
export interface NativeAttnSpec {
  dtype: 'f32' | 'f16' | 'bf16';
  B: number;
  H: number;
  Hkv: number;
  d: number;
  totalQ: number;
  totalK: number;
  varlen: boolean;
  cuSeqlensQ: Int32Array;
  cuSeqlensK: Int32Array;
  alibi?: Float32Array | null;
  scale: number;
  softcap: number;
  windowLeft: number;
  windowRight: number;
  deterministic?: boolean;
  /** f32 only; default 'auto'. */
  f32Path?: NativeF32Path;
  q: NativeBuffer;
  k: NativeBuffer;
  v: NativeBuffer;
  out: NativeBuffer;
  lse: NativeBuffer;
  dout?: NativeBuffer;
  dq?: NativeBuffer;
  dk?: NativeBuffer;
  dv?: NativeBuffer;
}

/**
 * What kvForward takes (a KV-cache call: append kNew/vNew, then attend); the binding validates
 * every field again in C++, index values from their host copies. A contiguous cache is
 * `paged: false` with numBlocks = B, maxBlocksPerSeq = 1, blockSize = its capacity.
 */
export interface NativeKvSpec {
  dtype: 'f32' | 'f16' | 'bf16';
  B: number;
  H: number;
  Hkv: number;
  d: number;
  tq: number;
  tnew: number;
  paged: boolean;
  blockSize: number;
  numBlocks: number;
  maxBlocksPerSeq: number;
  /** Host copy of the lengths [B] (an index tensor's mirror), validated by the binding. */
  cacheSeqlens: Int32Array;
  /** Host copy of the block table [B · maxBlocksPerSeq] (paged only). */
  blockTable?: Int32Array | null;
  /** The lengths' device copy (an index tensor) the kernels read; absent: the host copy is uploaded. */
  cacheSeqlensBuf?: NativeBuffer | null;
  blockTableBuf?: NativeBuffer | null;
  alibi?: Float32Array | null;
  scale: number;
  softcap: number;
  windowLeft: number;
  windowRight: number;
  q: NativeBuffer;
  kCache: NativeBuffer;
  vCache: NativeBuffer;
  /** Given exactly when tnew > 0. */
  kNew?: NativeBuffer | null;
  vNew?: NativeBuffer | null;
  out: NativeBuffer;
  lse: NativeBuffer;
  /** Names the call in a failure the binding reports later (stream-ordered calls). */
  label?: string | null;
}

/** What an attention call resolves with. */
export interface NativeAttnResult {
  /** Key splits the forward ran (1 for the backward). */
  splits: number;
  /**
   * Where the call's time went, µs of the monotonic clock (`process.hrtime`'s): called, work
   * queued, worker started, work finished on the GPU, back on the main thread.
   */
  trace: [number, number, number, number, number];
}

export interface NativeContext {
  readonly device: string;
  readonly sms: number;
  readonly dryRun: boolean;
  alloc(bytes: number): NativeBuffer;
  /** A caller's device memory (checked to lie in one allocation on this device); never freed here. */
  wrap(address: bigint, bytes: number): NativeBuffer;
  /** The context's cudaStream_t (the caller's when one was given). */
  readonly stream: bigint;
  upload(buf: NativeBuffer, data: ArrayBufferView): Promise<void>;
  download(buf: NativeBuffer, data: ArrayBufferView): Promise<void>;
  forward(spec: NativeAttnSpec): Promise<NativeAttnResult>;
  /** A stream-ordered call: undefined when the binding queued it on this thread and is done with it (nothing to settle), else its promise. */
  forward(spec: NativeAttnSpec, streamOrdered: true | undefined): Promise<NativeAttnResult> | undefined;
  backward(spec: NativeAttnSpec): Promise<NativeAttnResult>;
  backward(spec: NativeAttnSpec, streamOrdered: true | undefined): Promise<NativeAttnResult> | undefined;
  /** KV-cache append + attention; resolves with the number of key splits it ran. */
  kvForward(spec: NativeKvSpec): Promise<NativeAttnResult>;
  /** A stream-ordered call: undefined when the binding queued it on this thread and is done with it; a bad device index it meets then fails the next synchronize or download, naming spec.label. */
  kvForward(spec: NativeKvSpec, streamOrdered: true | undefined): Promise<NativeAttnResult> | undefined;
  memInfo(): { free: number; total: number };
  /**
   * Shared memory per block (bytes) the kernels of a call with head dim d (1..256), dtype (default
   * 'bf16') and f32 path (default 'auto') need here (kv: the KV-cache kernel), and the GPU's limit
   * (0 in a dry run). `limit` (tests) plans the f32 path as if the GPU allowed that many bytes per block.
   */
  smemNeeds(d: number, dtype?: 'f32' | 'f16' | 'bf16', f32Path?: NativeF32Path, limit?: number): { fwd: number; bwd: number; bwdDeterministic: number; kv: number; limit: number };
  synchronize(): Promise<void>;
  dispose(): void;
}

/** Device kernels of ring attention (csrc/cp_binding.cc); every buffer of one context. */
export interface NativeShardOps {
  fill(buf: NativeBuffer, count: number, value: number): Promise<void>;
  accumulate(acc: NativeBuffer, x: NativeBuffer, xDtype: 'f32' | 'f16' | 'bf16', count: number): Promise<void>;
  convert(dst: NativeBuffer, dstDtype: 'f32' | 'f16' | 'bf16', src: NativeBuffer, count: number): Promise<void>;
  merge(out: NativeBuffer, lse: NativeBuffer, partOut: NativeBuffer, partDtype: 'f32' | 'f16' | 'bf16', partLse: NativeBuffer, rows: number, heads: number, d: number): Promise<void>;
  transposeLse(dst: NativeBuffer, src: NativeBuffer, batch: number, heads: number, t: number, toPacked: boolean): Promise<void>;
  copy(dst: NativeBuffer, dstOffset: number, src: NativeBuffer, srcOffset: number, bytes: number): Promise<void>;
  random(dst: NativeBuffer, dtype: 'f32' | 'f16' | 'bf16', count: number, seed: number, scale: number): Promise<void>;
  /** The device's default memory pool (every Context.alloc and kernel workspace): bytes in use, high-water mark, reserved. */
  memStats(device: number, resetHigh?: boolean): { used: number; high: number; reserved: number };
}

export interface NcclLoad {
  readonly ok: boolean;
  readonly path?: string;
  readonly version?: string;
  readonly code?: number;
  readonly tried: readonly { readonly path: string; readonly error: string }[];
}

/** One rank of an NCCL communicator (csrc/nccl_comm.cc). */
export interface NativeNcclComm {
  readonly rank: number;
  readonly size: number;
  readonly device: number;
  exchange(send: readonly NativeBuffer[], recv: readonly NativeBuffer[], next: number, prev: number): Promise<void>;
  abort(reason?: string): void;
  destroy(): Promise<void>;
  isAborted(): boolean;
}

export interface NativeNccl {
  /** dlopen of each path until one is NCCL >= 2.7; the first success stays loaded. */
  load(paths: readonly string[]): NcclLoad;
  uniqueId(): Uint8Array;
  init(o: { device: number; rank: number; size: number; id: Uint8Array }): Promise<NativeNcclComm>;
}

export interface NativeBinding {
  readonly version: string;
  probe(): NativeProbe;
  Context: new (opts?: { device?: number; dryRun?: boolean; stream?: bigint }) => NativeContext;
  /** Absent in addons built before context parallelism. */
  readonly shardOps?: NativeShardOps;
  readonly nccl?: NativeNccl;
}

export type NativeLoad =
  | { readonly ok: true; readonly binding: NativeBinding; readonly path: string; readonly source: 'build' | 'prebuilt' }
  | { readonly ok: false; readonly reason: string };

const pkgRoot = PACKAGE_ROOT;
/** Where a local build puts the addon. */
export const NATIVE_PATH = join(pkgRoot, 'build', 'Release', 'fa_cuda.node');

let cached: NativeLoad | undefined;

const message = (e: unknown) => (e instanceof Error ? e.message : String(e)).split('\n')[0];

/** Loads the addon once. `reason` starts with "unavailable:" when it cannot be used. */
export function loadNative(): NativeLoad {
  if (cached) return cached;
  const req = createRequire(import.meta.url);
  const tried: string[] = [];
  const candidates: [string, 'build' | 'prebuilt'][] = [
    ...(process.env.PREBUILDS_ONLY && process.env.PREBUILDS_ONLY !== '0' ? [] : [[NATIVE_PATH, 'build'] as [string, 'build']]),
    ...findPrebuilts().map((p): [string, 'prebuilt'] => [p, 'prebuilt']),
  ];
  for (const [path, source] of candidates) {
    if (!existsSync(path)) continue;
    try {
      return (cached = { ok: true, binding: req(path) as NativeBinding, path, source });
    } catch (e) {
      tried.push(`${relative(pkgRoot, path)}: ${message(e)}`);
    }
  }
  if (tried.length > 0) return (cached = { ok: false, reason: `unavailable: the CUDA addon failed to load (${tried.join('; ')})` });
  const skipFile = join(pkgRoot, 'build', 'skip-reason.txt');
  const why = existsSync(skipFile) ? readFileSync(skipFile, 'utf8').trim() : 'nvcc not found at build time';
  const target = `${process.platform}-${process.arch}`;
  const prebuilt = existsSync(PREBUILDS_DIR) ? `no prebuilt addon for ${target}` : 'no prebuilt addons in this copy';
  return (cached = { ok: false, reason: `unavailable: built without CUDA (${why}; ${prebuilt})` });
}
