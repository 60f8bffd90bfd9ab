/**
 * What each query sees and how a raw score becomes a logit: the single definition of the
 * mask and score modifiers (DESIGN.md: scale, then softcap, then ALiBi, then the mask).
 */
import type { ResolvedScores } from './validate.js';

/**
 * What the rules below read from a problem. AttentionProblem and KVCacheProblem (kvcache.ts)
 * both extend ResolvedScores and have h, so a KV-cache call masks and scores exactly like the
 * dense call.
 */
export type ScoreRules = Pick<ResolvedScores, 'scale' | 'softcap' | 'windowLeft' | 'windowRight' | 'alibi'> & { readonly h: number };

/**
 * Visible keys of query i in a sequence of tq queries and tk keys, as an inclusive range
 * [lo, hi]; empty when lo > hi. Bottom-right alignment: query i sits at key position i+tk-tq.
 */
export function keyRange(p: ScoreRules, i: number, tq: number, tk: number): [number, number] {
  return windowKeyRange(p.windowLeft, p.windowRight, i, tq, tk);
}

/** keyRange for an explicit window [left, right] (-1 = unbounded), e.g. one block of a ring step. */
export function windowKeyRange(left: number, right: number, i: number, tq: number, tk: number): [number, number] {
  const pos = i + tk - tq;
  const lo = left < 0 ? 0 : Math.max(0, pos - left);
  const hi = right < 0 ? tk - 1 : Math.min(tk - 1, pos + right);
  return [lo, hi];
}

/**
 * Union of the visible ranges of queries [i0, i1) — what a query tile must load. The bounds are
 * monotone in i, so the union is [lo(i0), hi(i1-1)] (possibly with holes for none).
 */
export function tileKeyRange(p: ScoreRules, i0: number, i1: number, tq: number, tk: number): [number, number] {
  const [lo] = keyRange(p, i0, tq, tk);
  const [, hi] = keyRange(p, i1 - 1, tq, tk);
  return [lo, hi];
}

/**
 * Queries that see key j, as an inclusive range [lo, hi] — what a key tile must visit in
 * the backward pass. The inverse of keyRange.
 */
export function queryRange(p: ScoreRules, j: number, tq: number, tk: number): [number, number] {
  const off = tk - tq; // query i sits at position i + off
  // j <= i + off + right  <=>  i >= j - off - right ; j >= i + off - left <=> i <= j - off + left
  const lo = p.windowRight < 0 ? 0 : Math.max(0, j - off - p.windowRight);
  const hi = p.windowLeft < 0 ? tq - 1 : Math.min(tq - 1, j - off + p.windowLeft);
  return [lo, hi];
}

/**
 * The logit of a raw dot product q·k for query i, key j (positions within the sequence),
 * before masking. `slope` is the ALiBi slope of this (batch, head), or 0.
 */
export function logit(p: ScoreRules, dot: number, slope: number, i: number, j: number, tq: number, tk: number): number {
  let s = dot * p.scale;
  if (p.softcap > 0) s = p.softcap * Math.tanh(s / p.softcap);
  if (slope !== 0) s -= slope * Math.abs(i + tk - tq - j);
  return s;
}

/** ALiBi slope for (b, h), or 0. */
export function slopeOf(p: ScoreRules, b: number, h: number): number {
  return p.alibi ? p.alibi[b * p.h + h] : 0;
}
