/**
 * How much of the engine's memory a call takes, before it runs: supports() declines problems
 * that cannot fit in wasm32's 4 GiB, and BENCHMARKS/README quote the same numbers.
 *
 *   forward:  q (overwritten by out, or out beside it when Dv differs), k, v as float32; K^T
 *             and V tiles (bc8 x D and bc8 x Dv per key tile and kv head); lse; per-thread scratch
 *   backward: q, k (then dK), v (then dV), dO, the dQ accumulator (first holding out, for Dvec:
 *             as large as the larger of the two);
 *             lse, Dvec; the private dQ accumulators of split sequences (at most one sequence's
 *             dQ per extra thread); per-thread scratch
 */
import { segment, type AttentionProblem, type TileSizes } from '@fa/core';

const F = 4;
export const STACK_BYTES = 64 * 1024;
const bc8 = (bc: number) => (bc + 7) & ~7;
const dp = (d: number) => (d + 7) & ~7;

/** Key tiles of every sequence (the K^T panels the forward packs), and each sequence's first. */
export function keyTiles(p: AttentionProblem, bc: number): Int32Array {
  const first = new Int32Array(p.batch + 1);
  for (let b = 0; b < p.batch; b++) first[b + 1] = first[b] + Math.ceil(segment(p, b).tk / bc);
  return first;
}

/** An upper bound of one thread's scratch (the kernels' own fa_*_scratch_bytes are exact). */
export function scratchBound(p: AttentionProblem, t: TileSizes): number {
  const c = bc8(t.bc);
  const r = t.br;
  const d = Math.max(p.d, p.vDim);
  // (5 score-sized tiles: S, dP, the softcap derivative, and dropout's multipliers and P∘M; the
  // accumulator, and the forward's contiguous copy of the q rows)
  return F * (5 * r * c + 2 * c * dp(d) + 2 * d * c + 2 * r * dp(d) + 2 * r + 16) + STACK_BYTES;
}

export function forwardBytes(p: AttentionProblem, t: TileSizes, threads: number): number {
  const nq = p.totalQ * p.h * p.d;
  const no = p.vDim === p.d ? 0 : p.totalQ * p.h * p.vDim;
  const nk = p.totalK * p.hkv * (p.d + p.vDim);
  const tileRows = p.hkv * keyTiles(p, t.bc)[p.batch] * bc8(t.bc);
  return F * (nq + no + nk + tileRows * (p.d + dp(p.vDim)) + p.h * p.totalQ) + threads * scratchBound(p, t);
}

export function backwardBytes(p: AttentionProblem, t: TileSizes, threads: number): number {
  const nq = p.totalQ * p.h * p.d;
  const no = p.totalQ * p.h * p.vDim;
  const nk = p.totalK * p.hkv * (p.d + p.vDim);
  let longest = 0;
  for (let b = 0; b < p.batch; b++) longest = Math.max(longest, segment(p, b).tq);
  const privates = Math.max(0, threads - 1) * longest * p.h * p.d;
  return F * (nq + no + Math.max(nq, no) + nk + 2 * p.h * p.totalQ + privates) + threads * scratchBound(p, t);
}
