/**
 * Shard layouts for context parallelism: which token rows of q and of k/v each rank holds.
 *
 * The token axis is a sequence's T for dense [B, T, H, D] tensors (every batch is sharded the
 * same way) and the packed axis for varlen [totalT, H, D] tensors. A rank holds a list of
 * half-open ranges in ascending order; its local tensor is their concatenation. The ranges of
 * all ranks tile the axis exactly.
 *
 * - zigzag (the default for causal attention): the axis is cut into 2N chunks and rank r holds
 *   chunks r and 2N−1−r, so every rank gets one early and one late chunk and the same amount
 *   of causal work (ring-flash-attention and Llama 3's context parallelism do the same).
 * - contiguous: N chunks, rank r holds chunk r (enough for non-causal attention).
 * - zigzagVarlenLayout: the zigzag cut applied to each sequence of a varlen batch separately.
 * Chunks differ by at most one token when 2N does not divide T; T < 2N leaves some empty.
 */
import { check, FAError } from '../errors.js';

/** Token rows [start, end). */
export interface TokenRange {
  readonly start: number;
  readonly end: number;
}

export interface ShardLayout {
  readonly ranks: number;
  /** Length of q's token axis (dense: Tq; varlen: totalQ) and of k's (Tk; totalK). */
  readonly tq: number;
  readonly tk: number;
  /** Per rank, its q ranges (ascending, adjacent ones merged) and its k/v ranges. */
  readonly q: readonly (readonly TokenRange[])[];
  readonly k: readonly (readonly TokenRange[])[];
}

function checkRanks(ranks: number): void {
  check(Number.isSafeInteger(ranks) && ranks >= 1, 'E_ARG', `the number of ranks must be an integer >= 1, got ${String(ranks)}`);
}

function checkLength(t: number, what: string): void {
  check(Number.isSafeInteger(t) && t >= 0, 'E_ARG', `${what} must be an integer >= 0, got ${String(t)}`);
}

/** Appends [start, end) to a sorted list, merging it with the last range when they touch. */
function push(list: TokenRange[], start: number, end: number): void {
  if (end <= start) return;
  const last = list[list.length - 1];
  if (last && last.end === start) list[list.length - 1] = { start: last.start, end };
  else list.push({ start, end });
}

/** Chunk c of n equal-as-possible chunks of [0, t). */
const cut = (t: number, n: number, c: number): [number, number] => [Math.floor((c * t) / n), Math.floor(((c + 1) * t) / n)];

function zigzagRanges(ranks: number, t: number, base = 0, into?: TokenRange[][]): TokenRange[][] {
  const out = into ?? Array.from({ length: ranks }, () => [] as TokenRange[]);
  for (let r = 0; r < ranks; r++) {
    const [a0, a1] = cut(t, 2 * ranks, r);
    const [b0, b1] = cut(t, 2 * ranks, 2 * ranks - 1 - r);
    push(out[r], base + a0, base + a1);
    push(out[r], base + b0, base + b1);
  }
  return out;
}

/** Rank r holds chunks r and 2N−1−r of 2N (load-balanced causal attention). */
export function zigzagLayout(ranks: number, tq: number, tk: number = tq): ShardLayout {
  checkRanks(ranks);
  checkLength(tq, 'tq');
  checkLength(tk, 'tk');
  return { ranks, tq, tk, q: zigzagRanges(ranks, tq), k: zigzagRanges(ranks, tk) };
}

/** Rank r holds chunk r of N. */
export function contiguousLayout(ranks: number, tq: number, tk: number = tq): ShardLayout {
  checkRanks(ranks);
  checkLength(tq, 'tq');
  checkLength(tk, 'tk');
  const ranges = (t: number) => Array.from({ length: ranks }, (_, r) => {
    const list: TokenRange[] = [];
    const [a, b] = cut(t, ranks, r);
    push(list, a, b);
    return list;
  });
  return { ranks, tq, tk, q: ranges(tq), k: ranges(tk) };
}

function toOffsets(cu: ArrayLike<number>, what: string): number[] {
  const a = Array.from(cu);
  check(a.length >= 2 && a[0] === 0 && a.every((x, i) => Number.isSafeInteger(x) && (i === 0 || x >= a[i - 1])), 'E_ARG', `${what} must start at 0 and be non-decreasing integers, length B+1 >= 2`);
  return a;
}

/** The zigzag cut applied to every sequence of a varlen batch (packed token axis). */
export function zigzagVarlenLayout(ranks: number, cuSeqlensQ: ArrayLike<number>, cuSeqlensK: ArrayLike<number>): ShardLayout {
  checkRanks(ranks);
  const cq = toOffsets(cuSeqlensQ, 'cuSeqlensQ');
  const ck = toOffsets(cuSeqlensK, 'cuSeqlensK');
  check(cq.length === ck.length, 'E_SHAPE', `cuSeqlensQ and cuSeqlensK must have the same length; got ${cq.length} and ${ck.length}`);
  const q = Array.from({ length: ranks }, () => [] as TokenRange[]);
  const k = Array.from({ length: ranks }, () => [] as TokenRange[]);
  for (let b = 0; b + 1 < cq.length; b++) {
    zigzagRanges(ranks, cq[b + 1] - cq[b], cq[b], q);
    zigzagRanges(ranks, ck[b + 1] - ck[b], ck[b], k);
  }
  return { ranks, tq: cq[cq.length - 1], tk: ck[ck.length - 1], q, k };
}

/** Rows a rank holds: the total length of its ranges. */
export function rangeRows(ranges: readonly TokenRange[]): number {
  let n = 0;
  for (const r of ranges) n += r.end - r.start;
  return n;
}

/** Throws FAError(E_ARG) unless the layout's ranges are sorted, disjoint and tile both axes. */
export function checkLayout(layout: ShardLayout): void {
  check(typeof layout === 'object' && layout !== null, 'E_ARG', 'layout must be a ShardLayout (zigzagLayout, contiguousLayout, ...)');
  checkRanks(layout.ranks);
  for (const [axis, t, lists] of [['q', layout.tq, layout.q], ['k', layout.tk, layout.k]] as const) {
    checkLength(t, `layout.t${axis}`);
    check(Array.isArray(lists) && lists.length === layout.ranks, 'E_ARG', `layout.${axis} must list the ranges of each of the ${layout.ranks} ranks`);
    const all: [number, number, number][] = [];
    lists.forEach((ranges, r) => {
      let prev = -1;
      for (const g of ranges) {
        check(Number.isSafeInteger(g.start) && Number.isSafeInteger(g.end) && g.start < g.end && g.start >= 0 && g.end <= t, 'E_ARG', `layout.${axis}[${r}] has a range [${g.start}, ${g.end}) that is empty or outside [0, ${t})`);
        check(g.start >= prev, 'E_ARG', `layout.${axis}[${r}]: ranges must be in ascending order`);
        prev = g.end;
        all.push([g.start, g.end, r]);
      }
    });
    all.sort((a, b) => a[0] - b[0]);
    let at = 0;
    for (const [s, e, r] of all) {
      if (s !== at) throw new FAError('E_ARG', `layout.${axis}: token ${Math.min(s, at)} is ${s > at ? 'held by no rank' : `held twice (rank ${r} again)`}`);
      at = e;
    }
    check(at === t, 'E_ARG', `layout.${axis}: tokens [${at}, ${t}) are held by no rank`);
  }
}

/**
 * Where token `t` of the axis lives: its rank and row in that rank's local tensor, or undefined.
 * Linear in the number of ranges; for tests and tools, not for inner loops.
 */
export function locateToken(lists: readonly (readonly TokenRange[])[], t: number): { rank: number; row: number } | undefined {
  for (let r = 0; r < lists.length; r++) {
    let row = 0;
    for (const g of lists[r]) {
      if (t >= g.start && t < g.end) return { rank: r, row: row + t - g.start };
      row += g.end - g.start;
    }
  }
  return undefined;
}
