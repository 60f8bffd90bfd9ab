/**
 * The block plan of a ring step: which engine calls compute a rank's queries against the K/V
 * shard visiting it, exactly, with the engine's ordinary options.
 *
 * A rank's local q rows and the visiting k rows are concatenations of token ranges (layout.ts).
 * For every sequence, every (q range, k range) pair is cut to its live rectangle — the queries
 * that see at least one of its keys under the problem's mask, and the keys some of them see —
 * and becomes a *piece*. Within a piece both sets are contiguous in global positions, so its
 * mask is the problem's window shifted by the piece's offset δ (the last query's position + 1
 * minus the end of its keys): window [left − δ, right + δ] in the piece's own bottom-right
 * frame. Cutting to the live rectangle is what keeps both bounds ≥ 0 (or unbounded), i.e.
 * expressible as an ordinary `window` option. Bounds that cover the whole piece become
 * unbounded, so a block every query sees in full runs as plain attention and a diagonal block
 * as `causal`.
 *
 * Pieces of one sequence are merged where their union is again one window in the union's frame
 * (checked row by row): zigzag causal attention then needs one engine call per ring step (the
 * own shard as one causal block; every other step as one full block). Pieces with the same
 * window go into one varlen call when they can be ordered in both q and k; the rows and keys
 * between them become filler segments (queries with no keys, keys with no queries), whose rows
 * give out 0 and LSE −∞ — the identity of the online-softmax merge — and zero gradients. Every
 * call therefore covers all local q rows and all visiting k rows, so its out/LSE/dq/dk/dv line
 * up with the accumulators and need no slicing.
 *
 * ALiBi adds −slope·|distance|; a piece keeps distances only when δ = 0, so ALiBi is planned
 * without merging and a piece with δ ≠ 0 is E_UNSUPPORTED (in practice: ALiBi runs with one
 * rank, or with windows that keep every rank on its own diagonal).
 */
import { check, FAError } from '../errors.js';
import { keyRange, windowKeyRange } from '../mask.js';
import type { AttentionOptions, AttentionProblem } from '../problem.js';
import { ringSource } from './communicator.js';
import { rangeRows, type ShardLayout, type TokenRange } from './layout.js';

/** A rectangle of local q rows × visiting k rows with one window in its own frame. */
export interface Piece {
  /** Sequence (batch) index, for ALiBi slopes. */
  readonly seq: number;
  readonly q0: number;
  readonly q1: number;
  readonly k0: number;
  readonly k1: number;
  /** Window in the piece's bottom-right frame; −1 = unbounded. */
  readonly left: number;
  readonly right: number;
  /** Global distance minus local distance of every pair (NaN after a merge). */
  readonly delta: number;
}

export interface RingCall {
  /** Segments over all local q rows [0, rowsQ) and all visiting k rows. */
  readonly cuSeqlensQ: Int32Array;
  readonly cuSeqlensK: Int32Array;
  /** Sequence of each segment, −1 for fillers (ALiBi slopes). */
  readonly segmentSeq: Int32Array;
  readonly windowLeft: number;
  readonly windowRight: number;
  /** Query–key pairs the call computes per head. */
  readonly pairs: number;
}

export interface RingStep {
  readonly step: number;
  /** The rank whose K/V shard is visiting. */
  readonly src: number;
  readonly calls: readonly RingCall[];
  readonly pairs: number;
}

export interface RingPlan {
  readonly rank: number;
  readonly size: number;
  /** Local q rows in the packed view (B·n for dense shards). */
  readonly rowsQ: number;
  /** Packed rows of every rank's k shard. */
  readonly rowsK: readonly number[];
  readonly steps: readonly RingStep[];
}

/** A stretch of one sequence on one rank: positions [g0, g1) within the sequence at local row l0. */
interface Part {
  readonly g0: number;
  readonly g1: number;
  readonly l0: number;
}

/** The parts of global span [a, b) (axis coordinates) on a rank, sequence start `base`. */
function partsOf(ranges: readonly TokenRange[], offsets: readonly number[], a: number, b: number, base: number): Part[] {
  const out: Part[] = [];
  let lo = 0;
  let hi = ranges.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ranges[mid].end <= a) lo = mid + 1;
    else hi = mid;
  }
  for (let i = lo; i < ranges.length && ranges[i].start < b; i++) {
    const s = Math.max(a, ranges[i].start);
    const e = Math.min(b, ranges[i].end);
    if (s < e) out.push({ g0: s - base, g1: e - base, l0: offsets[i] + s - ranges[i].start });
  }
  return out;
}

function prefix(ranges: readonly TokenRange[]): number[] {
  const o: number[] = [];
  let n = 0;
  for (const r of ranges) {
    o.push(n);
    n += r.end - r.start;
  }
  return o;
}

/** Bounds that cover the whole piece become unbounded. */
function canonical(left: number, right: number, nq: number, nk: number): [number, number] {
  return [left >= 0 && left >= nk - 1 ? -1 : left, right >= 0 && right >= nq - 1 ? -1 : right];
}

/** The live rectangle of (q part × k part) of one sequence, or undefined if no pair is visible. */
function livePiece(p: AttentionProblem, seq: number, tq: number, tk: number, qp: Part, kp: Part): Piece | undefined {
  const L = p.windowLeft;
  const R = p.windowRight;
  const off = tk - tq;
  let a = qp.g0;
  let b = qp.g1 - 1;
  if (R >= 0) a = Math.max(a, kp.g0 - off - R);
  if (L >= 0) b = Math.min(b, kp.g1 - 1 - off + L);
  if (a > b) return undefined;
  const kStart = Math.max(kp.g0, keyRange(p, a, tq, tk)[0]);
  const kEnd = Math.min(kp.g1 - 1, keyRange(p, b, tq, tk)[1]) + 1;
  if (kStart >= kEnd) return undefined;
  const nq = b - a + 1;
  const nk = kEnd - kStart;
  const delta = b + 1 + off - kEnd;
  const [left, right] = canonical(L < 0 ? -1 : L - delta, R < 0 ? -1 : R + delta, nq, nk);
  if (left < -1 || right < -1) throw new FAError('E_ARG', `context parallelism: internal error, a block of sequence ${seq} got window [${left}, ${right}]`);
  const q0 = qp.l0 + a - qp.g0;
  const k0 = kp.l0 + kStart - kp.g0;
  return { seq, q0, q1: q0 + nq, k0, k1: k0 + nk, left, right, delta };
}

/** Piece P's visible k interval for rect row x (rect starting at row Q0, column K0), or null. */
function rowOf(P: Piece, Q0: number, K0: number, x: number): [number, number] | null {
  const r = Q0 + x;
  if (r < P.q0 || r >= P.q1) return null;
  const [lo, hi] = windowKeyRange(P.left, P.right, r - P.q0, P.q1 - P.q0, P.k1 - P.k0);
  return lo > hi ? null : [lo + P.k0 - K0, hi + P.k0 - K0];
}

/** A and B as one piece, when their union is one window in the union's frame. */
function tryMerge(A: Piece, B: Piece): Piece | undefined {
  if (A.seq !== B.seq) return undefined;
  if (Math.max(A.q0, B.q0) > Math.min(A.q1, B.q1) || Math.max(A.k0, B.k0) > Math.min(A.k1, B.k1)) return undefined;
  const Q0 = Math.min(A.q0, B.q0);
  const K0 = Math.min(A.k0, B.k0);
  const nq = Math.max(A.q1, B.q1) - Q0;
  const nk = Math.max(A.k1, B.k1) - K0;
  // two full blocks side by side (same rows, touching keys) or stacked (same keys, touching rows)
  const full = (P: Piece) => P.left < 0 && P.right < 0;
  if (full(A) && full(B) && ((A.q0 === B.q0 && A.q1 === B.q1 && (A.k1 === B.k0 || B.k1 === A.k0)) || (A.k0 === B.k0 && A.k1 === B.k1 && (A.q1 === B.q0 || B.q1 === A.q0)))) {
    return { seq: A.seq, q0: Q0, q1: Q0 + nq, k0: K0, k1: K0 + nk, left: -1, right: -1, delta: NaN };
  }
  const FAIL: [number, number] = [1, 0];
  const union = (x: number): [number, number] | null => {
    const a = rowOf(A, Q0, K0, x);
    const b = rowOf(B, Q0, K0, x);
    if (!a || !b) return a ?? b;
    if (a[1] + 1 < b[0] || b[1] + 1 < a[0]) return FAIL; // two islands: no window makes that
    return [Math.min(a[0], b[0]), Math.max(a[1], b[1])];
  };
  let L: number | undefined;
  let R: number | undefined;
  for (let x = 0; x < nq; x++) {
    const iv = union(x);
    if (iv === FAIL) return undefined;
    if (!iv) continue;
    const pos = x + nk - nq;
    if (iv[1] < nk - 1) {
      if (R === undefined) R = iv[1] - pos;
      else if (R !== iv[1] - pos) return undefined;
    }
    if (iv[0] > 0) {
      if (L === undefined) L = pos - iv[0];
      else if (L !== pos - iv[0]) return undefined;
    }
  }
  if ((L !== undefined && L < 0) || (R !== undefined && R < 0)) return undefined;
  const [left, right] = canonical(L ?? -1, R ?? -1, nq, nk);
  for (let x = 0; x < nq; x++) {
    const iv = union(x);
    const [lo, hi] = windowKeyRange(left, right, x, nq, nk);
    if (iv ? lo !== iv[0] || hi !== iv[1] : lo <= hi) return undefined;
  }
  return { seq: A.seq, q0: Q0, q1: Q0 + nq, k0: K0, k1: K0 + nk, left, right, delta: NaN };
}

/** Merges pieces of one sequence until no pair merges. */
function mergeAll(pieces: Piece[]): Piece[] {
  const list = [...pieces];
  for (let changed = true; changed; ) {
    changed = false;
    outer: for (let i = 0; i < list.length; i++) {
      for (let j = i + 1; j < list.length; j++) {
        const m = tryMerge(list[i], list[j]);
        if (m) {
          list.splice(j, 1);
          list[i] = m;
          changed = true;
          break outer;
        }
      }
    }
  }
  return list;
}

function piecePairs(P: Piece): number {
  const nq = P.q1 - P.q0;
  const nk = P.k1 - P.k0;
  if (P.left < 0 && P.right < 0) return nq * nk;
  let n = 0;
  for (let x = 0; x < nq; x++) {
    const [lo, hi] = windowKeyRange(P.left, P.right, x, nq, nk);
    if (hi >= lo) n += hi - lo + 1;
  }
  return n;
}

/** Varlen calls for pieces already grouped by window: chains ordered in both q and k. */
function callsOf(pieces: Piece[], rowsQ: number, rowsK: number, pairsOf: Map<Piece, number>): RingCall[] {
  const groups = new Map<string, Piece[]>();
  for (const P of pieces) {
    const key = `${P.left},${P.right}`;
    const g = groups.get(key);
    if (g) g.push(P);
    else groups.set(key, [P]);
  }
  const calls: RingCall[] = [];
  for (const key of [...groups.keys()].sort()) {
    const group = groups.get(key)!.sort((a, b) => a.q0 - b.q0 || a.k0 - b.k0);
    const chains: Piece[][] = [];
    for (const P of group) {
      const c = chains.find((ch) => ch[ch.length - 1].q1 <= P.q0 && ch[ch.length - 1].k1 <= P.k0);
      if (c) c.push(P);
      else chains.push([P]);
    }
    for (const chain of chains) {
      const cq = [0];
      const ck = [0];
      const seqs: number[] = [];
      let qc = 0;
      let kc = 0;
      let pairs = 0;
      const seg = (q1: number, k1: number, s: number) => {
        cq.push(q1);
        ck.push(k1);
        seqs.push(s);
      };
      for (const P of chain) {
        if (P.q0 > qc) seg(P.q0, kc, -1); // queries that see nothing in this call
        if (P.k0 > kc) seg(P.q0, P.k0, -1); // keys no query of this call sees
        seg(P.q1, P.k1, P.seq);
        qc = P.q1;
        kc = P.k1;
        pairs += pairsOf.get(P)!;
      }
      if (qc < rowsQ) seg(rowsQ, kc, -1);
      if (kc < rowsK) seg(rowsQ, rowsK, -1);
      const [l, r] = key.split(',').map(Number);
      calls.push({ cuSeqlensQ: Int32Array.from(cq), cuSeqlensK: Int32Array.from(ck), segmentSeq: Int32Array.from(seqs), windowLeft: l, windowRight: r, pairs });
    }
  }
  return calls;
}

/** Recent plans, by what they depend on: planning a million-token shard takes tens of ms. */
const cache = new Map<string, RingPlan>();
const CACHE_SIZE = 32;

function planKey(p: AttentionProblem, layout: ShardLayout, rank: number): string {
  const seq = p.varlen ? `${Array.from(p.cuSeqlensQ).join(',')}/${Array.from(p.cuSeqlensK).join(',')}` : `${p.batch}×${p.tq}/${p.tk}`;
  return `${rank}|${seq}|${p.windowLeft},${p.windowRight}|${p.alibi ? 'alibi' : ''}|${JSON.stringify(layout.q)}|${JSON.stringify(layout.k)}`;
}

/**
 * Plans every ring step of `rank` for the global problem `p` (the problem of the whole,
 * unsharded tensors; describeProblem validates it). Throws FAError E_UNSUPPORTED for ALiBi
 * blocks whose distances a shard cannot keep. Plans are immutable and remembered (the last 32).
 */
export function planRing(p: AttentionProblem, layout: ShardLayout, rank: number): RingPlan {
  const key = planKey(p, layout, rank);
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  const plan = makePlan(p, layout, rank);
  cache.set(key, plan);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value!);
  return plan;
}

function makePlan(p: AttentionProblem, layout: ShardLayout, rank: number): RingPlan {
  const size = layout.ranks;
  check(Number.isSafeInteger(rank) && rank >= 0 && rank < size, 'E_ARG', `rank ${rank} is outside [0, ${size})`);
  const axisQ = p.varlen ? p.totalQ : p.tq;
  const axisK = p.varlen ? p.totalK : p.tk;
  check(layout.tq === axisQ && layout.tk === axisK, 'E_SHAPE', `the layout shards ${layout.tq} query and ${layout.tk} key tokens, the problem has ${axisQ} and ${axisK}${p.varlen ? ' (packed, varlen)' : ' per sequence'}`);
  const reps = p.varlen ? 1 : p.batch;
  const nq = rangeRows(layout.q[rank]);
  const nkOf = layout.k.map(rangeRows);
  const rowsQ = reps * nq;
  const rowsK = nkOf.map((n) => reps * n);
  const qOff = prefix(layout.q[rank]);
  const steps: RingStep[] = [];
  for (let step = 0; step < size; step++) {
    const src = ringSource(rank, size, step);
    const kRanges = layout.k[src];
    const kOff = prefix(kRanges);
    // pieces of each sequence (dense: one template, repeated over the batch below)
    const seqs = p.varlen ? p.batch : 1;
    let pieces: Piece[] = [];
    for (let s = 0; s < seqs; s++) {
      const [qa, qb] = p.varlen ? [p.cuSeqlensQ[s], p.cuSeqlensQ[s + 1]] : [0, p.tq];
      const [ka, kb] = p.varlen ? [p.cuSeqlensK[s], p.cuSeqlensK[s + 1]] : [0, p.tk];
      const own: Piece[] = [];
      for (const qp of partsOf(layout.q[rank], qOff, qa, qb, qa)) {
        for (const kp of partsOf(kRanges, kOff, ka, kb, ka)) {
          const P = livePiece(p, s, qb - qa, kb - ka, qp, kp);
          if (!P) continue;
          if (p.alibi && P.delta !== 0) {
            throw new FAError('E_UNSUPPORTED', 'context parallelism: ALiBi biases depend on the absolute query–key distance, which a block of another shard\'s keys does not keep in an engine call (engines take no position offset); run ALiBi on one rank');
          }
          own.push(P);
        }
      }
      pieces.push(...(p.alibi ? own : mergeAll(own)));
    }
    if (!p.varlen) {
      const template = pieces;
      pieces = [];
      for (let b = 0; b < p.batch; b++) for (const P of template) pieces.push({ ...P, seq: b, q0: P.q0 + b * nq, q1: P.q1 + b * nq, k0: P.k0 + b * nkOf[src], k1: P.k1 + b * nkOf[src] });
    }
    const pairsOf = new Map<Piece, number>();
    let pairs = 0;
    for (const P of pieces) {
      const n = piecePairs(P);
      pairsOf.set(P, n);
      pairs += n;
    }
    steps.push({ step, src, calls: callsOf(pieces, rowsQ, rowsK[src], pairsOf), pairs });
  }
  return { rank, size, rowsQ, rowsK, steps };
}

/** The engine options of one call of the plan. */
export function callOptions(p: AttentionProblem, call: RingCall): AttentionOptions {
  const o: { -readonly [K in keyof AttentionOptions]: AttentionOptions[K] } = {
    cuSeqlensQ: call.cuSeqlensQ,
    cuSeqlensK: call.cuSeqlensK,
    scale: p.scale,
  };
  if (call.windowLeft < 0 && call.windowRight === 0) o.causal = true;
  else if (call.windowLeft >= 0 || call.windowRight >= 0) o.window = [call.windowLeft, call.windowRight];
  if (p.softcap > 0) o.softcap = p.softcap;
  if (p.deterministic) o.deterministic = true;
  if (p.alibi) {
    const slopes = new Float32Array(call.segmentSeq.length * p.h);
    call.segmentSeq.forEach((s, i) => {
      if (s >= 0) slopes.set(p.alibi!.subarray(s * p.h, (s + 1) * p.h), i * p.h);
    });
    o.alibiSlopes = slopes;
  }
  return o;
}
