/**
 * Writes csrc/fa.h's fa_problem (and csrc/kvcache.c's fa_kv, which extends it) into linear
 * memory: field order and offsets must match the C structs (the C files check their sizes and a
 * few offsets with _Static_assert; test/kernels.test.ts checks fa_problem's byte count against
 * the binary's fa_problem_bytes()).
 */
export const PROBLEM_BYTES = 152;

/** The fields of fa_problem; pointers are byte addresses in the engine's memory (0 = none). */
export interface ProblemFields {
  batch: number;
  h: number;
  hkv: number;
  d: number;
  tq: number;
  tk: number;
  totalQ: number;
  totalK: number;
  varlen: boolean;
  windowLeft: number;
  windowRight: number;
  br: number;
  bc: number;
  scale: number;
  softcap: number;
  cuQ: number;
  cuK: number;
  alibi: number;
  q: number;
  k: number;
  v: number;
  kt: number;
  vp: number;
  ktFirst: number;
  lse: number;
  dout: number;
  dvec: number;
  dk: number;
  dv: number;
  dq: number;
  /** Attention sinks [h] (f32), or 0. */
  sinks: number;
  /** Dropout (csrc/philox.h): threshold 0 = none. */
  dropoutThreshold?: number;
  dropoutK0?: number;
  dropoutK1?: number;
  dropoutOffset?: number;
  dropoutScale?: number;
  /** V's head dim (v, out, dO, dV rows), and where the forward writes out ([rows, h, dvDim]; q itself when dvDim = d). */
  dvDim: number;
  o: number;
}

const INT_FIELDS = ['batch', 'h', 'hkv', 'd', 'tq', 'tk', 'totalQ', 'totalK', 'varlen', 'windowLeft', 'windowRight', 'br', 'bc'] as const;
const PTR_FIELDS = ['cuQ', 'cuK', 'alibi', 'q', 'k', 'v', 'kt', 'vp', 'ktFirst', 'lse', 'dout', 'dvec', 'dk', 'dv', 'dq', 'sinks'] as const;

export function writeProblem(buffer: ArrayBufferLike, ptr: number, f: ProblemFields): void {
  const view = new DataView(buffer, ptr, PROBLEM_BYTES);
  let o = 0;
  for (const k of INT_FIELDS) {
    view.setInt32(o, Number(f[k]), true);
    o += 4;
  }
  view.setFloat32(o, f.scale, true);
  view.setFloat32(o + 4, f.softcap, true);
  o += 8;
  for (const k of PTR_FIELDS) {
    view.setUint32(o, f[k], true);
    o += 4;
  }
  for (const k of ['dropoutThreshold', 'dropoutK0', 'dropoutK1', 'dropoutOffset'] as const) {
    view.setUint32(o, f[k] ?? 0, true);
    o += 4;
  }
  view.setFloat32(o, f.dropoutScale ?? 1, true);
  view.setInt32(o + 4, f.dvDim, true);
  view.setUint32(o + 8, f.o, true);
}

/** csrc/kvcache.c's fa_kv: an fa_problem, then the cache fields (kvcache.c checks the layout). */
export const KV_PROBLEM_BYTES = 216;

export interface KVFields {
  /** Cache element type: 0 f32, 1 f16, 2 bf16. */
  dtype: number;
  blockSize: number;
  maxBlocks: number;
  tnew: number;
  qt: number;
  rows: number;
  chunk: number;
  /** kv heads per unit at most. */
  heads: number;
  lens: number;
  table: number;
  kCache: number;
  vCache: number;
  pm: number;
  pl: number;
  pacc: number;
  /** cacheLeftpad [batch] (int32), or 0. */
  leftpad: number;
}

const KV_INT_FIELDS = ['dtype', 'blockSize', 'maxBlocks', 'tnew', 'qt', 'rows', 'chunk', 'heads'] as const;
const KV_PTR_FIELDS = ['lens', 'table', 'kCache', 'vCache', 'pm', 'pl', 'pacc', 'leftpad'] as const;

export function writeKVProblem(buffer: ArrayBufferLike, ptr: number, base: ProblemFields, kv: KVFields): void {
  writeProblem(buffer, ptr, base);
  const view = new DataView(buffer, ptr + PROBLEM_BYTES, KV_PROBLEM_BYTES - PROBLEM_BYTES);
  let o = 0;
  for (const k of KV_INT_FIELDS) {
    view.setInt32(o, kv[k], true);
    o += 4;
  }
  for (const k of KV_PTR_FIELDS) {
    view.setUint32(o, kv[k], true);
    o += 4;
  }
}
