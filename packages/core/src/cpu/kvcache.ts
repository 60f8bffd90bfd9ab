/**
 * The KV-cache kernel: attention of a few query rows over a cache read in place through the
 * block table (kvcache.ts's kvCacheRow), split over the key range for decode (flash-decoding),
 * with partial states combined by the online-softmax merge.
 *
 * The plan's unit is (batch b, kv head, query tile, key chunk). Its rows are every query of the
 * tile for every query head that reads this kv head (R = heads per kv head × queries), so each
 * cached K and V row is read once for the whole GQA group. A work unit takes the plan's units of
 * several kv heads of one (batch, query tile, chunk) together (kvHeadsPerUnit: all of them for
 * decode), so that a key tile's token rows are read in the order they lie in memory:
 *
 *   Q rows (heads × R × d4, decoded once)
 *   for each key tile of KV_TILE keys in the chunk ∩ the rows' visible keys:
 *     token row offsets through the block table            tokenOffsets (rows read in place;
 *                                                          16-bit through a widening table)
 *     one load a line of the unit's K, then V rows          walkRows (several heads only)
 *     for each kv head: S = Q·Kᵀ                           scoresRows4 / scoresRow1 (…T: 16-bit)
 *     S   = logit(S), −∞ where masked                      scoreTile (mask.ts)
 *     S   = e^(S − m'), rescale l and acc                  softmaxTileUpdate (online-softmax.ts)
 *     for each kv head: acc += S·V                         pvRows4 / pvRow1 (…T: 16-bit)
 *   one chunk: out = acc / l, lse = m + log l               finalizeTile
 *   several:   (m, l, acc) → partial slot; combineKVCache merges the chunks in order
 *              (mergeTileStates), then finalizes
 *
 * The plan and the heads a work unit takes depend on the problem only (never on the thread
 * count), and every kv head is computed exactly as in a unit of its own, so results are the
 * same bit for bit inline, on any number of workers, and run to run.
 */
import { keyRange, slopeOf, tileKeyRange } from '../mask.js';
import { finalizeTile, mergeTileStates, resetTileState, seedSinkTile, softmaxTileUpdate } from '../online-softmax.js';
import { kvAttended, kvCacheRow, kvFirstKey, kvLseIndex, type KVCacheProblem } from '../kvcache.js';
import { KV_UNIT, type KVCacheJob, type Workspace } from './job.js';
import { pvRow1, pvRow1T, pvRows4, pvRows4S, pvRows4T, pvRows4TS, scoresRow1, scoresRow1T, scoresRows4, scoresRows4T } from './kvcache-kernels.js';
import { scoreTile } from './scores.js';
import { bf16ToF32, f16ToF32, loadRows, storeRows } from './tileio.js';
import { paddedD } from './tiles.js';

/** Keys per tile: S is R4 × KV_TILE and the K, V tiles KV_TILE × d4 (64 KiB each at D = 128). */
export const KV_TILE = 64;
/** Query rows a unit aims for (queries per tile = max(1, KV_ROWS / heads per kv head)). */
export const KV_ROWS = 32;
/** Keys per chunk when the key range is split (a multiple of KV_TILE). */
export const KV_CHUNK = 1024;
/** Split the key range only while there are fewer (batch, kv head, query tile) groups than this. */
export const KV_SPLIT_BELOW_GROUPS = 256;
/** Most query rows (heads × rows of a kv head) a work unit of several kv heads may have (kvHeadsPerUnit). */
export const KV_UNIT_ROWS = 64;
/** Fewest work units kvHeadsPerUnit leaves (it takes fewer heads a unit below this). */
export const KV_MIN_UNITS = 8;
/** Most partial-state memory the split may use; longer chunks beyond it. */
export const KV_PARTIAL_BYTES = 32 * 1024 * 1024;

export interface KVCachePlan {
  /** Queries per tile. */
  readonly qt: number;
  /** Rows per unit: heads per kv head × qt. */
  readonly rows: number;
  /** Keys per chunk (Infinity-like: the whole range when not split). */
  readonly chunk: number;
  readonly units: Int32Array;
  /** Partial-state slots (units of split groups). */
  readonly slots: number;
}

/**
 * The units of a KV-cache call, heaviest first; deterministic in the problem (and the engine's
 * `kvChunk` option, the keys per chunk of a split range).
 */
export function planKVCache(p: KVCacheProblem, kvChunk = KV_CHUNK): KVCachePlan {
  const g = p.h / p.hkv;
  const qt = Math.max(1, Math.floor(KV_ROWS / g));
  const rows = g * qt;
  const qTiles = Math.ceil(p.tq / qt);
  const groups = p.batch * p.hkv * qTiles;
  let chunk = 0x7fffffff;
  if (groups < KV_SPLIT_BELOW_GROUPS && p.tk > kvChunk) {
    const need = (groups * Math.ceil(p.tk / kvChunk) * rows * (paddedD(p.d) + 2) * 8); // partial bytes
    chunk = need <= KV_PARTIAL_BYTES ? kvChunk : Math.ceil((kvChunk * need) / KV_PARTIAL_BYTES / KV_TILE) * KV_TILE;
  }
  const items: { b: number; t: number; c: number; slot: number; work: number }[] = [];
  let slots = 0;
  for (let b = 0; b < p.batch; b++) {
    const tk = kvAttended(p, b); // (keys after the left padding: key j is row j + kvFirstKey)
    for (let t = 0; t < qTiles; t++) {
      const i0 = t * qt;
      const nq = Math.min(qt, p.tq - i0);
      const [lo, hi] = tileKeyRange(p, i0, i0 + nq, p.tq, tk);
      const span = Math.max(0, hi - lo + 1);
      const nc = Math.max(1, Math.ceil(span / chunk));
      for (let c = 0; c < nc; c++) {
        items.push({ b, t, c, slot: nc > 1 ? slots : -1, work: Math.min(chunk, span - c * chunk) * nq + 1 });
        if (nc > 1) slots += p.hkv;
      }
    }
  }
  items.sort((x, y) => y.work - x.work || x.b - y.b || x.t - y.t || x.c - y.c);
  const units = new Int32Array(items.length * p.hkv * KV_UNIT);
  let o = 0;
  for (const it of items) {
    for (let kvh = 0; kvh < p.hkv; kvh++) {
      units[o++] = it.b;
      units[o++] = kvh;
      units[o++] = it.t;
      units[o++] = it.c;
      units[o++] = it.slot < 0 ? -1 : it.slot + kvh;
    }
  }
  return { qt, rows, chunk, units, slots };
}

/** A (batch, kv head, query tile) whose key range is split: where its partial states are, for the combine. */
export interface SplitGroup {
  readonly b: number;
  readonly kvh: number;
  /** Query tile. */
  readonly t: number;
  /** Partial-state slot of chunk 0; chunk c's is slot0 + c·Hkv. */
  readonly slot0: number;
  readonly chunks: number;
}

/** The split groups of a plan's units (those with a partial-state slot), in order of first appearance. */
export function splitGroups(p: KVCacheProblem, plan: Pick<KVCachePlan, 'units'>): SplitGroup[] {
  const U = plan.units;
  const groups = new Map<number, { b: number; kvh: number; t: number; slot0: number; chunks: number }>();
  for (let o = 0; o < U.length; o += KV_UNIT) {
    const slot = U[o + 4];
    if (slot < 0) continue;
    const [b, kvh, t, c] = [U[o], U[o + 1], U[o + 2], U[o + 3]];
    const key = (b * p.hkv + kvh) * 0x10000 + t;
    const g = groups.get(key);
    if (!g) groups.set(key, { b, kvh, t, slot0: slot - c * p.hkv, chunks: c + 1 });
    else g.chunks = Math.max(g.chunks, c + 1);
  }
  return [...groups.values()];
}

/**
 * Rows of a query tile over `heads` kv heads from kvh0: row r = hh·nq + ii is query i0 + ii of
 * query head kvh0·g + hh (so kv head kvh0 + e owns rows [e·g·nq, (e + 1)·g·nq)). Fills ws.rowLo/rowHi.
 */
function tileRows(p: KVCacheProblem, ws: Workspace, i0: number, nq: number, tk: number, heads: number): void {
  const g = (p.h / p.hkv) * heads;
  ws.ranges(g * nq);
  for (let ii = 0; ii < nq; ii++) {
    const [lo, hi] = keyRange(p, i0 + ii, p.tq, tk);
    for (let hh = 0; hh < g; hh++) {
      ws.rowLo[hh * nq + ii] = lo;
      ws.rowHi[hh * nq + ii] = hi;
    }
  }
}

/** Per-thread scratch of the KV-cache kernel: row offsets, and float32 tiles for f32 rows of a D that is not a multiple of 4. */
class KVScratch {
  off = new Int32Array(KV_TILE);
  /** Element offsets of the tile's token rows (kv head 0), for every head of the unit. */
  tok = new Int32Array(KV_TILE);
  /** Where walkRows' loads go, so that they are not optimized away. */
  sink = 0;
  k32 = new Float32Array(0);
  v32 = new Float32Array(0);
  /** Room for `heads` padded tiles (one a kv head of the unit). */
  ensure(d4: number, heads: number): void {
    if (this.k32.length >= heads * KV_TILE * d4) return;
    this.k32 = new Float32Array(heads * KV_TILE * d4);
    this.v32 = new Float32Array(heads * KV_TILE * d4);
  }
}
const scratch = new KVScratch();

/**
 * Per-thread Float64Array of a 16-bit cache's unit: the widening table of all 65,536 bit patterns
 * at [0, 65536) (exact: f16 and bf16 values are float32s, and those float64s), then the unit's
 * query rows (from `qb`) and its score tile (from `sb`). The …T kernels read all three from this
 * one array: one typed array fewer in their inner loops, whose every iteration re-checks each
 * array it reads (kvcache-kernels.ts). One per dtype; grown (table copied again) when a unit has more rows.
 */
class WideBuffer {
  buf: Float64Array;
  qb = 65536;
  sb = 65536;
  /** buf[sb …): the score tile, for scoreTile and softmaxTileUpdate, which index from 0. */
  s: Float64Array;
  constructor(readonly table: Float32Array) {
    this.buf = Float64Array.from(table);
    this.s = this.buf.subarray(this.sb);
  }
  ensure(rows: number, d4: number, ld: number): void {
    if (this.buf.length - this.sb >= rows * ld && this.sb - this.qb >= rows * d4) return;
    const qb = 65536, sb = qb + rows * d4;
    this.buf = new Float64Array(sb + rows * ld);
    this.buf.set(this.table);
    this.qb = qb;
    this.sb = sb;
    this.s = this.buf.subarray(sb);
  }
}
const wideBuffers = new Map<string, WideBuffer>();
function wideBuffer(dtype: 'f16' | 'bf16'): WideBuffer {
  let w = wideBuffers.get(dtype);
  if (!w) wideBuffers.set(dtype, (w = new WideBuffer(dtype === 'bf16' ? bf16ToF32() : f16ToF32())));
  return w;
}

/**
 * Element offsets of the token rows of keys [j0, j0 + nc) of sequence b in the cache, through
 * the block table (kvCacheRow), into tok[0..nc); the padding up to nc4 repeats the last key (its
 * scores are never read). Kv head kvh's row of key j is at tok[j] + kvh·D (headOffsets).
 */
function tokenOffsets(p: KVCacheProblem, b: number, j0: number, nc: number, nc4: number, tok: Int32Array): void {
  const w = p.hkv * p.d;
  const lp = kvFirstKey(p, b);
  for (let r = 0; r < nc; r++) tok[r] = kvCacheRow(p, b, lp + j0 + r) * w;
  for (let r = nc; r < nc4; r++) tok[r] = tok[nc - 1];
}

/**
 * One load a 64-byte line of the unit's part of each token row of a tile (`len` elements from
 * tok[r] + col), token after token: a sequential walk the hardware prefetchers follow, so the
 * products, which read one head's slice of every row at a time, find the rows in cache.
 */
function walkRows(src: Float32Array | Uint16Array, tok: Int32Array, nc: number, col: number, len: number): number {
  const step = 64 / src.BYTES_PER_ELEMENT;
  let sum = 0;
  for (let r = 0; r < nc; r++) {
    const o = tok[r] + col;
    for (let i = 0; i < len; i += step) sum += src[o + i];
  }
  return sum;
}

/** The common distance of the tile's token rows (tok[0..nc)) when there is one (always for nc = 1), else 0. */
function rowStride(tok: Int32Array, nc: number): number {
  if (nc < 2) return 1;
  const w = tok[1] - tok[0];
  for (let r = 2; r < nc; r++) if (tok[r] - tok[r - 1] !== w) return 0;
  return w;
}

function headOffsets(tok: Int32Array, col: number, nc4: number, off: Int32Array): void {
  for (let r = 0; r < nc4; r++) off[r] = tok[r] + col;
}

/**
 * Copies the f32 rows at off[0..nc) into a tile at f32[at…) with rows of d4 (zero padded): for a D that is
 * not a multiple of 4, whose padded width (pvRows4 reads d4 columns) would read past a row.
 */
function padTile(src: Float32Array, off: Int32Array, nc: number, d: number, d4: number, f32: Float32Array, at: number): void {
  for (let r = 0; r < nc; r++) {
    const s = off[r];
    const o = at + r * d4;
    for (let c = 0; c < d; c++) f32[o + c] = src[s + c];
    for (let c = d; c < d4; c++) f32[o + c] = 0;
  }
}

/**
 * Kv heads per work unit: a run of the plan's units that differ only in their kv head (the plan
 * lists an item's heads one after another, with consecutive partial-state slots) is taken as
 * one, so that each key tile is read as it lies in memory, every head of a token row in turn,
 * as a copy loop reads it, rather than one head's slice of every row of the range and then the
 * next head's. All of a token's heads while a unit keeps at most KV_UNIT_ROWS rows and there
 * are at least KV_MIN_UNITS units; halved otherwise. Every head is computed exactly as alone,
 * and the count depends on the problem only.
 */
export function kvHeadsPerUnit(p: KVCacheProblem, plan: Pick<KVCachePlan, 'units' | 'qt'>): number {
  const items = plan.units.length / KV_UNIT / p.hkv;
  const rowsPerHead = (p.h / p.hkv) * Math.min(plan.qt, p.tq);
  let heads = p.hkv;
  while (heads > 1 && (heads * rowsPerHead > KV_UNIT_ROWS || items * (p.hkv / heads) < KV_MIN_UNITS)) heads = heads % 2 === 0 ? heads / 2 : 1;
  return heads;
}

/**
 * One unit: kv heads [kvh0, kvh0 + heads) of a (sequence, query tile, key chunk); see the
 * module comment. Rows of kv head kvh0 + e are [e·R, (e + 1)·R) of the tiles; the score rules
 * and the online softmax run over all of them at once (they are per row), the products head by
 * head over each key tile.
 */
export function kvCacheUnit(job: KVCacheJob, ws: Workspace, b: number, kvh0: number, heads: number, t: number, c: number, slot: number): void {
  const p = job.p;
  const g = p.h / p.hkv;
  const d = p.d;
  ws.ensure(Math.max(job.rows, heads * g * Math.min(job.qt, p.tq)), KV_TILE, d);
  const { d4 } = ws;
  const tk = kvAttended(p, b); // (keys after the left padding: key j is row j + kvFirstKey)
  const i0 = t * job.qt;
  const nq = Math.min(job.qt, p.tq - i0);
  const R = g * nq;
  const R4 = R & ~3;
  const HR = heads * R;
  tileRows(p, ws, i0, nq, tk, heads);
  const { qRow, m, l, acc, lse, rowLo, rowHi } = ws;
  for (let hh = 0; hh < heads * g; hh++) loadRows(job.q, p.dtype, b * p.tq + i0, nq, p.h * d, (kvh0 * g + hh) * d, d, d4, nq, qRow, hh * nq);
  const ld = KV_TILE;
  // Rows are read where they lie: f32 as they are (through a padded tile when D is not a
  // multiple of 4), 16-bit through the table of all 65,536 patterns, which shares one array
  // with the query rows and the scores (WideBuffer).
  const wide = p.dtype === 'f32' ? undefined : wideBuffer(p.dtype);
  let s: Float64Array = ws.s;
  if (wide) {
    wide.ensure(HR, d4, ld);
    wide.buf.set(qRow.subarray(0, HR * d4), wide.qb);
    s = wide.s;
  }
  resetTileState(m, l, acc, HR, d4);
  // sinks join the first chunk's state only, so that the merge counts each once
  if (p.sinks && c === 0) for (let hh = 0; hh < heads * g; hh++) seedSinkTile(m.subarray(hh * nq), l.subarray(hh * nq), nq, p.sinks[kvh0 * g + hh]);
  const [lo, hi] = tileKeyRange(p, i0, i0 + nq, p.tq, tk);
  const c0 = lo + c * job.chunk;
  const c1 = Math.min(hi + 1, c0 + job.chunk);
  const alibi = p.alibi !== undefined;
  const padded = p.dtype === 'f32' && d % 4 !== 0;
  scratch.ensure(d4, heads);
  const { off, tok, k32, v32 } = scratch;
  for (let j0 = c0; j0 < c1; j0 += KV_TILE) {
    const nc = Math.min(KV_TILE, c1 - j0);
    const nc4 = (nc + 3) & ~3;
    tokenOffsets(p, b, j0, nc, nc4, tok);
    // P·V reads rows a constant stride apart with a running index (…S kernels) when the tile
    // lies in one block (paged) or sequence (contiguous); through off[] otherwise.
    const rs = rowStride(tok, nc);
    if (heads > 1) {
      scratch.sink += walkRows(job.kCache as Float32Array | Uint16Array, tok, nc, kvh0 * d, heads * d);
      scratch.sink += walkRows(job.vCache as Float32Array | Uint16Array, tok, nc, kvh0 * d, heads * d);
    }
    for (let e = 0; e < heads; e++) {
      const r0 = e * R;
      headOffsets(tok, (kvh0 + e) * d, nc4, off);
      if (wide) {
        const kSrc = job.kCache as Uint16Array;
        const { buf, qb, sb } = wide;
        for (let r = 0; r < R4; r += 4) scoresRows4T(buf, qb, d4, r0 + r, kSrc, off, nc4, d, sb, ld);
        for (let r = R4; r < R; r++) scoresRow1T(buf, qb, d4, r0 + r, kSrc, off, nc4, d, sb, ld);
      } else {
        let kSrc = job.kCache as Float32Array;
        if (padded) {
          // head e's rows go to its own part of the padded tiles, read again by P·V below
          padTile(job.kCache as Float32Array, off, nc, d, d4, k32, e * KV_TILE * d4);
          padTile(job.vCache as Float32Array, off, nc, d, d4, v32, e * KV_TILE * d4);
          paddedOffsets(e, nc, nc4, d4, off);
          kSrc = k32;
        }
        for (let r = 0; r < R4; r += 4) scoresRows4(qRow, d4, r0 + r, kSrc, off, nc4, d, s, ld);
        for (let r = R4; r < R; r++) scoresRow1(qRow, d4, r0 + r, kSrc, off, nc4, d, s, ld);
      }
    }
    if (!alibi) {
      // Without ALiBi the logit does not depend on the query position or head: one call.
      scoreTile(p, s, ld, HR, nc, i0, j0, p.tq, tk, 0, rowLo, rowHi, 0, undefined);
    } else {
      for (let hh = 0; hh < heads * g; hh++) scoreTile(p, s.subarray(hh * nq * ld), ld, nq, nc, i0, j0, p.tq, tk, slopeOf(p, b, kvh0 * g + hh), rowLo, rowHi, hh * nq, undefined);
    }
    softmaxTileUpdate(s, ld, HR, nc, m, l, acc, d4);
    for (let e = 0; e < heads; e++) {
      const r0 = e * R;
      if (wide) {
        headOffsets(tok, (kvh0 + e) * d, nc4, off);
        const vSrc = job.vCache as Uint16Array;
        const { buf, sb } = wide;
        if (rs !== 0) for (let r = 0; r < R4; r += 4) pvRows4TS(buf, sb, ld, r0 + r, vSrc, off[0], rs, nc, d, d4, acc);
        else for (let r = 0; r < R4; r += 4) pvRows4T(buf, sb, ld, r0 + r, vSrc, off, nc, d, d4, acc);
        for (let r = R4; r < R; r++) pvRow1T(buf, sb, ld, r0 + r, vSrc, off, nc, d, d4, acc);
      } else {
        if (padded) paddedOffsets(e, nc, nc4, d4, off);
        else headOffsets(tok, (kvh0 + e) * d, nc4, off);
        const vSrc = padded ? v32 : (job.vCache as Float32Array);
        // padded tiles' rows are d4 apart
        const vs = padded ? d4 : rs;
        if (vs !== 0) for (let r = 0; r < R4; r += 4) pvRows4S(s, ld, r0 + r, vSrc, off[0], vs, nc, d4, acc);
        else for (let r = 0; r < R4; r += 4) pvRows4(s, ld, r0 + r, vSrc, off, nc, d4, acc);
        for (let r = R4; r < R; r++) pvRow1(s, ld, r0 + r, vSrc, off, nc, d4, acc);
      }
    }
  }
  if (slot >= 0) {
    // kv head kvh0 + e's partial state goes to slot + e (the plan's slots of an item's heads)
    for (let e = 0; e < heads; e++) {
      const base = (slot + e) * job.rows;
      const r0 = e * R;
      job.pm.set(m.subarray(r0, r0 + R), base);
      job.pl.set(l.subarray(r0, r0 + R), base);
      job.pacc.set(acc.subarray(r0 * d4, (r0 + R) * d4), base * d4);
    }
    return;
  }
  finalizeTile(m, l, acc, HR, d4, lse);
  storeKVRows(job, ws, b, kvh0 * g, heads * g, i0, nq);
}

/** Offsets of head e's rows in the padded tiles (padTile at e·KV_TILE·d4); padding keys repeat the last. */
function paddedOffsets(e: number, nc: number, nc4: number, d4: number, off: Int32Array): void {
  for (let r = 0; r < nc4; r++) off[r] = (e * KV_TILE + Math.min(r, nc - 1)) * d4;
}

/** Writes the finalized rows in ws.acc / ws.lse (query heads [h0, h0 + nh), nq queries each) to out and the [B, H, Tq] LSE. */
function storeKVRows(job: KVCacheJob, ws: Workspace, b: number, h0: number, nh: number, i0: number, nq: number): void {
  const p = job.p;
  for (let hh = 0; hh < nh; hh++) {
    const h = h0 + hh;
    storeRows(job.out, p.dtype, b * p.tq + i0, nq, p.h * p.d, h * p.d, p.d, ws.d4, ws.acc.subarray(hh * nq * ws.d4));
    for (let ii = 0; ii < nq; ii++) job.lse[kvLseIndex(p, b, h, i0 + ii)] = ws.lse[hh * nq + ii];
  }
}

/** Runs KV-cache work units (job.heads consecutive plan units each) from the shared counter until none is left. */
export function runKVCache(job: KVCacheJob, ws: Workspace): void {
  const heads = job.heads;
  const n = job.units.length / KV_UNIT / heads;
  const U = job.units;
  for (;;) {
    const u = Atomics.add(job.counter, 0, 1);
    if (u >= n) return;
    const o = u * heads * KV_UNIT;
    kvCacheUnit(job, ws, U[o], U[o + 1], heads, U[o + 2], U[o + 3], U[o + 4]);
  }
}

/**
 * Merges the partial states of split groups in chunk order (mergeTileStates) and writes their
 * rows: the combine pass of flash-decoding, on the calling thread (it reads R·d4 numbers per
 * chunk against the chunk's 2·KV_CHUNK·D cached numbers).
 */
export function combineKVCache(job: KVCacheJob, ws: Workspace): void {
  const p = job.p;
  const g = p.h / p.hkv;
  ws.ensure(job.rows, KV_TILE, p.d);
  const d4 = ws.d4;
  const { m, l, acc, lse } = ws;
  for (const e of splitGroups(p, job)) {
    const i0 = e.t * job.qt;
    const nq = Math.min(job.qt, p.tq - i0);
    const R = g * nq;
    const at = (c: number) => (e.slot0 + c * p.hkv) * job.rows;
    m.set(job.pm.subarray(at(0), at(0) + R));
    l.set(job.pl.subarray(at(0), at(0) + R));
    acc.set(job.pacc.subarray(at(0) * d4, (at(0) + R) * d4));
    for (let c = 1; c < e.chunks; c++) {
      const a = at(c);
      mergeTileStates(m, l, acc, job.pm.subarray(a, a + R), job.pl.subarray(a, a + R), job.pacc.subarray(a * d4, (a + R) * d4), R, d4);
    }
    finalizeTile(m, l, acc, R, d4, lse);
    storeKVRows(job, ws, e.b, e.kvh * g, g, i0, nq);
  }
}
