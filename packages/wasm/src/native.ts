/**
 * The native build of the same kernels (csrc/, compiled for x86-64 by scripts/build-native.sh,
 * shipped in native/linux-x64/): in Node on Linux x86-64, the engine "native" loads it instead of
 * a .wasm. WebAssembly's vectors are 128 bits; this build's matrix micro-kernels use the CPU's
 * 256-bit (AVX2) or 512-bit (AVX-512) registers, and every other kernel is the wasm source
 * compiled as it is (csrc/native/wasm_simd128.h gives each SIMD128 intrinsic its meaning).
 *
 * The addon is picked the way XNNPACK picks micro-kernels: by what the CPU has, read once.
 * x86-64-v4 needs AVX512F/BW/CD/DQ/VL, x86-64-v3 AVX2, FMA, BMI1/2, F16C, MOVBE (the psABI levels
 * the build targets). It works on the engine's shared WebAssembly.Memory, so the rest of the
 * engine (plans, workers, device tensors, KV caches) is the wasm engine's, unchanged.
 */
import { FAError } from '@fa/core';
import type { Kernels } from './job.js';

export type NativeLevel = 'x86-64-v4' | 'x86-64-v3';

type F32 = Float32Array;
/** The addon's model-op entries on the caller's typed arrays (csrc/native/direct.c; model-ops.ts checks every call first). */
export interface DirectOps {
  gemmWsBytes(ta: number, tb: number, m: number, n: number, k: number, threads: number): number;
  gemm(ta: number, tb: number, m: number, n: number, k: number, a: F32, b: F32, c: F32, accumulate: number, bias: F32 | null, ws: F32, threads: number): void;
  gelu(x: F32, y: F32, tanh: number): void;
  geluBackward(x: F32, dy: F32, dx: F32, tanh: number, accumulate: number): void;
  layerNorm(x: F32, w: F32 | null, b: F32 | null, y: F32, mean: F32, rstd: F32, rows: number, cols: number, eps: number): void;
  layerNormBackward(x: F32, mean: F32, rstd: F32, w: F32 | null, dy: F32, dx: F32 | null, dw: F32 | null, db: F32 | null, rows: number, cols: number, ws: Float64Array): void;
  crossEntropy(logits: F32, targets: Int32Array, lse: F32, rows: number, classes: number, ignore: number): number;
  crossEntropyBackward(logits: F32, lse: F32, targets: Int32Array, dlogits: F32, rows: number, classes: number, ignore: number, scale: number): void;
  adamw(p: F32, g: F32, m: F32, v: F32, b1: number, b2: number, eps: number, decay: number, stepSize: number, invSqrtBc2: number): void;
  sumRows(x: F32, out: F32, rows: number, cols: number, accumulate: number, ws: F32): void;
  rmsNorm(x: F32, w: F32 | null, y: F32, rstd: F32, rows: number, cols: number, eps: number): void;
  rmsNormBackward(x: F32, rstd: F32, w: F32 | null, dy: F32, dx: F32 | null, dw: F32 | null, rows: number, cols: number, ws: Float64Array): void;
  silu(x: F32, gate: F32 | null, y: F32): void;
  siluBackward(x: F32, gate: F32 | null, dy: F32, dx: F32, dgate: F32 | null, accumulate: number): void;
  rotary(x: F32, y: F32, cos: F32, sin: F32, batch: number, seq: number, heads: number, dim: number, rotaryDim: number, offset: number, interleaved: number, inverse: number): void;
  dropout(x: F32, y: F32, threshold: number, k0: number, k1: number, offset: number, scale: number, accumulate: number): void;
}

export interface NativeAddon {
  /** The model ops on typed arrays in place. */
  readonly ops: DirectOps;
  /** The kernels over a memory (a Uint8Array over all of it, from byte 0). */
  bind(view: Uint8Array): Omit<Kernels, '__heap_base'>;
  /** The base address of a typed array's memory (to check that a grown memory did not move). */
  address(view: Uint8Array): number;
  /** 4 or 3: the psABI level the addon was compiled for. */
  readonly level: number;
}

const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

const V3 = ['avx2', 'fma', 'bmi1', 'bmi2', 'f16c', 'movbe'];
const V4 = [...V3, 'avx512f', 'avx512bw', 'avx512cd', 'avx512dq', 'avx512vl'];

/** The best level this CPU runs, from /proc/cpuinfo's flags (Linux), or why none. */
export function levelFromCpuinfo(cpuinfo: string): NativeLevel | undefined {
  const line = cpuinfo.split('\n').find((l) => l.startsWith('flags'));
  if (!line) return undefined;
  const flags = new Set(line.slice(line.indexOf(':') + 1).trim().split(/\s+/));
  if (V4.every((f) => flags.has(f))) return 'x86-64-v4';
  if (V3.every((f) => flags.has(f))) return 'x86-64-v3';
  return undefined;
}

/**
 * Where the addon of a level lives: the package's native/linux-x64 folder, or `dir` (a folder:
 * a file: URL, or a path, absolute or from the working directory).
 */
export function addonUrl(level: NativeLevel, dir?: string | URL): URL {
  const name = `fa-${level}.node`;
  if (dir === undefined) {
    // through a variable: bundlers copy what `new URL(literal, import.meta.url)` names into a web
    // build, and the addons are for Node only
    const here = import.meta.url;
    return new URL(`../native/linux-x64/${name}`, here);
  }
  let folder: URL;
  if (dir instanceof URL || /^[a-z][a-z0-9+.-]*:/i.test(dir)) {
    try {
      folder = new URL(dir);
    } catch {
      throw new FAError('E_ARG', `wasm engine option nativePath: ${String(dir)} is not a URL or a path`);
    }
  } else {
    const proc = (globalThis as { process?: { cwd?: () => string } }).process;
    const abs = dir.startsWith('/') ? dir : `${proc?.cwd?.() ?? ''}/${dir}`;
    folder = new URL(`file://${abs.split('/').map(encodeURIComponent).join('/')}`);
  }
  if (folder.protocol !== 'file:') throw new FAError('E_ARG', `wasm engine option nativePath must be a folder on this machine (a path or a file: URL), got ${folder.href}`);
  if (!folder.pathname.endsWith('/')) folder = new URL(`${folder.href}/`);
  return new URL(name, folder);
}

/** The best level of this CPU (read once a process: /proc/cpuinfo does not change), or why none. */
let cpuLevel: Promise<{ level: NativeLevel } | { why: string }> | undefined;
async function readCpuLevel(): Promise<{ level: NativeLevel } | { why: string }> {
  let cpuinfo = '';
  try {
    const fs = (await importNode('node:fs')) as typeof import('node:fs');
    cpuinfo = fs.readFileSync('/proc/cpuinfo', 'utf8');
  } catch (e) {
    return { why: `could not read /proc/cpuinfo: ${e instanceof Error ? e.message : String(e)}` };
  }
  const level = levelFromCpuinfo(cpuinfo);
  return level ? { level } : { why: 'this CPU has no AVX2 and FMA (x86-64-v3), which the native build needs' };
}

/** Why the native build cannot run here (undefined: it can), and the level to load. */
export async function nativeTarget(forced?: NativeLevel): Promise<{ level?: NativeLevel; why?: string }> {
  const proc = (globalThis as { process?: { versions?: { node?: string }; platform?: string; arch?: string } }).process;
  if (typeof proc?.versions?.node !== 'string') return { why: 'the native build runs in Node only (browsers use the WebAssembly binaries)' };
  if (proc.platform !== 'linux' || proc.arch !== 'x64') return { why: `no native build for ${proc.platform}-${proc.arch} (linux-x64 only; the WebAssembly engine runs everywhere)` };
  const cpu = await (cpuLevel ??= readCpuLevel());
  if ('why' in cpu) return cpu;
  const best = cpu.level;
  if (forced === 'x86-64-v4' && best !== 'x86-64-v4') return { why: 'nativeLevel x86-64-v4 asked for, but this CPU has no AVX-512' };
  return { level: forced ?? best };
}

const loaded = new Map<string, NativeAddon>();

/** Loads (once per process and thread) the addon at `url`. */
export async function loadAddon(url: URL): Promise<NativeAddon> {
  let a = loaded.get(url.href);
  if (a) return a;
  try {
    const { createRequire } = (await importNode('node:module')) as typeof import('node:module');
    const { fileURLToPath } = (await importNode('node:url')) as typeof import('node:url');
    a = createRequire(import.meta.url)(fileURLToPath(url)) as NativeAddon;
  } catch (e) {
    throw new FAError('E_DEVICE', `could not load the native kernels ${url.href}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  loaded.set(url.href, a);
  return a;
}

/**
 * The addon's kernels over `memory`, shaped like a wasm instance's exports (no static data: the
 * heap may start at 0, which the engine keeps clear of anyway). The memory must be shared: a
 * shared WebAssembly.Memory reserves its maximum and keeps its address when it grows, which the
 * binding relies on (test/engine.test.ts checks it). The caller keeps `memory` alive while it uses
 * the kernels (the engine holds it; the addon keeps only its address).
 */
export function nativeKernels(addon: NativeAddon, memory: WebAssembly.Memory): Kernels {
  if (!(memory.buffer instanceof SharedArrayBuffer)) throw new FAError('E_DEVICE', 'native kernels need a shared WebAssembly.Memory (its address never moves)');
  return { ...addon.bind(new Uint8Array(memory.buffer)), __heap_base: { value: 0 } as unknown as WebAssembly.Global, direct: addon.ops };
}
