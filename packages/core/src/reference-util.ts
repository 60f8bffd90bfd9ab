/**
 * Internal helpers shared by reference.ts and naive.ts (not exported from the package).
 */
import { FAError } from './errors.js';
import { decode } from './dtype.js';
import type { AttentionProblem } from './problem.js';
import { isHostTensor, type HostTensor } from './tensor.js';

const MiB = 1024 * 1024;

/** Exact values of a host tensor as float32 (no copy for f32). */
export function hostValues(t: HostTensor): Float32Array {
  if (t.dtype === 'f32') return t.data as Float32Array;
  return decode(t.dtype, t.data as Uint16Array);
}

/** Refuses device tensors with a message saying what to do. */
export function requireHost(t: unknown, what: string, fn: string): void {
  if (!isHostTensor(t) && typeof t === 'object' && t !== null && (t as { kind?: unknown }).kind === 'device') {
    throw new FAError('E_ARG', `${fn}: ${what} is a device tensor; the reference needs host tensors (read it with backend.read())`);
  }
}

function fmtBytes(n: number): string {
  if (n >= 1024 * MiB) return `${(n / (1024 * MiB)).toFixed(2)} GiB`;
  return `${(n / MiB).toFixed(1)} MiB`;
}

/** Throws E_TOO_LARGE when `bytes` exceeds the limit, explaining how to proceed. */
export function checkBytes(fn: string, p: AttentionProblem, bytes: number, limit: number, setter = 'setReferenceMaxBytes()'): void {
  if (bytes <= limit) return;
  throw new FAError(
    'E_TOO_LARGE',
    `${fn} would allocate ${bytes} bytes (${fmtBytes(bytes)}) for B=${p.batch} H=${p.h} Hkv=${p.hkv} Tq=${p.tq} Tk=${p.tk} D=${p.d} ` +
      `(naive attention materialises the ${p.tq}x${p.tk} score matrix of one (batch, head), plus inputs and outputs), ` +
      `above the limit of ${limit} bytes (${fmtBytes(limit)}). Raise it with the { maxBytes } option or ${setter}, ` +
      `or check sampled rows with referenceRows(), which needs O(Tk) memory per row.`,
  );
}

