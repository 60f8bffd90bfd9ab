/**
 * The forward kernel: one unit is one (batch, kv head, query tile); it computes the query
 * tile's rows for every query head that reads this kv head, visiting only the key tiles the
 * mask leaves visible, with the online softmax of online-softmax.ts.
 *
 *   queryTile: each row's visible keys (mask.ts), the key tiles to visit (tileKeyRange)
 *   for each query head h of the group:
 *     forwardRows:
 *       load Q tile (decoded to float64, packed for the micro-kernel)
 *       state ← empty (m = −∞, l = 0, acc = 0); with sinks m = s_h, l = 1   seedSinkTile
 *       for each visible key tile:                  (causal / window tiles outside are skipped)
 *         S   = Q·Kᵀ                                gemmABtPacked
 *         S   = logit(S), −∞ where masked           scoreTile (mask.ts)
 *         S   = e^(S − m'), rescale l and acc       softmaxTileUpdate (online-softmax.ts)
 *         S  ∘= dropout mask / (1 − p)               dropoutTile (philox.ts), l keeps the undropped sum
 *         acc += S·V                                gemmAB (maskedAB: see kernels.ts)
 *       out = acc / l, lse = m + log l              finalizeTile (online-softmax.ts)
 *     store out, lse
 *
 * The backward's exact-Dvec pre-pass (backward.ts) runs the same rows with the max pinned at
 * the saved lse, through the same two functions (queryTile, forwardRows).
 */
import { keyRange, slopeOf, tileKeyRange } from '../mask.js';
import { finalizeTile, probabilitiesFromLseTile, resetTileState, seedSinkTile, softmaxTileUpdate } from '../online-softmax.js';
import { lseIndex, segment, type AttentionProblem, type Segment } from '../problem.js';
import { FWD_UNIT, type ForwardJob, type Workspace } from './job.js';
import { gemmAB, gemmABtPacked, maskedAB, packPanels } from './kernels.js';
import { scoreTile } from './scores.js';
import { loadRows, storeRows } from './tileio.js';

/** What queryTile and forwardRows read from a job: a ForwardJob or the backward's DvecJob. */
export type ForwardInputs = Pick<ForwardJob, 'p' | 'br' | 'bc' | 'q' | 'k' | 'v'>;

/**
 * Rows [i0, i0 + nr) of sequence `seg` (nr4: nr padded to a multiple of 4), and the key tiles
 * kt0..kt1 that hold a key some row sees (none when kt1 < kt0).
 */
export interface QueryTile {
  readonly seg: Segment;
  readonly i0: number;
  readonly nr: number;
  readonly nr4: number;
  readonly kt0: number;
  readonly kt1: number;
}

/**
 * Query tile qt of sequence b, once per unit: sizes the workspace and writes each row's visible
 * keys (mask.ts) to ws.rowLo/rowHi[row − i0]. Undefined when the tile starts past the sequence.
 */
export function queryTile(job: ForwardInputs, ws: Workspace, b: number, qt: number): QueryTile | undefined {
  const { p, br, bc } = job;
  ws.ensure(br, bc, p.d, p.vDim);
  const seg = segment(p, b);
  const i0 = qt * br;
  const nr = Math.min(br, seg.tq - i0);
  if (nr <= 0) return undefined;
  ws.ranges(nr);
  for (let r = 0; r < nr; r++) {
    const [lo, hi] = keyRange(p, i0 + r, seg.tq, seg.tk);
    ws.rowLo[r] = lo;
    ws.rowHi[r] = hi;
  }
  const [tlo, thi] = tileKeyRange(p, i0, i0 + nr, seg.tq, seg.tk);
  const none = tlo > thi;
  return { seg, i0, nr, nr4: (nr + 3) & ~3, kt0: none ? 0 : Math.floor(tlo / bc), kt1: none ? -1 : Math.floor(thi / bc) };
}

/**
 * The float64 forward of tile t's rows for query head h (of kv head kvh): leaves O in ws.acc
 * (rows of d4) and each row's lse in ws.lse.
 *
 * Without `pinnedLse`: the online softmax (m starts at −∞ and rises tile by tile).
 * With it (the forward's saved float32 lse, lse layout): the row max is pinned there, each tile
 * adds P = e^(S − lse), the very P the backward recomputes, to l and P·V to acc, so
 * finalizeTile gives O renormalised by l = ΣP and the lse corrected by log l
 * (probabilitiesFromLseTile says why the backward needs that for f16/bf16).
 * The choice costs one branch per key tile, nothing inside the tile loops.
 */
export function forwardRows(job: ForwardInputs, ws: Workspace, t: QueryTile, b: number, kvh: number, h: number, pinnedLse?: Float32Array): void {
  const { p, bc } = job;
  const d = p.d;
  const dv = p.vDim; // v's head dim: the V tile, acc and out (q·k's is d)
  const dtype = p.dtype;
  const qStride = p.h * d;
  const kStride = p.hkv * d;
  const vStride = p.hkv * dv;
  const { seg, i0, nr, nr4 } = t;
  const { d4, dv4, bc4, qRow, qP, kRow, kP, vRow, s, m, l, acc, lse, rowLo, rowHi } = ws;
  const slope = slopeOf(p, b, h);
  loadRows(job.q, dtype, seg.q0 + i0, nr, qStride, h * d, d, d4, nr4, qRow);
  packPanels(qRow, nr4, d4, qP);
  const sink = p.sinks ? p.sinks[h] : undefined;
  if (pinnedLse) {
    for (let r = 0; r < nr; r++) {
      m[r] = pinnedLse[lseIndex(p, b, h, i0 + r)];
      // the sink's P under the pinned max, as the keys' P below (0 without sinks)
      l[r] = sink === undefined ? 0 : Math.exp(sink - m[r]);
    }
    acc.fill(0, 0, nr4 * dv4);
  } else {
    resetTileState(m, l, acc, nr4, dv4);
    if (sink !== undefined) seedSinkTile(m, l, nr, sink);
  }
  for (let kt = t.kt0; kt <= t.kt1; kt++) {
    const j0 = kt * bc;
    const nc = Math.min(bc, seg.tk - j0);
    const nc4 = (nc + 3) & ~3;
    loadRows(job.k, dtype, seg.k0 + j0, nc, kStride, kvh * d, d, d4, nc4, kRow);
    packPanels(kRow, nc4, d4, kP);
    const vFinite = loadRows(job.v, dtype, seg.k0 + j0, nc, vStride, kvh * dv, dv, dv4, nc4, vRow);
    gemmABtPacked(qP, kP, s, nr4, nc4, d4, bc4);
    const full = scoreTile(p, s, bc4, nr, nc, i0, j0, seg.tq, seg.tk, slope, rowLo, rowHi, 0, undefined);
    if (pinnedLse) probabilitiesFromLseTile(s, bc4, nr, nc, m, l);
    else softmaxTileUpdate(s, bc4, nr, nc, m, l, acc, dv4);
    if (p.dropout) {
      // after l has the undropped weights: only P·V sees the mask (philox.ts), scaled 1/(1 − p)
      const mk = ws.dropoutTile(p.dropout, b * p.h + h, i0, nr, j0, nc, bc4);
      for (let r = 0; r < nr; r++) for (let c = 0, o = r * bc4; c < nc; c++) s[o + c] *= mk[o + c];
    }
    if (full || vFinite) gemmAB(s, bc4, nr4, vRow, nc, dv4, acc);
    else maskedAB(s, bc4, nr, vRow, nc, dv4, acc, rowLo, rowHi, 0, j0);
  }
  finalizeTile(m, l, acc, nr, dv4, lse);
}

export function forwardUnit(job: ForwardJob, ws: Workspace, b: number, kvh: number, qt: number): void {
  const t = queryTile(job, ws, b, qt);
  if (!t) return;
  const p = job.p;
  const dv = p.vDim;
  const g = p.h / p.hkv;
  const oStride = p.h * dv;
  for (let hh = 0; hh < g; hh++) {
    const h = kvh * g + hh;
    forwardRows(job, ws, t, b, kvh, h);
    storeRows(job.out, p.dtype, t.seg.q0 + t.i0, t.nr, oStride, h * dv, dv, ws.dv4, ws.acc);
    for (let r = 0; r < t.nr; r++) job.lse[lseIndex(p, b, h, t.i0 + r)] = ws.lse[r];
  }
}

/** Runs forward units from the shared counter until none is left. */
export function runForward(job: ForwardJob, ws: Workspace): void {
  const n = job.units.length / FWD_UNIT;
  for (;;) {
    const u = Atomics.add(job.counter, 0, 1);
    if (u >= n) return;
    const o = u * FWD_UNIT;
    forwardUnit(job, ws, job.units[o], job.units[o + 1], job.units[o + 2]);
  }
}

/**
 * The forward units of a problem, heaviest first (so the causal diagonal's long rows start
 * early and the short ones fill the gaps at the end). Work = visible (query, key) pairs.
 */
export function planForward(p: AttentionProblem, br: number): Int32Array {
  const items: { b: number; qt: number; work: number }[] = [];
  for (let b = 0; b < p.batch; b++) {
    const seg = segment(p, b);
    for (let i0 = 0, qt = 0; i0 < seg.tq; i0 += br, qt++) {
      let work = 0;
      const i1 = Math.min(seg.tq, i0 + br);
      for (let i = i0; i < i1; i++) {
        const [lo, hi] = keyRange(p, i, seg.tq, seg.tk);
        work += Math.max(0, hi - lo + 1);
      }
      items.push({ b, qt, work: work + (i1 - i0) }); // + rows: even an empty row is written
    }
  }
  items.sort((x, y) => y.work - x.work || x.b - y.b || x.qt - y.qt);
  const units = new Int32Array(items.length * p.hkv * FWD_UNIT);
  let o = 0;
  for (const it of items) {
    for (let kvh = 0; kvh < p.hkv; kvh++) {
      units[o++] = it.b;
      units[o++] = kvh;
      units[o++] = it.qt;
    }
  }
  return units;
}
