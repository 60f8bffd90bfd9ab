/**
 * The forward kernel: one unit is one (batch, kv head, query tile); it computes the query
 * tile's rows for every query head that reads this kv head, visiting only the key tiles the
 * mask leaves visible, with the online softmax of online-softmax.ts.
 *
 *   for each query head h of the group:
 *     load Q tile (decoded to float64, packed for the micro-kernel)
 *     state ← empty (m = −∞, l = 0, acc = 0)
 *     for each key tile in tileKeyRange:            (causal / window tiles outside are skipped)
 *       S   = Q·Kᵀ                                  gemmABtPacked
 *       S   = logit(S), −∞ where masked             scoreTile (mask.ts)
 *       S   = e^(S − m'), rescale l and acc         softmaxTileUpdate (online-softmax.ts)
 *       acc += S·V                                  gemmAB (maskedAB: see kernels.ts)
 *     out = acc / l, lse = m + log l                finalizeTile (online-softmax.ts)
 */
import { keyRange, slopeOf, tileKeyRange } from '../mask.js';
import { finalizeTile, resetTileState, softmaxTileUpdate } from '../online-softmax.js';
import { lseIndex, segment, type AttentionProblem } from '../problem.js';
import { FWD_UNIT, type ForwardJob, type Workspace } from './job.js';
import { gemmAB, gemmABtPacked, maskedAB, packPanels } from './kernels.js';
import { scoreTile } from './scores.js';
import { loadRows, storeRows } from './tileio.js';

export function forwardUnit(job: ForwardJob, ws: Workspace, b: number, kvh: number, qt: number): void {
  const p = job.p;
  const { br, bc } = job;
  const d = p.d;
  ws.ensure(br, bc, d);
  const d4 = ws.d4;
  const bc4 = ws.bc4;
  const seg = segment(p, b);
  const i0 = qt * br;
  const nr = Math.min(br, seg.tq - i0);
  if (nr <= 0) return;
  const nr4 = (nr + 3) & ~3;
  const g = p.h / p.hkv;
  const qStride = p.h * d;
  const kStride = p.hkv * d;
  const dtype = p.dtype;

  // The keys each row sees (mask.ts), once per unit.
  ws.ranges(nr);
  const rowLo = ws.rowLo;
  const rowHi = ws.rowHi;
  for (let r = 0; r < nr; r++) {
    const [lo, hi] = keyRange(p, i0 + r, seg.tq, seg.tk);
    rowLo[r] = lo;
    rowHi[r] = hi;
  }
  const [tlo, thi] = tileKeyRange(p, i0, i0 + nr, seg.tq, seg.tk);
  const kt0 = Math.floor(tlo / bc);
  const kt1 = tlo <= thi ? Math.floor(thi / bc) : kt0 - 1;

  const { qRow, qP, kRow, kP, vRow, s, m, l, acc, lse } = ws;
  for (let hh = 0; hh < g; hh++) {
    const h = kvh * g + hh;
    const slope = slopeOf(p, b, h);
    loadRows(job.q, dtype, seg.q0 + i0, nr, qStride, h * d, d, d4, nr4, qRow);
    packPanels(qRow, nr4, d4, qP);
    resetTileState(m, l, acc, nr4, d4);
    for (let kt = kt0; kt <= kt1; kt++) {
      const j0 = kt * bc;
      const nc = Math.min(bc, seg.tk - j0);
      const nc4 = (nc + 3) & ~3;
      loadRows(job.k, dtype, seg.k0 + j0, nc, kStride, kvh * d, d, d4, nc4, kRow);
      packPanels(kRow, nc4, d4, kP);
      const vFinite = loadRows(job.v, dtype, seg.k0 + j0, nc, kStride, kvh * d, d, d4, nc4, vRow);
      gemmABtPacked(qP, kP, s, nr4, nc4, d4, bc4);
      const full = scoreTile(p, s, bc4, nr, nc, i0, j0, seg.tq, seg.tk, slope, rowLo, rowHi, 0, undefined);
      softmaxTileUpdate(s, bc4, nr, nc, m, l, acc, d4);
      if (full || vFinite) gemmAB(s, bc4, nr4, vRow, nc, d4, acc);
      else maskedAB(s, bc4, nr, vRow, nc, d4, acc, rowLo, rowHi, 0, j0);
    }
    finalizeTile(m, l, acc, nr, d4, lse);
    storeRows(job.out, dtype, seg.q0 + i0, nr, qStride, h * d, d, d4, acc);
    for (let r = 0; r < nr; r++) job.lse[lseIndex(p, b, h, i0 + r)] = lse[r];
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
