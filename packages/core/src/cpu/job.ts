/**
 * A unit of CPU-engine work as plain data: what a worker thread receives (structured-cloned;
 * the tensors are SharedArrayBuffer-backed so only views travel), and what the calling thread
 * runs itself when the problem is small or no workers exist. Workers pull units from a shared
 * counter until none remain, so a slow unit never holds up the others.
 */
import type { AttentionProblem } from '../problem.js';
import type { KVCacheProblem } from '../kvcache.js';
import type { HostData } from '../tensor.js';
import { paddedD } from './tiles.js';
import { dropoutKeepRow, type DropoutSpec } from '../philox.js';

export interface ForwardJob {
  readonly kind: 'forward';
  readonly p: AttentionProblem;
  readonly br: number;
  readonly bc: number;
  readonly q: HostData;
  readonly k: HostData;
  readonly v: HostData;
  readonly out: HostData;
  readonly lse: Float32Array;
  /** Units as (batch, kv head, query tile) triples, heaviest first. */
  readonly units: Int32Array;
  /** [0]: index of the next unit to take (Atomics.add). */
  readonly counter: Int32Array;
}

export interface BackwardJob {
  readonly kind: 'backward';
  readonly p: AttentionProblem;
  readonly br: number;
  readonly bc: number;
  readonly q: HostData;
  readonly k: HostData;
  readonly v: HostData;
  readonly out: HostData;
  readonly dOut: HostData;
  readonly lse: Float32Array;
  /** Dvec = rowsum(dO ∘ O) and the lse to recompute P with, laid out like lse (from the DvecJob). */
  readonly dvec: Float64Array;
  readonly lse64: Float64Array;
  /** float32 dQ accumulator, layout of q (the dq output itself when the dtype is f32). */
  readonly dq: Float32Array;
  readonly dk: HostData;
  readonly dv: HostData;
  /**
   * Units as (batch, kv head, first key tile, end key tile, private) 5-tuples. `private` is −1
   * when the unit adds into `dq`, else the index of its own accumulator in `dqPrivate`.
   */
  readonly units: Int32Array;
  /** Private dQ accumulators, each [segment Tq, H/Hkv, D] for its unit's (batch, kv head). */
  readonly dqPrivate: readonly Float32Array[];
  readonly counter: Int32Array;
}

/**
 * The backward's first phase: Dvec[row] = rowsum(dO ∘ O) for every query row and head, into a
 * buffer laid out like lse, and the lse the second phase uses (float64, same layout).
 * Without `exact`: O is the given `out` and lse the given float32 lse. With `exact`: O is the
 * float64 output recomputed from P = e^(S − lse) and V and renormalised, and the lse is
 * corrected for its float32 rounding (probabilitiesFromLseTile explains) — used for f16/bf16,
 * whose rounded `out` would leave dP − Dvec with rounding noise where P is nearly one-hot.
 */
export interface DvecJob {
  readonly kind: 'dvec';
  readonly p: AttentionProblem;
  readonly br: number;
  readonly bc: number;
  readonly q: HostData;
  readonly k: HostData;
  readonly v: HostData;
  readonly out: HostData;
  readonly dOut: HostData;
  readonly lse: Float32Array;
  readonly exact: boolean;
  readonly dvec: Float64Array;
  readonly lse64: Float64Array;
  /** (batch, kv head, query tile) triples, as for the forward. */
  readonly units: Int32Array;
  readonly counter: Int32Array;
}

/** Attention over a KV cache (kvcache.ts in this folder), after the append. */
export interface KVCacheJob {
  readonly kind: 'kvcache';
  readonly p: KVCacheProblem;
  readonly q: HostData;
  readonly kCache: HostData;
  readonly vCache: HostData;
  readonly out: HostData;
  /** [B, H, Tq]. */
  readonly lse: Float32Array;
  /** Queries per query tile, and rows per unit (heads per kv head × qt). */
  readonly qt: number;
  readonly rows: number;
  /** Keys per chunk of a split key range. */
  readonly chunk: number;
  /**
   * Units as (batch, kv head, query tile, chunk, slot) 5-tuples; slot −1: the unit covers its
   * whole key range and writes out/lse itself, else where its partial state goes.
   */
  readonly units: Int32Array;
  /** Kv heads per work unit: each takes this many consecutive units (kvHeadsPerUnit). */
  readonly heads: number;
  /** Partial states, `rows` rows per slot: running max, sum, and acc (rows of d4). */
  readonly pm: Float64Array;
  readonly pl: Float64Array;
  readonly pacc: Float64Array;
  readonly counter: Int32Array;
}

export type Job = ForwardJob | BackwardJob | DvecJob | KVCacheJob;

export const FWD_UNIT = 3;
export const BWD_UNIT = 5;
export const KV_UNIT = 5;

/** The tiles one thread reuses from unit to unit and job to job; grown, never shrunk. */
export class Workspace {
  br4 = 0;
  bc4 = 0;
  /** Row strides: q·k's head dim (q, k, dq, dk tiles) and v's (v, out, dO, dv tiles), padded to 4. */
  d4 = 0;
  dv4 = 0;
  qRow = new Float64Array(0);
  qP = new Float64Array(0);
  oRow = new Float64Array(0); // dO rows (backward) / scratch
  oP = new Float64Array(0);
  kRow = new Float64Array(0);
  kP = new Float64Array(0);
  vRow = new Float64Array(0);
  vP = new Float64Array(0);
  s = new Float64Array(0); // scores, then probabilities (br4 × bc4)
  dp = new Float64Array(0); // dP, then dS (br4 × bc4)
  dcap = new Float64Array(0); // softcap derivative (br4 × bc4)
  acc = new Float64Array(0); // output accumulator / dQ tile (br4 × d4)
  dk = new Float64Array(0); // bc4 × d4
  dv = new Float64Array(0);
  m = new Float64Array(0);
  l = new Float64Array(0);
  lse = new Float64Array(0);
  rowLo = new Int32Array(0);
  rowHi = new Int32Array(0);
  // dropout: a row's keep flags, the tile's multipliers (0 or 1/(1 − p)) and P∘M/(1 − p)
  keep = new Uint8Array(0);
  mk = new Float64Array(0);
  pd = new Float64Array(0);
  words = new Uint32Array(4);

  /** Tiles for br query rows, bc key rows, head dims d (q·k) and dv (v; d by default). */
  ensure(br: number, bc: number, d: number, dv = d): void {
    const br4 = (br + 3) & ~3;
    const bc4 = (bc + 3) & ~3;
    const d4 = paddedD(d);
    const dv4 = paddedD(dv);
    if (br4 === this.br4 && bc4 === this.bc4 && d4 === this.d4 && dv4 === this.dv4) return;
    this.br4 = br4;
    this.bc4 = bc4;
    this.d4 = d4;
    this.dv4 = dv4;
    const w4 = Math.max(d4, dv4); // (oRow holds dO rows, and scratch of either width; acc O or a dQ tile)
    const f = (n: number) => new Float64Array(n);
    this.qRow = f(br4 * d4);
    this.qP = f(br4 * d4);
    this.oRow = f(br4 * w4);
    this.oP = f(br4 * dv4);
    this.kRow = f(bc4 * d4);
    this.kP = f(bc4 * d4);
    this.vRow = f(bc4 * dv4);
    this.vP = f(bc4 * dv4);
    this.s = f(br4 * bc4);
    this.dp = f(br4 * bc4);
    this.dcap = f(br4 * bc4);
    this.acc = f(br4 * w4);
    this.dk = f(bc4 * d4);
    this.dv = f(bc4 * dv4);
    this.m = f(br4);
    this.l = f(br4);
    this.lse = f(br4);
    this.keep = new Uint8Array(bc4);
    this.mk = new Float64Array(0); // (allocated by dropoutTile when a call has dropout)
    this.pd = new Float64Array(0);
  }

  /**
   * Dropout's multipliers of a tile (rows i0 + r < i0 + nr, keys j0 + c < j0 + nc, stream bh) into
   * mk (row stride ld): keepScale where philox.ts keeps the entry, 0 where it drops it.
   */
  dropoutTile(drop: DropoutSpec, bh: number, i0: number, nr: number, j0: number, nc: number, ld: number): Float64Array {
    if (this.mk.length < this.br4 * this.bc4) {
      this.mk = new Float64Array(this.br4 * this.bc4);
      this.pd = new Float64Array(this.br4 * this.bc4);
    }
    for (let r = 0; r < nr; r++) {
      dropoutKeepRow(drop, bh, i0 + r, j0, j0 + nc, this.keep, this.words);
      const o = r * ld;
      for (let c = 0; c < nc; c++) this.mk[o + c] = this.keep[c] ? drop.keepScale : 0;
    }
    return this.mk;
  }

  /** Row-range scratch of at least n entries. */
  ranges(n: number): void {
    if (this.rowLo.length < n) {
      this.rowLo = new Int32Array(n);
      this.rowHi = new Int32Array(n);
    }
  }
}
