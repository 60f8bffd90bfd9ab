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

export interface NativeContext {
  readonly device: string;
  readonly sms: number;
  readonly dryRun: boolean;
  alloc(bytes: number): NativeBuffer;
  upload(buf: NativeBuffer, data: ArrayBufferView): Promise<void>;
  download(buf: NativeBuffer, data: ArrayBufferView): Promise<void>;
  forward(spec: NativeAttnSpec): Promise<{ splits: number }>;
  backward(spec: NativeAttnSpec): Promise<void>;
  memInfo(): { free: number; total: number };
  /**
   * Shared memory per block (bytes) the kernels of a call with head dim d (1..256), dtype (default
   * 'bf16') and f32 path (default 'auto') need here, and the GPU's limit (0 in a dry run).
   * `limit` (tests) plans the f32 path as if the GPU allowed that many bytes per block.
   */
  smemNeeds(d: number, dtype?: 'f32' | 'f16' | 'bf16', f32Path?: NativeF32Path, limit?: number): { fwd: number; bwd: number; bwdDeterministic: number; limit: number };
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
