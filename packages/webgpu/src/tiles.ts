/**
 * Tile sizes from the adapter's limits: the first candidate whose workgroup memory and thread
 * count fit — the per-kernel preferred tiles (measured on the H200, see BENCHMARKS.md), then
 * 64×64 tiles of 256 threads (4×4 scores per thread), then smaller ones.
 */
import { type KernelSpec, type Storage, type Tile, dims } from './wgsl/spec.js';
import { sharedBytes } from './wgsl/workgroup.js';

export interface Caps {
  readonly maxShared: number;
  readonly maxInvocations: number;
  readonly maxWorkgroupSizeX: number;
  /** Smallest subgroup size the adapter may use; 0 when subgroups are unavailable. */
  readonly subgroupMin: number;
  readonly subgroups: boolean;
}

export type KernelKind = 'fwd' | 'dkdv' | 'dq';

/**
 * Preferred tiles per kernel, tried before TILE_CANDIDATES: each passed the conformance kit on
 * the H200 and was faster there than the plain 64×64 tile (BENCHMARKS.md, runs 4–5). Other
 * adapters get them where their limits allow (S1 needs 24–32 KiB of workgroup memory, S2 up to
 * 48 KiB); elsewhere the plain candidates follow.
 */
export const PREFERRED_TILES: Readonly<Record<KernelKind, readonly Tile[]>> = {
  // S1: 64×64, 256 threads, 4×4 scores per thread, swizzled (27.4 TFLOP/s at D = 128, T = 4K).
  fwd: [{ nr: 64, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1 }],
  // S2: 128×64, 256 threads, 8×4 per thread, swizzled (16.1 TFLOP/s; D = 256 falls back in dkdv).
  dkdv: [{ nr: 128, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1 }],
  dq: [{ nr: 128, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1 }],
};

/** Candidates, best first (also the base of forced tiles). */
export const TILE_CANDIDATES: readonly Tile[] = [
  { nr: 64, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16 },
  { nr: 64, nc: 64, tr: 16, tc: 16, dk: 8, kc: 8 },
  { nr: 64, nc: 32, tr: 16, tc: 8, dk: 16, kc: 16 },
  { nr: 64, nc: 32, tr: 16, tc: 8, dk: 8, kc: 8 },
  { nr: 32, nc: 32, tr: 8, tc: 8, dk: 16, kc: 16 },
  { nr: 32, nc: 32, tr: 8, tc: 8, dk: 8, kc: 8 },
  { nr: 32, nc: 32, tr: 8, tc: 8, dk: 8, kc: 4 },
  { nr: 16, nc: 16, tr: 4, tc: 4, dk: 8, kc: 4 },
  { nr: 16, nc: 16, tr: 4, tc: 4, dk: 4, kc: 2 },
];

/**
 * Candidates of the generic kernels (CPU adapters): small tiles keep the unrolled code, and so
 * the driver's compile time, small.
 */
export const GENERIC_TILE_CANDIDATES: readonly Tile[] = [
  { nr: 16, nc: 16, tr: 8, tc: 8, dk: 8, kc: 8 },
  { nr: 16, nc: 16, tr: 8, tc: 8, dk: 8, kc: 4 },
  { nr: 16, nc: 16, tr: 4, tc: 4, dk: 4, kc: 2 },
];

/** The head-dim bucket a generic kernel is compiled for. */
export function dBucket(d: number): number {
  return Math.ceil(d / 256) * 256;
}

/** Extra workgroup floats a kernel needs beyond the common ones. */
export function extraShared(kind: KernelKind, t: Tile): number {
  return kind === 'dkdv' ? 2 * t.nc : 0;
}

const LAYOUT_FLAGS = new Set(['vec', 'sw', 'pf']);

export function validTile(t: Tile): string | undefined {
  const pow2 = (x: number) => x > 0 && (x & (x - 1)) === 0;
  for (const [k, v] of Object.entries(t)) if (!LAYOUT_FLAGS.has(k) && v !== undefined && !pow2(v as number)) return `tile.${k} = ${v} must be a power of two`;
  if (t.nr % t.tr !== 0 || t.nc % t.tc !== 0) return 'tile.nr must be a multiple of tile.tr and tile.nc of tile.tc';
  if (t.nc % t.kc !== 0) return 'tile.nc must be a multiple of tile.kc';
  if (t.dk < 2) return 'tile.dk must be at least 2';
  if (t.vec === 1 && ((t.nr / t.tr) % 4 !== 0 || (t.nc / t.tc) % 4 !== 0)) return 'tile.vec needs nr/tr and nc/tc multiples of 4';
  if (t.sw === 1 && (t.vec !== 1 || t.dk < 4)) return 'tile.sw needs tile.vec = 1 and dk >= 4';
  if (t.pf === 1 && t.sw !== 1) return 'tile.pf needs tile.sw = 1';
  return undefined;
}

/** The swizzled products need D % 4 == 0 (16-byte loads); other head dims use the plain vec4 layout. */
function layoutFor(t: Tile, d: number): Tile {
  if (t.sw === 1 && d % 4 !== 0) return { ...t, sw: undefined, pf: undefined };
  return t;
}

export interface Choice {
  readonly spec: KernelSpec;
  readonly sharedBytes: number;
}

/**
 * The specialisation for a kernel: the first candidate (or the forced tile) that fits the
 * limits. Returns a reason when none does. `preferred` replaces PREFERRED_TILES[kind] (what a
 * benchmark measures before a tile becomes a default).
 */
export function chooseSpec(kind: KernelKind, base: { storage: Storage; d: number; softcap: boolean; alibi: boolean; outF32: boolean; dynamic?: boolean; f16?: boolean; dropout?: boolean }, caps: Caps, force?: Partial<Tile>, allowSubgroups = true, preferred: readonly Tile[] = PREFERRED_TILES[kind]): Choice | { reason: string } {
  // A forced tile's missing fields come from the plain candidates (no preferred layout flags).
  const list = base.dynamic ? GENERIC_TILE_CANDIDATES : force ? TILE_CANDIDATES : [...preferred, ...TILE_CANDIDATES];
  const cands = force ? list.map((t) => ({ ...t, ...force })) : list;
  if (base.dynamic) base = { ...base, d: dBucket(base.d), storage: 'f32', softcap: false, alibi: false, outF32: false };
  let why = '';
  for (const cand of cands) {
    const bad = validTile(cand);
    if (bad) return { reason: bad };
    const tile = base.dynamic ? cand : layoutFor(cand, base.d);
    const subgroups = allowSubgroups && caps.subgroups && caps.subgroupMin >= tile.tc;
    const spec: KernelSpec = { ...base, tile, subgroups };
    const nt = tile.tr * tile.tc;
    if (nt > caps.maxInvocations || nt > caps.maxWorkgroupSizeX) {
      why = `${nt} invocations exceed the adapter's maxComputeInvocationsPerWorkgroup (${caps.maxInvocations})`;
      continue;
    }
    const bytes = sharedBytes(spec, extraShared(kind, tile));
    if (bytes > caps.maxShared) {
      why = `D = ${base.d} needs ${bytes} bytes of workgroup memory even with ${tile.nr}×${tile.nc} tiles; the adapter's maxComputeWorkgroupStorageSize is ${caps.maxShared}`;
      continue;
    }
    // Keep the per-thread output registers bounded (two RM×DN blocks in dkdv).
    const { RM, DN } = dims(spec);
    if (RM * DN > 256 && cand !== cands[cands.length - 1]) {
      why = `D = ${base.d} needs ${RM * DN} output registers per thread`;
      continue;
    }
    return { spec, sharedBytes: bytes };
  }
  return { reason: why || 'no tile fits' };
}
