/**
 * The wasm engine's factory options (engine settings live here, never in AttentionOptions: they
 * change speed and summation order, not what is computed), their validation, and the defaults
 * that depend on the runtime.
 */
import { FAError, type TileSizes } from '@fa/core';
import type { Features } from './features.js';
import { PAGE } from './memory.js';
import type { NativeLevel } from './native.js';
import { checkWasmTiles } from './tiles.js';

export interface WasmBackendOptions {
  /**
   * Worker threads. Default: os.availableParallelism() in Node; in a browser
   * navigator.hardwareConcurrency when the page is cross-origin isolated, else 0.
   * 0 runs everything on the calling thread.
   */
  readonly threads?: number;
  /**
   * 'auto' (default): relaxed SIMD (fused multiply-add) when the runtime accepts it as it is
   * (Node 22+, Chrome 114+). true: require it; in Node 20 this sets V8's
   * --experimental-wasm-relaxed-simd for the whole process. false: SIMD128 only.
   */
  readonly relaxedSimd?: boolean | 'auto';
  /** Tile sizes (query rows br, key rows bc); default chooseWasmTiles(D), or chooseNativeTiles(D) for the native build. */
  readonly tiles?: TileSizes;
  /** Tile sizes of the backward; default `tiles`, else chooseWasmTiles(D). */
  readonly backwardTiles?: TileSizes;
  /** Problems with fewer forward FLOPs than this run on the calling thread. Default 2^24. */
  readonly inlineBelowFlops?: number;
  /** Folder (URL) the .wasm binaries are served from; default the package's own wasm/ folder. */
  readonly wasmPath?: string | URL;
  /** Most WebAssembly memory the engine may use, in bytes (default and at most 4 GiB). */
  readonly maxMemoryBytes?: number;
  /**
   * KV-cache calls: keys per chunk when a sequence's key range is split over the threads
   * (flash-decoding; core's planKVCache, default KV_CHUNK = 1024). Changes the summation order
   * only; results do not depend on the thread count either way.
   */
  readonly kvChunk?: number;
  /**
   * Run the native x86-64 build of the kernels instead of WebAssembly (Node on Linux x86-64 only;
   * the backend is then named "native"). Default false: createWasmBackend() is WebAssembly, and
   * the registry's "native" engine is this with true.
   */
  readonly native?: boolean;
  /** The native build's level (default: the best this CPU runs, from /proc/cpuinfo). */
  readonly nativeLevel?: NativeLevel;
  /** Folder the native addons are loaded from (a path or a file: URL); default the package's native/linux-x64. */
  readonly nativePath?: string | URL;
}

export const DEFAULT_INLINE_BELOW_FLOPS = 2 ** 24;

const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

export async function defaultThreads(f: Features): Promise<number> {
  if (!f.threads) return 0;
  if (f.host === 'node') {
    const os = (await importNode('node:os')) as typeof import('node:os');
    return typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
  }
  return (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency ?? 1;
}

export function checkOptions(o: WasmBackendOptions): void {
  if (typeof o !== 'object' || o === null) throw new FAError('E_ARG', 'wasm engine options must be an object');
  if (o.threads !== undefined && !(Number.isSafeInteger(o.threads) && o.threads >= 0)) throw new FAError('E_ARG', `wasm engine option threads must be an integer >= 0, got ${String(o.threads)}`);
  if (o.relaxedSimd !== undefined && o.relaxedSimd !== 'auto' && typeof o.relaxedSimd !== 'boolean') throw new FAError('E_ARG', `wasm engine option relaxedSimd must be true, false or 'auto', got ${String(o.relaxedSimd)}`);
  if (o.inlineBelowFlops !== undefined && !(typeof o.inlineBelowFlops === 'number' && o.inlineBelowFlops >= 0)) throw new FAError('E_ARG', `wasm engine option inlineBelowFlops must be a number >= 0, got ${String(o.inlineBelowFlops)}`);
  if (o.maxMemoryBytes !== undefined && !(typeof o.maxMemoryBytes === 'number' && o.maxMemoryBytes >= 16 * PAGE)) throw new FAError('E_ARG', `wasm engine option maxMemoryBytes must be a number >= ${16 * PAGE}, got ${String(o.maxMemoryBytes)}`);
  if (o.kvChunk !== undefined && !(Number.isSafeInteger(o.kvChunk) && o.kvChunk >= 1)) throw new FAError('E_ARG', `wasm engine option kvChunk must be an integer >= 1, got ${String(o.kvChunk)}`);
  if (o.native !== undefined && typeof o.native !== 'boolean') throw new FAError('E_ARG', `wasm engine option native must be true or false, got ${String(o.native)}`);
  if (o.nativePath !== undefined && typeof o.nativePath !== 'string' && !(o.nativePath instanceof URL)) throw new FAError('E_ARG', `wasm engine option nativePath must be a path or a file: URL, got ${String(o.nativePath)}`);
  if ((o.nativeLevel !== undefined || o.nativePath !== undefined) && o.native !== true) throw new FAError('E_ARG', 'wasm engine options nativeLevel and nativePath apply to the native build: pass native: true with them');
  if (o.nativeLevel !== undefined && o.nativeLevel !== 'x86-64-v4' && o.nativeLevel !== 'x86-64-v3') throw new FAError('E_ARG', `wasm engine option nativeLevel must be 'x86-64-v4' or 'x86-64-v3', got ${String(o.nativeLevel)}`);
  if (o.tiles !== undefined) checkWasmTiles(o.tiles, 'tiles');
  if (o.backwardTiles !== undefined) checkWasmTiles(o.backwardTiles, 'backwardTiles');
}

/**
 * A shared memory needs a maximum; ask for the most, and less where the runtime refuses to
 * reserve it. Returns the memory and the maximum it got, in bytes.
 */
export function createMemory(maxBytes: number, shared: boolean): { memory: WebAssembly.Memory; maxBytes: number } {
  let pages = Math.floor(maxBytes / PAGE);
  for (;;) {
    try {
      return { memory: new WebAssembly.Memory({ initial: 16, maximum: pages, shared }), maxBytes: pages * PAGE };
    } catch (e) {
      if (pages <= 4096) throw new FAError('E_OOM', `wasm backend: could not reserve a WebAssembly memory: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      pages = Math.floor(pages / 2);
    }
  }
}
