/**
 * Turning a tile of raw dot products q·k into logits, with mask.ts as the one definition of
 * what a logit is (scale, softcap, ALiBi) and which keys a query sees (keyRange, computed once
 * per row by the caller into rowLo/rowHi, in positions within the sequence).
 */
import { logit, type ScoreRules } from '../mask.js';

/**
 * In place on rows [0, nr) and columns [0, nc) of s (row stride ld): s = logit(dot), or −∞
 * where the key is masked. Query row r is at position i0 + r, key column c at j0 + c.
 *
 * With `dcap` given (backward with softcap), also stores there the derivative of the softcap,
 * d(c·tanh(x/c))/dx = 1 − tanh²(x/c), at each visible score (0 where masked).
 *
 * Returns true when the tile had no masked entry.
 */
export function scoreTile(
  p: ScoreRules,
  s: Float64Array,
  ld: number,
  nr: number,
  nc: number,
  i0: number,
  j0: number,
  tq: number,
  tk: number,
  slope: number,
  rowLo: Int32Array,
  rowHi: Int32Array,
  rowBase: number,
  dcap: Float64Array | undefined,
): boolean {
  const jEnd = j0 + nc - 1;
  let full = true;
  for (let r = 0; r < nr; r++) {
    if (rowLo[rowBase + r] > j0 || rowHi[rowBase + r] < jEnd) {
      full = false;
      break;
    }
  }
  if (p.softcap === 0 && slope === 0) {
    // With neither softcap nor ALiBi, logit(p, dot, 0, …) is exactly dot · scale.
    const scale = p.scale;
    if (full) {
      for (let r = 0; r < nr; r++) {
        const base = r * ld;
        for (let c = 0; c < nc; c++) s[base + c] *= scale;
      }
    } else {
      for (let r = 0; r < nr; r++) {
        const base = r * ld;
        const lo = rowLo[rowBase + r] - j0;
        const hi = rowHi[rowBase + r] - j0;
        for (let c = 0; c < nc; c++) s[base + c] = c < lo || c > hi ? -Infinity : s[base + c] * scale;
      }
    }
    return full;
  }
  const cap = p.softcap;
  for (let r = 0; r < nr; r++) {
    const base = r * ld;
    const lo = rowLo[rowBase + r] - j0;
    const hi = rowHi[rowBase + r] - j0;
    const i = i0 + r;
    for (let c = 0; c < nc; c++) {
      if (c < lo || c > hi) {
        s[base + c] = -Infinity;
        if (dcap) dcap[base + c] = 0;
        continue;
      }
      const dot = s[base + c];
      if (dcap) {
        // the capped score before ALiBi (slope 0) gives the derivative of c·tanh(x/c)
        const capped = logit(p, dot, 0, i, j0 + c, tq, tk);
        const t = capped / cap;
        dcap[base + c] = 1 - t * t;
        s[base + c] = slope === 0 ? capped : logit(p, dot, slope, i, j0 + c, tq, tk);
      } else {
        s[base + c] = logit(p, dot, slope, i, j0 + c, tq, tk);
      }
    }
  }
  return full;
}
