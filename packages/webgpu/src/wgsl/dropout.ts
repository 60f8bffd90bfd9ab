/**
 * Dropout's mask in WGSL: core's philox.ts (Philox 4×32-10, DESIGN.md's keying) on 32-bit
 * integers only. WGSL has no 64-bit product, so the high word of a 32×32 product is summed from
 * 16-bit halves (philox.ts mulhi32, the same arithmetic); the low word is u32 multiplication,
 * which wraps. Key (seed mod 2³², floor(seed / 2³²)), counter (floor(j / 4), i, b·H + h,
 * offset): entry (i, j) is dropped iff output word j mod 4 is below the threshold floor(p·2³²),
 * so the mask is the one every engine draws.
 *
 * The kernels use it where P meets V (forward.ts: after the running sum l has taken the
 * undropped weights; backward.ts: P∘M/(1 − p) for dV, M∘dP/(1 − p) in dS). One Philox call gives
 * the multipliers of four consecutive keys of one query row (drop_quad); layouts whose thread
 * owns such a quad (vec4: four contiguous score columns, or four rows of dkdv's transposed tile)
 * call it once per quad, the others once per entry (drop_one).
 */
import type { KernelSpec } from './spec.js';

/**
 * The high word of a 32×32-bit product, from 16-bit halves (WGSL has no 64-bit integers): Philox
 * here and exact-rotation.ts. (One definition a module: include it once.)
 */
export const MULHI32_WGSL = /* wgsl */ `
fn mulhi32(a: u32, b: u32) -> u32 {
  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p01 = a0 * b1; let p10 = a1 * b0;
  let mid = ((a0 * b0) >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}`;

/** Philox 4×32-10 on 32-bit integers: mulhi32 and philox4x32 (counter, key) → 4 words. */
export const PHILOX_WGSL = /* wgsl */ `${MULHI32_WGSL}
fn philox4x32(c: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
  var x = c; var k = key;
  for (var r = 0u; r < 10u; r = r + 1u) {
    let hi0 = mulhi32(0xd2511f53u, x.x); let lo0 = 0xd2511f53u * x.x;
    let hi1 = mulhi32(0xcd9e8d57u, x.z); let lo1 = 0xcd9e8d57u * x.z;
    x = vec4<u32>(hi1 ^ x.y ^ k.x, lo1, hi0 ^ x.w ^ k.y, lo0);
    k = k + vec2<u32>(0x9e3779b9u, 0xbb67ae85u);
  }
  return x;
}`;

export function dropoutFns(s: KernelSpec): string {
  if (!s.dropout) return '';
  return /* wgsl */ `${PHILOX_WGSL}
// Multipliers (0, or 1/(1 − p) for a kept entry) of keys 4·jq … 4·jq + 3 of query row i, stream bh.
fn drop_quad(i: i32, jq: u32, bh: u32) -> vec4<f32> {
  let w = philox4x32(vec4<u32>(jq, u32(i), bh, P.drop_off), vec2<u32>(P.drop_k0, P.drop_k1));
  return select(vec4<f32>(P.drop_scale), vec4<f32>(0.0), w < vec4<u32>(P.drop_thr));
}
fn drop_one(i: i32, j: i32, bh: u32) -> f32 {
  return drop_quad(i, u32(j) >> 2u, bh)[u32(j) & 3u];
}`;
}

/**
 * WGSL `let` lines naming the dropout multiplier of every score register of a thread, and the
 * expression of each: `mult(i, j)` for register (i, j). `row(i)` and `col(j)` are the register's
 * query row and key column (i32 expressions, positions within the sequence); `quads` says along
 * which register index four consecutive keys lie in one thread (vec4 layouts), if any, and
 * `keyQuad(i, j)` the u32 index floor(key / 4) of the quad starting at register (i, j).
 * `byRow[i]`: the lines that register row i's multipliers need first (`lines` is all of them).
 */
export function dropoutMultipliers(
  rm: number, cn: number, row: (i: number, j: number) => string, col: (i: number, j: number) => string,
  quads: 'cols' | 'rows' | undefined, keyQuad: (i: number, j: number) => string,
): { lines: string[]; byRow: string[][]; mult: (i: number, j: number) => string } {
  const byRow: string[][] = Array.from({ length: rm }, () => []);
  const quad = (i: number, j: number) => byRow[i].push(`let dm${i}_${j} = drop_quad(${row(i, j)}, ${keyQuad(i, j)}, bh);`);
  let mult: (i: number, j: number) => string;
  if (quads === 'cols') {
    for (let i = 0; i < rm; i++) for (let j = 0; j < cn; j += 4) quad(i, j);
    mult = (i, j) => `dm${i}_${j - (j % 4)}[${j % 4}]`;
  } else if (quads === 'rows') {
    for (let i = 0; i < rm; i += 4) for (let j = 0; j < cn; j++) quad(i, j);
    mult = (i, j) => `dm${i - (i % 4)}_${j}[${i % 4}]`;
  } else {
    mult = (i, j) => `drop_one(${row(i, j)}, ${col(i, j)}, bh)`;
  }
  return { lines: byRow.flat(), byRow, mult };
}
