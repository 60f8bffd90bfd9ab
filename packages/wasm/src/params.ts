/**
 * Writes csrc/fa.h's fa_problem into linear memory: field order and offsets must match the C
 * struct (fa.h checks its size and a few offsets with _Static_assert; test/kernels.test.ts
 * checks the byte count against the binary's fa_problem_bytes()).
 */
export const PROBLEM_BYTES = 120;

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
}

const INT_FIELDS = ['batch', 'h', 'hkv', 'd', 'tq', 'tk', 'totalQ', 'totalK', 'varlen', 'windowLeft', 'windowRight', 'br', 'bc'] as const;
const PTR_FIELDS = ['cuQ', 'cuK', 'alibi', 'q', 'k', 'v', 'kt', 'vp', 'ktFirst', 'lse', 'dout', 'dvec', 'dk', 'dv', 'dq'] as const;

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
}
