/**
 * What the runtime offers, found once by probes (the way tfjs-backend-wasm's flags_wasm.ts and
 * XNNPACK's hardware-config.c do), and the table that turns it into the binary to load.
 *
 * - SIMD128: WebAssembly.validate on a module that returns a v128.const. Required: without it
 *   the engine is unavailable and the registry falls through to the TypeScript cpu engine.
 * - Relaxed SIMD: WebAssembly.validate on a module that calls f32x4.relaxed_madd. Node 22+ and
 *   Chrome 114+ have it; Node 20 has it behind V8's --experimental-wasm-relaxed-simd, which the
 *   engine option `relaxedSimd: true` sets with v8.setFlagsFromString (KERNEL_NOTES.md: on this
 *   machine's Zen 5 it changes nothing, so the default does not touch V8's flags).
 * - Threads: SharedArrayBuffer and a shared WebAssembly.Memory can be made (in browsers that
 *   needs cross-origin isolation: COOP same-origin + COEP require-corp), and workers exist.
 */
import { FAError } from '@fa/core';

export type Isa = 'relaxed' | 'simd128';

export interface Features {
  readonly simd128: boolean;
  readonly relaxed: boolean;
  /** Whether worker threads can share the engine's memory; `threadsWhy` says why not. */
  readonly threads: boolean;
  readonly threadsWhy?: string;
  /** 'node' (worker_threads) or 'web' (Web Workers). */
  readonly host: 'node' | 'web';
}

const HEADER = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
// type section: one function type () -> v128; function section: one function of type 0
const FUNC_RETURNING_V128 = [0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, 0x03, 0x02, 0x01, 0x00];
const V128_ZERO = [0xfd, 0x0c, ...new Array<number>(16).fill(0)];

function codeSection(body: number[]): number[] {
  const fn = [0x00, ...body, 0x0b]; // no locals, body, end
  return [0x0a, fn.length + 2, 0x01, fn.length, ...fn];
}

/** (func (result v128) v128.const 0) */
export const SIMD_PROBE = Uint8Array.from([...HEADER, ...FUNC_RETURNING_V128, ...codeSection(V128_ZERO)]);
/** (func (result v128) (f32x4.relaxed_madd (v128.const 0) (v128.const 0) (v128.const 0))) */
export const RELAXED_PROBE = Uint8Array.from([...HEADER, ...FUNC_RETURNING_V128, ...codeSection([...V128_ZERO, ...V128_ZERO, ...V128_ZERO, 0xfd, 0x85, 0x02])]);

const validate = (bytes: Uint8Array): boolean => {
  try {
    return typeof WebAssembly === 'object' && WebAssembly.validate(bytes as BufferSource);
  } catch {
    return false;
  }
};

const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

export function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === 'string';
}

/**
 * Relaxed SIMD in Node 20 needs a V8 flag; set it when asked to (the flag only lets the
 * validator accept the relaxed opcodes, and must be set before the module is compiled).
 */
export async function enableRelaxedSimd(): Promise<boolean> {
  if (validate(RELAXED_PROBE)) return true;
  if (!isNode()) return false;
  try {
    const v8 = (await importNode('node:v8')) as typeof import('node:v8');
    v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
  } catch {
    return false;
  }
  return validate(RELAXED_PROBE);
}

function threadSupport(host: 'node' | 'web'): { ok: boolean; why?: string } {
  if (typeof SharedArrayBuffer === 'undefined') {
    return { ok: false, why: host === 'web' ? 'SharedArrayBuffer is unavailable: the page is not cross-origin isolated (serve it with COOP same-origin and COEP require-corp)' : 'SharedArrayBuffer is unavailable' };
  }
  const g = globalThis as { crossOriginIsolated?: boolean; Worker?: unknown };
  if (host === 'web' && g.crossOriginIsolated === false) return { ok: false, why: 'the page is not cross-origin isolated (serve it with COOP same-origin and COEP require-corp)' };
  if (host === 'web' && typeof g.Worker !== 'function') return { ok: false, why: 'this context has no Web Workers' };
  try {
    new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
  } catch (e) {
    return { ok: false, why: `a shared WebAssembly.Memory cannot be made here: ${e instanceof Error ? e.message : String(e)}` };
  }
  return { ok: true };
}

export function probeFeatures(): Features {
  const host = isNode() ? 'node' : 'web';
  const t = threadSupport(host);
  return { simd128: validate(SIMD_PROBE), relaxed: validate(RELAXED_PROBE), threads: t.ok, ...(t.why ? { threadsWhy: t.why } : {}), host };
}

/** The binary for an instruction set and memory kind (the config table). */
export function binaryName(isa: Isa, shared: boolean): string {
  return `fa-${isa}-${shared ? 'mt' : 'st'}.wasm`;
}

/** Picks the instruction set: relaxed where available and allowed, else SIMD128; throws without SIMD. */
export function chooseIsa(f: Features, relaxed: boolean | 'auto'): Isa {
  if (!f.simd128) throw new FAError('E_DEVICE', 'this WebAssembly runtime has no SIMD128 (Node >= 16.4, Chrome 91, Firefox 89, Safari 16.4 have it)');
  if (relaxed === true && !f.relaxed) throw new FAError('E_DEVICE', 'relaxedSimd: true, but this runtime does not accept relaxed SIMD (Node 22+, Chrome 114+; Node 20 with --experimental-wasm-relaxed-simd)');
  return relaxed !== false && f.relaxed ? 'relaxed' : 'simd128';
}
