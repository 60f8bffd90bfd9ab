/**
 * Philox 4×32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
 * counter-based generator. Four 32-bit counter words and a 64-bit key give four 32-bit outputs,
 * with no state between calls, so any engine can draw the number of any (counter, key) in any
 * order. It keys the dropout mask (DESIGN.md): key (seed mod 2³², floor(seed / 2³²)), counter
 * (floor(j / 4), i, b·H + h, offset); entry (i, j) is dropped iff output word j mod 4 is below
 * floor(p·2³²). Every engine and the reference drop the same entries; no peer offers that (their
 * masks depend on the GPU's tiling).
 */

const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/** The high 32 bits of the 64-bit product of two unsigned 32-bit integers (exact in doubles). */
export function mulhi32(a: number, b: number): number {
  const a0 = a & 0xffff, a1 = a >>> 16, b0 = b & 0xffff, b1 = b >>> 16;
  const p01 = a0 * b1, p10 = a1 * b0;
  const mid = ((a0 * b0) >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  return (a1 * b1 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16)) >>> 0;
}

/** Philox 4×32-10 of counter (c0, c1, c2, c3) under key (k0, k1), into out[0..3]. */
export function philox4x32(c0: number, c1: number, c2: number, c3: number, k0: number, k1: number, out: Uint32Array): void {
  let x0 = c0 >>> 0, x1 = c1 >>> 0, x2 = c2 >>> 0, x3 = c3 >>> 0;
  let y0 = k0 >>> 0, y1 = k1 >>> 0;
  for (let r = 0; r < 10; r++) {
    const hi0 = mulhi32(M0, x0), lo0 = Math.imul(M0, x0) >>> 0;
    const hi1 = mulhi32(M1, x2), lo1 = Math.imul(M1, x2) >>> 0;
    x0 = (hi1 ^ x1 ^ y0) >>> 0;
    x1 = lo1;
    x2 = (hi0 ^ x3 ^ y1) >>> 0;
    x3 = lo0;
    y0 = (y0 + W0) >>> 0;
    y1 = (y1 + W1) >>> 0;
  }
  out[0] = x0;
  out[1] = x1;
  out[2] = x2;
  out[3] = x3;
}

/** A resolved dropout option: the drop probability, its 32-bit threshold, the key and the offset. */
export interface DropoutSpec {
  readonly p: number;
  /** floor(p · 2³²): a word below it drops its entry. */
  readonly threshold: number;
  /** 1 / (1 − p): the scale of a kept entry. */
  readonly keepScale: number;
  readonly k0: number;
  readonly k1: number;
  readonly offset: number;
}

/**
 * The keep flags of row i, keys [j0, j1), of stream (b·H + h): keep[j − j0] = 1 when entry
 * (i, j) is kept. One Philox call per 4 keys (the columns floor(j / 4)·4 … + 3 share one).
 */
export function dropoutKeepRow(d: DropoutSpec, bh: number, i: number, j0: number, j1: number, keep: Uint8Array, words = new Uint32Array(4)): void {
  let cached = -1;
  for (let j = j0; j < j1; j++) {
    const c = j >>> 2;
    if (c !== cached) {
      philox4x32(c, i, bh, d.offset, d.k0, d.k1, words);
      cached = c;
    }
    keep[j - j0] = words[j & 3] >= d.threshold ? 1 : 0;
  }
}

/** Whether entry (i, j) of stream bh is kept (one Philox call; for references and tests). */
export function dropoutKeeps(d: DropoutSpec, bh: number, i: number, j: number): boolean {
  const keep = new Uint8Array(1);
  dropoutKeepRow(d, bh, i, j, j + 1, keep);
  return keep[0] === 1;
}

/** Counter word c2 of the element-wise mask: no attention stream (b·H + h) reaches it. */
export const ELEMENT_STREAM = 0xffffffff;

/**
 * The model op dropout's mask (DESIGN.md, "Model ops"): element e of a flat tensor is kept iff
 * word e mod 4 of Philox(counter (floor(e / 4) mod 2³², floor(e / 2³⁴), ELEMENT_STREAM, offset))
 * is at least the threshold. keep[i] = 1 for kept elements e0 + i, i < keep.length.
 */
export function dropoutKeepElements(d: DropoutSpec, e0: number, keep: Uint8Array, words = new Uint32Array(4)): void {
  let cached = -1;
  for (let i = 0; i < keep.length; i++) {
    const e = e0 + i;
    const c = Math.floor(e / 4);
    if (c !== cached) {
      philox4x32(c % 2 ** 32, Math.floor(e / 2 ** 34), ELEMENT_STREAM, d.offset, d.k0, d.k1, words);
      cached = c;
    }
    keep[i] = words[e % 4] >= d.threshold ? 1 : 0;
  }
}
