/**
 * The backward kernel, by recomputation (FlashAttention-2's schedule): nothing of size Tq×Tk is
 * stored; P is rebuilt tile by tile from Q, K and the forward's lse.
 *
 * Phase 1 (DvecJob, units like the forward's): Dvec[i] = Σ_c dO[i,c]·O[i,c] for every query
 * row and head, and the lse phase 2 recomputes P with (float64). By default for f32: O is the
 * given `out` and lse the given one. For f16/bf16 (engine option exactRowStats): O is the
 * float64 output recomputed from P = e^(S − lse) and V, renormalised, and lse is corrected for
 * its float32 rounding (forward.ts's forwardRows, with the row max pinned at the saved lse) —
 * an `out` rounded to 8 or 11 bits, or a P that sums to 1 + |lse|·2⁻²⁴, would leave dP − Dvec
 * with noise exactly where P is nearly one-hot (KERNEL_NOTES.md).
 *
 * Phase 2: one unit is one (batch, kv head) and a contiguous range of its key tiles:
 *
 *   for each key tile (K, V loaded once):
 *     dK, dV ← 0
 *     for each query head h of the group, each query tile that sees this key tile (queryRange):
 *       S  = Q·Kᵀ → logits, −∞ where masked            gemmABtPacked, scoreTile (mask.ts)
 *       P  = e^(S − lse)                                probabilitiesFromLseTile (online-softmax.ts)
 *       dV += Pᵀ·dO                                     gemmAtB (with dropout: (P∘M/(1 − p))ᵀ·dO)
 *       dP = dO·Vᵀ                                      gemmABtPacked
 *       dS = P∘(dP − Dvec) [∘ (1 − tanh²) with softcap] · scale
 *       dK += dSᵀ·Q                                     gemmAtB
 *       dQ += dS·K                                      gemmAB, added into the dQ accumulator
 *     store dK, dV (once per key tile: rounded once)
 *
 * Where a partly masked tile pair holds NaN/±∞ in an operand, the masked* kernels sum over the
 * visible pairs only, so a masked position never turns 0·∞ into NaN.
 *
 * A unit owns its key tiles, so dK and dV have a single writer. dQ rows are shared by every key
 * tile: a unit either adds into the common float32 accumulator (when it is the only unit of its
 * (batch, kv head)) or into its own private one, which the engine sums in a fixed order
 * afterwards — the result does not depend on which thread ran what, or when.
 */
import { keyRange, queryRange, slopeOf } from '../mask.js';
import { probabilitiesFromLseTile } from '../online-softmax.js';
import { lseIndex, segment, type AttentionProblem } from '../problem.js';
import { forwardRows, queryTile } from './forward.js';
import { BWD_UNIT, FWD_UNIT, type BackwardJob, type DvecJob, type Workspace } from './job.js';
import { gemmAB, gemmABtPacked, gemmAtB, maskedAB, maskedAtB, packPanels } from './kernels.js';
import { scoreTile } from './scores.js';
import { addRows, loadRows, storeRows } from './tileio.js';

export function backwardUnit(job: BackwardJob, ws: Workspace, b: number, kvh: number, ktStart: number, ktEnd: number, priv: number): void {
  const p = job.p;
  const { br, bc } = job;
  const d = p.d;
  const dV = p.vDim; // v's head dim: V, dO and dV tiles (q·k's is d)
  ws.ensure(br, bc, d, dV);
  const d4 = ws.d4;
  const dv4 = ws.dv4;
  const bc4 = ws.bc4;
  const seg = segment(p, b);
  if (seg.tq === 0 || seg.tk === 0) return;
  const g = p.h / p.hkv;
  const qStride = p.h * d;
  const kStride = p.hkv * d;
  const oStride = p.h * dV;
  const vStride = p.hkv * dV;
  const dtype = p.dtype;
  const scale = p.scale;

  // Where this unit's dQ goes: rows of the shared accumulator, or its private [tq, g, d] one.
  const dqBuf = priv < 0 ? job.dq : job.dqPrivate[priv];
  const dqRow0 = priv < 0 ? seg.q0 : 0;
  const dqStride = priv < 0 ? qStride : g * d;
  const dqCol0 = priv < 0 ? kvh * g * d : 0;

  const { qRow, qP, oRow, oP, kRow, kP, vRow, vP, s, dp, acc: dqt, dk, dv, lse, l: dvecT } = ws;
  const dcap = p.softcap > 0 ? ws.dcap : undefined;

  // The keys each query row sees (mask.ts), for the whole sequence, once per unit.
  ws.ranges(seg.tq);
  const rowLo = ws.rowLo;
  const rowHi = ws.rowHi;
  for (let i = 0; i < seg.tq; i++) {
    const [lo, hi] = keyRange(p, i, seg.tq, seg.tk);
    rowLo[i] = lo;
    rowHi[i] = hi;
  }

  for (let kt = ktStart; kt < ktEnd; kt++) {
    const j0 = kt * bc;
    const nc = Math.min(bc, seg.tk - j0);
    if (nc <= 0) break;
    const nc4 = (nc + 3) & ~3;
    const kFinite = loadRows(job.k, dtype, seg.k0 + j0, nc, kStride, kvh * d, d, d4, nc4, kRow);
    packPanels(kRow, nc4, d4, kP);
    loadRows(job.v, dtype, seg.k0 + j0, nc, vStride, kvh * dV, dV, dv4, nc4, vRow);
    packPanels(vRow, nc4, dv4, vP);
    dk.fill(0, 0, nc4 * d4);
    dv.fill(0, 0, nc4 * dv4);
    // Queries that see some key of this tile (mask.ts, monotone in j).
    const [qlo] = queryRange(p, j0, seg.tq, seg.tk);
    const [, qhi] = queryRange(p, j0 + nc - 1, seg.tq, seg.tk);
    if (qlo <= qhi) {
      const qt0 = Math.floor(qlo / br);
      const qt1 = Math.floor(qhi / br);
      for (let hh = 0; hh < g; hh++) {
        const h = kvh * g + hh;
        const slope = slopeOf(p, b, h);
        for (let qt = qt0; qt <= qt1; qt++) {
          const i0 = qt * br;
          const nr = Math.min(br, seg.tq - i0);
          const nr4 = (nr + 3) & ~3;
          const qFinite = loadRows(job.q, dtype, seg.q0 + i0, nr, qStride, h * d, d, d4, nr4, qRow);
          packPanels(qRow, nr4, d4, qP);
          const dOFinite = loadRows(job.dOut, dtype, seg.q0 + i0, nr, oStride, h * dV, dV, dv4, nr4, oRow);
          packPanels(oRow, nr4, dv4, oP);
          for (let r = 0; r < nr; r++) {
            const x = lseIndex(p, b, h, i0 + r);
            lse[r] = job.lse64[x];
            dvecT[r] = job.dvec[x];
          }

          // P = exp(logit(Q·Kᵀ) − lse)
          gemmABtPacked(qP, kP, s, nr4, nc4, d4, bc4);
          const full = scoreTile(p, s, bc4, nr, nc, i0, j0, seg.tq, seg.tk, slope, rowLo, rowHi, i0, dcap);
          probabilitiesFromLseTile(s, bc4, nr, nc, lse);
          // padding columns (nc..nc4) of P must be 0: they are summed over by Pᵀ·dO's rows
          // that we drop, but keep them clean so nothing non-finite lingers.
          if (nc4 !== nc) for (let r = 0; r < nr; r++) s.fill(0, r * bc4 + nc, r * bc4 + nc4);
          // dropout: out was (P∘M/(1 − p))·V, so dV takes P∘M/(1 − p) and dS masks dP the same way
          const mk = p.dropout ? ws.dropoutTile(p.dropout, b * p.h + h, i0, nr, j0, nc, bc4) : undefined;
          let pv = s;
          if (mk) {
            pv = ws.pd;
            pv.fill(0, 0, nr4 * bc4);
            for (let r = 0; r < nr; r++) for (let c = 0, o = r * bc4; c < nc; c++) pv[o + c] = s[o + c] * mk[o + c];
          }
          // dV += Pᵀ·dO
          if (full || dOFinite) gemmAtB(pv, bc4, nr, oRow, nc4, dv4, dv);
          else maskedAtB(pv, bc4, nr, oRow, nc, dv4, dv, rowLo, rowHi, i0, j0);
          // dP = dO·Vᵀ, then dS = P∘(dP − Dvec)∘softcap' · scale (0 where masked)
          gemmABtPacked(oP, vP, dp, nr4, nc4, dv4, bc4);
          for (let r = 0; r < nr; r++) {
            const base = r * bc4;
            const dvr = dvecT[r];
            const lo = Math.max(0, rowLo[i0 + r] - j0);
            const hi = Math.min(nc - 1, rowHi[i0 + r] - j0);
            for (let c = 0; c < lo && c < nc4; c++) dp[base + c] = 0;
            if (mk) for (let c = lo; c <= hi; c++) dp[base + c] *= mk[base + c];
            if (dcap) for (let c = lo; c <= hi; c++) dp[base + c] = s[base + c] * (dp[base + c] - dvr) * dcap[base + c] * scale;
            else for (let c = lo; c <= hi; c++) dp[base + c] = s[base + c] * (dp[base + c] - dvr) * scale;
            for (let c = Math.max(lo, hi + 1); c < nc4; c++) dp[base + c] = 0;
          }
          if (nr4 !== nr) dp.fill(0, nr * bc4, nr4 * bc4);
          // dK += dSᵀ·Q (scale is in dS)
          if (full || qFinite) gemmAtB(dp, bc4, nr, qRow, nc4, d4, dk);
          else maskedAtB(dp, bc4, nr, qRow, nc, d4, dk, rowLo, rowHi, i0, j0);
          // dQ += dS·K
          dqt.fill(0, 0, nr4 * d4);
          if (full || kFinite) gemmAB(dp, bc4, nr4, kRow, nc, d4, dqt);
          else maskedAB(dp, bc4, nr, kRow, nc, d4, dqt, rowLo, rowHi, i0, j0);
          addRows(dqBuf, dqRow0 + i0, nr, dqStride, dqCol0 + hh * d, d, d4, dqt);
        }
      }
    }
    storeRows(job.dk, dtype, seg.k0 + j0, nc, kStride, kvh * d, d, d4, dk);
    storeRows(job.dv, dtype, seg.k0 + j0, nc, vStride, kvh * dV, dV, dv4, dv);
  }
}

/** Runs backward units from the shared counter until none is left. */
export function runBackward(job: BackwardJob, ws: Workspace): void {
  const n = job.units.length / BWD_UNIT;
  for (;;) {
    const u = Atomics.add(job.counter, 0, 1);
    if (u >= n) return;
    const o = u * BWD_UNIT;
    const U = job.units;
    backwardUnit(job, ws, U[o], U[o + 1], U[o + 2], U[o + 3], U[o + 4]);
  }
}

/**
 * Phase 1 for one (batch, kv head, query tile): Dvec of its rows, for each query head of the
 * group, into job.dvec (lse layout), and the lse phase 2 uses into job.lse64.
 */
export function dvecUnit(job: DvecJob, ws: Workspace, b: number, kvh: number, qt: number): void {
  const t = queryTile(job, ws, b, qt);
  if (!t) return;
  const p = job.p;
  const dv = p.vDim; // out and dO rows have v's head dim
  const g = p.h / p.hkv;
  const oStride = p.h * dv;
  const dtype = p.dtype;
  const { seg, i0, nr, nr4 } = t;
  const { dv4, oRow, acc, lse } = ws;
  for (let hh = 0; hh < g; hh++) {
    const h = kvh * g + hh;
    if (job.exact) {
      // O (float64) and the corrected lse: the forward's rows with the max pinned at the saved lse
      forwardRows(job, ws, t, b, kvh, h, job.lse);
    } else {
      loadRows(job.out, dtype, seg.q0 + i0, nr, oStride, h * dv, dv, dv4, nr4, acc);
      for (let r = 0; r < nr; r++) lse[r] = job.lse[lseIndex(p, b, h, i0 + r)];
    }
    loadRows(job.dOut, dtype, seg.q0 + i0, nr, oStride, h * dv, dv, dv4, nr4, oRow);
    for (let r = 0; r < nr; r++) {
      let sum = 0;
      const o = r * dv4;
      for (let c = 0; c < dv; c++) sum += acc[o + c] * oRow[o + c];
      const x = lseIndex(p, b, h, i0 + r);
      job.dvec[x] = sum;
      job.lse64[x] = lse[r];
    }
  }
}

/** Runs phase-1 units from the shared counter until none is left. */
export function runDvec(job: DvecJob, ws: Workspace): void {
  const n = job.units.length / FWD_UNIT;
  for (;;) {
    const u = Atomics.add(job.counter, 0, 1);
    if (u >= n) return;
    const o = u * FWD_UNIT;
    dvecUnit(job, ws, job.units[o], job.units[o + 1], job.units[o + 2]);
  }
}

export interface BackwardPlan {
  readonly units: Int32Array;
  /** Element counts of the private dQ accumulators the units ask for. */
  readonly privateSizes: readonly number[];
  /** For each private accumulator, the (batch, kv head) it reduces into, in reduction order. */
  readonly privateOwners: readonly { readonly b: number; readonly kvh: number }[];
}

/** Visible (query, key) pairs of each key tile of sequence b (same for every head). */
function keyTileWork(p: AttentionProblem, b: number, bc: number): number[] {
  const seg = segment(p, b);
  const work: number[] = [];
  for (let j0 = 0; j0 < seg.tk; j0 += bc) {
    let w = 0;
    const j1 = Math.min(seg.tk, j0 + bc);
    for (let j = j0; j < j1; j++) {
      const [lo, hi] = queryRange(p, j, seg.tq, seg.tk);
      w += Math.max(0, hi - lo + 1);
    }
    work.push(w + (j1 - j0)); // + keys: every key row is written
  }
  return work;
}

/**
 * The backward units. With at least as many (batch, kv head) groups as threads, one unit per
 * group (heaviest first) and no private accumulators. Otherwise each group's key tiles are
 * split into `ceil(threads / groups)` contiguous slices of about equal work; the first slice
 * adds into the shared dQ, each further slice gets a private accumulator.
 */
export function planBackward(p: AttentionProblem, bc: number, threads: number): BackwardPlan {
  const groups: { b: number; kvh: number; work: number[]; total: number }[] = [];
  for (let b = 0; b < p.batch; b++) {
    const seg = segment(p, b);
    if (seg.tq === 0 || seg.tk === 0) continue;
    const work = keyTileWork(p, b, bc);
    const total = work.reduce((a, x) => a + x, 0);
    for (let kvh = 0; kvh < p.hkv; kvh++) groups.push({ b, kvh, work, total });
  }
  const units: number[] = [];
  const privateSizes: number[] = [];
  const privateOwners: { b: number; kvh: number }[] = [];
  const g = p.h / p.hkv;
  if (groups.length >= threads || threads <= 1) {
    groups.sort((x, y) => y.total - x.total || x.b - y.b || x.kvh - y.kvh);
    for (const gr of groups) units.push(gr.b, gr.kvh, 0, gr.work.length, -1);
    return { units: Int32Array.from(units), privateSizes, privateOwners };
  }
  const slices = Math.ceil(threads / groups.length);
  for (const gr of groups) {
    const n = gr.work.length;
    const parts = Math.min(slices, n);
    // contiguous cuts where the cumulative work crosses total·s/parts; every slice non-empty
    const cum = [0];
    for (const w of gr.work) cum.push(cum[cum.length - 1] + w);
    let start = 0;
    for (let s = 0; s < parts; s++) {
      let end = s === parts - 1 ? n : start + 1;
      if (s < parts - 1) {
        const target = (gr.total * (s + 1)) / parts;
        while (end < n - (parts - 1 - s) && cum[end] < target) end++;
      }
      let priv = -1;
      if (s > 0) {
        priv = privateSizes.length;
        privateSizes.push(segment(p, gr.b).tq * g * p.d);
        privateOwners.push({ b: gr.b, kvh: gr.kvh });
      }
      units.push(gr.b, gr.kvh, start, end, priv);
      start = end;
    }
  }
  return { units: Int32Array.from(units), privateSizes, privateOwners };
}

/** dq += private accumulators, in plan order (a fixed order: deterministic). */
export function reducePrivate(p: AttentionProblem, dq: Float32Array, plan: BackwardPlan, priv: readonly Float32Array[]): void {
  const g = p.h / p.hkv;
  const d = p.d;
  const qStride = p.h * d;
  for (let x = 0; x < priv.length; x++) {
    const { b, kvh } = plan.privateOwners[x];
    const seg = segment(p, b);
    const src = priv[x];
    for (let i = 0; i < seg.tq; i++) {
      const o = (seg.q0 + i) * qStride + kvh * g * d;
      const s = i * g * d;
      for (let c = 0; c < g * d; c++) dq[o + c] += src[s + c];
    }
  }
}
