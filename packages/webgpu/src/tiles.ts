/**
 * Tile sizes from the adapter's limits: the largest candidate whose workgroup memory and thread
 * count fit, preferring 64×64 tiles of 256 threads (4×4 scores per thread) where they do.
 */
import { type KernelSpec, type Storage, type Tile, dims, sharedBytes } from './wgsl/common.js';

export interface Caps {
  readonly maxShared: number;
  readonly maxInvocations: number;
  readonly maxWorkgroupSizeX: number;
  /** Smallest subgroup size the adapter may use; 0 when subgroups are unavailable. */
  readonly subgroupMin: number;
  readonly subgroups: boolean;
}

export type KernelKind = 'fwd' | 'dkdv' | 'dq';

/** Candidates, best first. */
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

export function validTile(t: Tile): string | undefined {
  const pow2 = (x: number) => x > 0 && (x & (x - 1)) === 0;
  for (const [k, v] of Object.entries(t)) if (k !== 'vec' && !pow2(v as number)) return `tile.${k} = ${v} must be a power of two`;
  if (t.nr % t.tr !== 0 || t.nc % t.tc !== 0) return 'tile.nr must be a multiple of tile.tr and tile.nc of tile.tc';
  if (t.nc % t.kc !== 0) return 'tile.nc must be a multiple of tile.kc';
  if (t.dk < 2) return 'tile.dk must be at least 2';
  if (t.vec === 1 && ((t.nr / t.tr) % 4 !== 0 || (t.nc / t.tc) % 4 !== 0)) return 'tile.vec needs nr/tr and nc/tc multiples of 4';
  return undefined;
}

export interface Choice {
  readonly spec: KernelSpec;
  readonly sharedBytes: number;
}

/**
 * The specialisation for a kernel: the first candidate (or the forced tile) that fits the
 * limits. Returns a reason when none does.
 */
export function chooseSpec(kind: KernelKind, base: { storage: Storage; d: number; softcap: boolean; alibi: boolean; outF32: boolean; dynamic?: boolean }, caps: Caps, force?: Partial<Tile>, allowSubgroups = true): Choice | { reason: string } {
  const list = base.dynamic ? GENERIC_TILE_CANDIDATES : TILE_CANDIDATES;
  const cands = force ? list.map((t) => ({ ...t, ...force })) : list;
  if (base.dynamic) base = { ...base, d: dBucket(base.d), storage: 'f32', softcap: false, alibi: false, outF32: false };
  let why = '';
  for (const tile of cands) {
    const bad = validTile(tile);
    if (bad) return { reason: bad };
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
    if (RM * DN > 256 && tile !== cands[cands.length - 1]) {
      why = `D = ${base.d} needs ${RM * DN} output registers per thread`;
      continue;
    }
    return { spec, sharedBytes: bytes };
  }
  return { reason: why || 'no tile fits' };
}
