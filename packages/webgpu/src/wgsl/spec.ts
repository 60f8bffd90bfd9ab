/**
 * The specialisation of a kernel (KernelSpec: storage, head dim, tile, score options) and what
 * follows from it alone: the storage encoding, the pipeline-cache key, the derived sizes, the
 * layout predicates, and which score and output columns a thread owns.
 *
 * Threads form a TR × TC grid. Thread (tr, tc) owns rows tr·RM … tr·RM+RM−1 of the tile, score
 * columns tc + j·TC (j < CN) and output columns 2·(tc + j·TC) + {0,1} (j < DN/2): the columns
 * are interleaved so that neighbouring threads read neighbouring words of workgroup memory.
 */

export type Storage = 'f32' | 'f16' | 'bf16';

/** Tile shape: NR rows owned by a workgroup, NC columns per inner tile, a TR×TC thread grid. */
export interface Tile {
  readonly nr: number;
  readonly nc: number;
  readonly tr: number;
  readonly tc: number;
  /** Head-dim chunk staged per step of rowdot. */
  readonly dk: number;
  /** Rows of Y staged per step of pmul. */
  readonly kc: number;
  /**
   * 1: vec4 workgroup-memory loads, each thread owning contiguous score columns (tc·CN + j) and
   * output quads (4·(tc + j·TC) + e). Needs RM, CN multiples of 4; specialised kernels only.
   */
  readonly vec?: number;
  /**
   * 1 (with vec): the swizzled products of products.ts — inputs read four elements at a time,
   * bank-conflict-free transposed staging and P tiles. Needs D % 4 == 0; chooseSpec drops it
   * for other head dims.
   */
  readonly sw?: number;
  /** 1 (with sw): two staging buffers and a register prefetch of the next chunk. */
  readonly pf?: number;
}

export interface KernelSpec {
  readonly storage: Storage;
  readonly d: number;
  readonly tile: Tile;
  readonly softcap: boolean;
  readonly alibi: boolean;
  /** Row reductions with subgroupShuffleXor (needs subgroup size >= TC). */
  readonly subgroups: boolean;
  /** Outputs written as f32 even for packed storage (odd D: a pass packs them afterwards). */
  readonly outF32: boolean;
  /**
   * Generic kernel: dtype, D (≤ d, which is then a bucket), softcap, ALiBi and outF32 are read
   * from Params at run time, so one pipeline serves many problems. Used on CPU adapters, where
   * compiling a pipeline costs seconds and running one is cheap for the sizes they get.
   */
  readonly dynamic?: boolean;
  /**
   * Native f16 (storage 'f16' on an adapter with `shader-f16`): `enable f16;`, tensors bound as
   * array<f16>, inputs staged in workgroup memory as f16 (half the bytes). Arithmetic stays f32:
   * f16 → f32 is exact, and scores, max, exp, sums and accumulators are f32 as everywhere else.
   */
  readonly f16?: boolean;
  /** Dropout's Philox mask where P meets V (dropout.ts); parameters in Params. */
  readonly dropout?: boolean;
}

/** How a kernel reads and writes tensor elements: f32, packed pairs in u32, or native f16. */
export type Encoding = 'f32' | 'f16' | 'bf16' | 'f16-native';

export function encoding(s: KernelSpec): Encoding {
  return s.f16 ? 'f16-native' : s.storage;
}

export function specKey(kind: string, s: KernelSpec): string {
  const t = s.tile;
  // The f16 path is part of the key: native kernels (f16n) bind array<f16>, packed ones u32.
  if (s.dynamic) return [kind, 'dyn', s.f16 ? 'f16n' : 'u32', s.d, t.nr, t.nc, t.tr, t.tc, t.dk, t.kc, +s.subgroups, +!!s.dropout].join(':');
  const enc = s.f16 ? 'f16n' : s.storage;
  const layout = isPipelined(s) ? 'vsp' : isSw(s) ? 'vs' : t.vec ? 'v' : 's';
  return [kind, enc, s.d, t.nr, t.nc, t.tr, t.tc, t.dk, t.kc, layout, +s.softcap, +s.alibi, +s.subgroups, +s.outF32, +!!s.dropout].join(':');
}

/** Derived sizes of a specialisation. */
export interface Dims {
  readonly NT: number;
  readonly RM: number; // rows per thread
  readonly CN: number; // score columns per thread
  readonly DP1: number; // head dim padded for rowdot (multiple of dk)
  readonly DP2: number; // head dim padded for pmul (multiple of 2·TC)
  readonly DN: number; // output columns per thread (even)
  readonly pairs: boolean; // storage read and written two elements at a time (D even)
}

export function dims(s: KernelSpec): Dims {
  const t = s.tile;
  const DP1 = Math.ceil(s.d / t.dk) * t.dk;
  const q = isVec(s) ? 4 : 2;
  const DP2 = Math.ceil(s.d / (q * t.tc)) * q * t.tc;
  return { NT: t.tr * t.tc, RM: t.nr / t.tr, CN: t.nc / t.tc, DP1, DP2, DN: DP2 / t.tc, pairs: !s.dynamic && s.d % 2 === 0 };
}

/** Whether this specialisation uses the vec4 layout. */
export function isVec(s: KernelSpec): boolean {
  return !s.dynamic && s.tile.vec === 1;
}

/** Whether it uses the swizzled products (products.ts); chooseSpec only sets sw where allowed. */
export function isSw(s: KernelSpec): boolean {
  return isVec(s) && s.tile.sw === 1 && s.d % 4 === 0;
}

/** Whether the swizzled products double-buffer their staging (register prefetch). */
export function isPipelined(s: KernelSpec): boolean {
  return isSw(s) && s.tile.pf === 1;
}

/** Column (within the NC-wide score tile) of a thread's score j. */
export function scoreCol(s: KernelSpec, j: number): string {
  const { CN } = dims(s);
  return isVec(s) ? `(tc * ${CN}u + ${j}u)` : `(tc + ${j * s.tile.tc}u)`;
}

/** Head-dim column of a thread's output accumulator j (pairs j, j+1 are adjacent columns). */
export function outCol(s: KernelSpec, j: number): string {
  const tc = s.tile.tc;
  return isVec(s) ? `4u * tc + ${4 * tc * Math.floor(j / 4) + (j % 4)}u` : `2u * tc + ${2 * tc * Math.floor(j / 2) + (j % 2)}u`;
}

/** The head dim as a WGSL u32 expression. */
export function dExpr(s: KernelSpec): string {
  return s.dynamic ? 'P.d' : `${s.d}u`;
}
