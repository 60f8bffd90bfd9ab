/**
 * Tile sizes from a cache-size model.
 *
 * The CPU engine keeps its tiles as float64 (8 bytes an element), with D padded up to a multiple
 * of 4 (`d4`) and rows padded to multiples of 4 for the 4×4 register-blocked micro-kernels.
 * Two constraints pick the sizes:
 *
 * 1. The operand a micro-kernel sweeps for every 4-row panel must stay in L1. In the forward
 *    pass that is the K tile (for S = Q·Kᵀ) and then the V tile (for acc += P·V), each
 *    bc·d4·8 bytes; we ask one of them to fill at most half of L1 (the other half holds the
 *    4-row panels, the score rows and whatever else is hot):  bc ≤ L1 / (2 · 8 · d4).
 * 2. Everything one (query tile, key tile) step touches must stay in L2, so a key tile loaded
 *    once is reused for the whole query tile without going back to L3/DRAM. For the forward:
 *        Q (br·d4) + acc (br·d4) + S (br·bc) + K (bc·d4) + V (bc·d4)   elements
 *    and for the backward (which holds more tiles: Q and dO twice — packed and row-major —,
 *    K twice, V, dK, dV, the dQ tile, S/P and dP):
 *        4·br·d4 + br·d4 + 2·br·bc + 5·bc·d4                           elements
 *    We ask for at most half of L2 (the rest: the other tiles' streams, the prefetcher, the
 *    inputs); br is the largest size that fits, within [bc, 128].
 *
 * Sizes are rounded down to multiples of 4 and clamped to [16, 128] (bc) and [16, 128] (br):
 * below 16 the per-tile work (loading, the softmax update, the mask) stops being amortised over
 * the micro-kernel's flops; above 128 the gain is nil and causal/window skipping gets coarser.
 *
 * JavaScript has no portable way to read cache sizes, so the defaults describe a common
 * x86-64 core (32 KiB L1d, 512 KiB L2 — AMD Zen 1/2/3; Intel client cores have 48 KiB/1.25 MiB+,
 * where the same choice is also good). The engine option `tiles` overrides the result.
 * KERNEL_NOTES.md records the measurements behind the model.
 */

import { FAError } from '../errors.js';

export interface CacheModel {
  /** L1 data cache per core, in bytes. */
  readonly l1Bytes: number;
  /** L2 cache per core, in bytes. */
  readonly l2Bytes: number;
}

export const DEFAULT_CPU_CACHE: CacheModel = { l1Bytes: 32 * 1024, l2Bytes: 512 * 1024 };

export interface TileSizes {
  /** Query rows per tile. */
  readonly br: number;
  /** Key rows per tile. */
  readonly bc: number;
}

export type Pass = 'forward' | 'backward';

const BYTES = 8; // float64 tiles
export const MIN_TILE = 16;
export const MAX_TILE = 128;

/** D rounded up to a multiple of 4: the row stride of every tile. */
export function paddedD(d: number): number {
  return (d + 3) & ~3;
}

const floor4 = (x: number): number => Math.floor(x / 4) * 4;
const clamp = (x: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, x));

/** Elements one (query tile, key tile) step keeps live, per the model above. */
export function workingSetElements(pass: Pass, br: number, bc: number, d: number): number {
  const d4 = paddedD(d);
  return pass === 'forward' ? 2 * br * d4 + br * bc + 2 * bc * d4 : 5 * br * d4 + 2 * br * bc + 5 * bc * d4;
}

/** Bytes of the working set of one step (float64 tiles). */
export function workingSetBytes(pass: Pass, br: number, bc: number, d: number): number {
  return workingSetElements(pass, br, bc, d) * BYTES;
}

/** Tile sizes for head dimension d under the cache model. */
export function chooseTiles(d: number, pass: Pass = 'forward', cache: CacheModel = DEFAULT_CPU_CACHE): TileSizes {
  const d4 = paddedD(d);
  // 1. the swept operand (K or V tile) in half of L1
  const bc = clamp(floor4(cache.l1Bytes / (2 * BYTES * d4)), MIN_TILE, MAX_TILE);
  // 2. the whole step in half of L2: solve workingSet(br) <= budget for br (linear in br)
  const budget = cache.l2Bytes / (2 * BYTES);
  const perRow = pass === 'forward' ? 2 * d4 + bc : 5 * d4 + 2 * bc;
  const fixed = pass === 'forward' ? 2 * bc * d4 : 5 * bc * d4;
  const br = clamp(floor4((budget - fixed) / perRow), Math.max(MIN_TILE, bc), MAX_TILE);
  return { br, bc };
}

/** Validates a user-given override; tiles of any positive size work (the kernels pad to 4). */
export function checkTiles(t: TileSizes): TileSizes {
  if (typeof t !== 'object' || t === null) throw new FAError('E_ARG', 'cpu engine option tiles must be { br, bc }');
  for (const [k, v] of [['br', t.br], ['bc', t.bc]] as const) {
    if (!Number.isSafeInteger(v) || v < 1 || v > 4096) throw new FAError('E_ARG', `cpu engine option tiles.${k} must be an integer in [1, 4096], got ${String(v)}`);
  }
  return { br: t.br, bc: t.bc };
}
