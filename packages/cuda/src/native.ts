/**
 * Loading the native addon (build/Release/fa_cuda.node) and its TypeScript shape. Loading never
 * throws: without the addon, or when it fails to load, the result says why.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

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
  dispose(): void;
}

/** What forward/backward take; the binding validates every field again in C++. */
export interface NativeAttnSpec {
  dtype: 'f16' | 'bf16';
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
  dtype: 'f16' | 'bf16';
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
}

export interface NativeContext {
  readonly device: string;
  readonly sms: number;
  readonly dryRun: boolean;
  alloc(bytes: number): NativeBuffer;
  upload(buf: NativeBuffer, data: ArrayBufferView): Promise<void>;
  download(buf: NativeBuffer, data: ArrayBufferView): Promise<void>;
  forward(spec: NativeAttnSpec): Promise<{ splits: number }>;
  backward(spec: NativeAttnSpec): Promise<void>;
  /** KV-cache append + attention; resolves with the number of key splits it ran. */
  kvForward(spec: NativeKvSpec): Promise<{ splits: number }>;
  memInfo(): { free: number; total: number };
  /** Shared memory per block (bytes) the kernels of head dim d need here (kv: the KV-cache kernel), and the GPU's limit (0 in a dry run). */
  smemNeeds(d: number): { fwd: number; bwd: number; bwdDeterministic: number; kv: number; limit: number };
  synchronize(): Promise<void>;
  dispose(): void;
}

export interface NativeBinding {
  readonly version: string;
  probe(): NativeProbe;
  Context: new (opts?: { device?: number; dryRun?: boolean }) => NativeContext;
}

export type NativeLoad = { readonly ok: true; readonly binding: NativeBinding; readonly path: string } | { readonly ok: false; readonly reason: string };

const pkgRoot = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the build puts the addon. */
export const NATIVE_PATH = join(pkgRoot, 'build', 'Release', 'fa_cuda.node');

let cached: NativeLoad | undefined;

/** Loads the addon once. `reason` starts with "unavailable:" when it cannot be used. */
export function loadNative(): NativeLoad {
  if (cached) return cached;
  if (!existsSync(NATIVE_PATH)) {
    const skipFile = join(pkgRoot, 'build', 'skip-reason.txt');
    const why = existsSync(skipFile) ? readFileSync(skipFile, 'utf8').trim() : 'nvcc not found at build time';
    return (cached = { ok: false, reason: `unavailable: built without CUDA (${why})` });
  }
  try {
    const req = createRequire(import.meta.url);
    return (cached = { ok: true, binding: req(NATIVE_PATH) as NativeBinding, path: NATIVE_PATH });
  } catch (e) {
    return (cached = { ok: false, reason: `unavailable: the CUDA addon failed to load: ${e instanceof Error ? e.message : String(e)}` });
  }
}
