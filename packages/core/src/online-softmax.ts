/**
 * Online softmax: the one idea that lets attention run tile by tile.
 *
 * Softmax attention for one query row is
 *
 *     out = Σ_j e^(s_j − M) · v_j  /  Σ_j e^(s_j − M),      lse = M + log Σ_j e^(s_j − M)
 *
 * where s_j are the row's scores (logits) and M = max_j s_j keeps the exponentials ≤ 1. Written
 * like that it needs every score before the first exponential: the T×T score matrix. The online
 * form (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022) keeps three running values
 * per row instead, and reads the scores one block at a time:
 *
 *     m    the largest score seen so far                       (starts at −∞)
 *     l    Σ e^(s_j − m) over the scores seen so far           (starts at 0)
 *     acc  Σ e^(s_j − m) · v_j, a vector of length D           (starts at 0)
 *
 * A new block of scores s_j (with their value rows v_j) updates the state:
 *
 *     m'   = max(m, max_j s_j)
 *     α    = e^(m − m')          the earlier terms were relative to m, now they must be to m'
 *     l'   = α·l   + Σ_j e^(s_j − m')
 *     acc' = α·acc + Σ_j e^(s_j − m') · v_j
 *
 * and after the last block the row is finalized: out = acc / l, lse = m + log l.
 * Example (see explainOnlineSoftmax): scores [1, 2, 3] give m = 3, l = e^−2 + e^−1 + 1; a later
 * block containing 4 raises the max to 4, so the earlier l and acc are multiplied by e^(3−4).
 *
 * Two partial states of the same row — say, from two halves of the keys computed on different
 * workers (split-KV) or devices (ring attention) — combine the same way: mergeStates.
 *
 * Conventions shared with the rest of the library (DESIGN.md):
 * - a masked score is −Infinity; it contributes nothing;
 * - a row that sees no key (every score −∞, or no score at all) finalizes to out = 0 and
 *   lse = −Infinity, never NaN: wherever m stays −∞ we avoid computing (−∞) − (−∞);
 * - NaN in a score propagates to the row's out and lse (Math.max(NaN, x) is NaN, and so is
 *   everything computed from it); it is never replaced.
 *
 * The file has two layers. The first (RowState, updateRow, mergeStates, finalizeRow) is the
 * readable per-row version. The second (the *Tile functions) is the same arithmetic over a tile
 * of rows kept in flat Float64Arrays, without allocation, which the CPU engine's kernels call;
 * the matrix products (scores = Q·Kᵀ, acc += P·V) stay in the kernels. All arithmetic is float64.
 */

// ---------------------------------------------------------------------------------------------
// The two scalar rules everything else is built from.

/**
 * The factor e^(mOld − mNew) that re-bases terms computed relative to the old max onto the new
 * one. When the max did not change (including both −∞: nothing seen yet) the factor is exactly 1
 * — this is the guard that avoids (−∞) − (−∞) = NaN. When mOld is −∞ and mNew finite it is 0.
 */
export function rescaleFactor(mOld: number, mNew: number): number {
  return mOld === mNew ? 1 : Math.exp(mOld - mNew);
}

/**
 * e^(s − m) for a score s under the running max m, with the empty-row rule: when m is −∞ the
 * row has seen nothing but masked scores, every s is −∞ as well, and the weight is 0 (not NaN).
 */
export function weight(s: number, m: number): number {
  return m === -Infinity ? 0 : Math.exp(s - m);
}

/**
 * Probability of a score recomputed from the row's final logsumexp, as the backward pass does:
 * P = e^(s − lse). A row that saw no key has lse = −∞ and every P is 0.
 */
export function probabilityFromLse(s: number, lse: number): number {
  return lse === -Infinity ? 0 : Math.exp(s - lse);
}

// ---------------------------------------------------------------------------------------------
// Per-row state: the readable version.

/** The running state of one query row. */
export interface RowState {
  /** Largest score seen so far; −Infinity before any (unmasked) score. */
  m: number;
  /** Σ e^(s_j − m) over the scores seen so far. */
  l: number;
  /** Σ e^(s_j − m) · v_j, length D. */
  readonly acc: Float64Array;
}

/** A row that has seen nothing yet: m = −∞, l = 0, acc = 0. */
export function createRowState(d: number): RowState {
  return { m: -Infinity, l: 0, acc: new Float64Array(d) };
}

/** A copy of a state (the trace and tests keep snapshots). */
export function cloneRowState(s: RowState): RowState {
  return { m: s.m, l: s.l, acc: Float64Array.from(s.acc) };
}

/**
 * Reads one block of scores and their value rows into the state, in place.
 * `values[j]` is v_j (length D) for score `scores[j]`; a masked score is −Infinity.
 */
export function updateRow(state: RowState, scores: ArrayLike<number>, values: ArrayLike<ArrayLike<number>>): RowState {
  const d = state.acc.length;
  // 1. the new max
  let mNew = state.m;
  for (let j = 0; j < scores.length; j++) mNew = Math.max(mNew, scores[j]);
  // 2. re-base what we had onto it
  const alpha = rescaleFactor(state.m, mNew);
  let l = state.l * alpha;
  const acc = state.acc;
  for (let c = 0; c < d; c++) acc[c] *= alpha;
  // 3. add the block's terms
  for (let j = 0; j < scores.length; j++) {
    const w = weight(scores[j], mNew);
    if (w === 0) continue; // masked: contributes nothing (and 0·Inf in v must not make NaN)
    l += w;
    const v = values[j];
    for (let c = 0; c < d; c++) acc[c] += w * v[c];
  }
  state.m = mNew;
  state.l = l;
  return state;
}

/**
 * Combines two partial states of the same row, each over a disjoint set of keys, into the state
 * over their union. Commutative and associative (up to rounding); an empty state (m = −∞) is the
 * identity. Returns a new state.
 */
export function mergeStates(a: RowState, b: RowState): RowState {
  const d = a.acc.length;
  const m = Math.max(a.m, b.m);
  const out: RowState = { m, l: 0, acc: new Float64Array(d) };
  if (m === -Infinity) return out; // both empty
  const fa = rescaleFactor(a.m, m); // 0 when a is empty, 1 when a holds the max
  const fb = rescaleFactor(b.m, m);
  out.l = a.l * fa + b.l * fb;
  for (let c = 0; c < d; c++) out.acc[c] = a.acc[c] * fa + b.acc[c] * fb;
  return out;
}

/** The row's result: out = acc / l and lse = m + log l; out 0 and lse −∞ for an empty row. */
export function finalizeRow(state: RowState): { out: Float64Array; lse: number } {
  const d = state.acc.length;
  const out = new Float64Array(d);
  if (state.m === -Infinity) return { out, lse: -Infinity };
  const inv = 1 / state.l;
  for (let c = 0; c < d; c++) out[c] = state.acc[c] * inv;
  return { out, lse: state.m + Math.log(state.l) };
}

/** Softmax attention of one row computed in a single block: the definition the tests compare to. */
export function attendRow(scores: ArrayLike<number>, values: ArrayLike<ArrayLike<number>>, d: number): { out: Float64Array; lse: number } {
  return finalizeRow(updateRow(createRowState(d), scores, values));
}

// ---------------------------------------------------------------------------------------------
// A trace, for teaching: what happens to m, l and acc block by block.

export interface OnlineSoftmaxStep {
  /** 0-based block number. */
  readonly block: number;
  readonly scores: readonly number[];
  readonly mBefore: number;
  readonly mAfter: number;
  /** e^(mBefore − mAfter): what the earlier l and acc were multiplied by. */
  readonly rescale: number;
  readonly lBefore: number;
  /** l after re-basing, before adding this block: lBefore · rescale. */
  readonly lRescaled: number;
  readonly lAfter: number;
  readonly accBefore: readonly number[];
  readonly accAfter: readonly number[];
  /** A sentence saying what happened. */
  readonly text: string;
}

export interface OnlineSoftmaxTrace {
  readonly steps: readonly OnlineSoftmaxStep[];
  readonly out: readonly number[];
  readonly lse: number;
  /** The same row computed in one block: equal to out/lse up to rounding. */
  readonly direct: { readonly out: readonly number[]; readonly lse: number };
  /** Lines ready to print. */
  readonly lines: readonly string[];
}

function fmt(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '∞' : '−∞';
  if (Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3)) return x.toExponential(4);
  return x.toFixed(4).replace(/\.?0+$/, '') || '0';
}
const fmtV = (v: ArrayLike<number>): string => `[${Array.from(v, fmt).join(', ')}]`;

/**
 * Runs the online softmax over `blocks` of scores and explains every step. `values` gives the
 * value row of each score in order (all blocks concatenated); by default each score's value is
 * the one-element row [j + 1], so acc is a readable weighted sum. The seed example:
 *
 *     explainOnlineSoftmax([[1, 2, 3], [4]]).lines
 *
 * shows the second block raising the max from 3 to 4 and the earlier l and acc being
 * multiplied by e^(3−4) ≈ 0.3679.
 */
export function explainOnlineSoftmax(blocks: readonly (readonly number[])[], values?: readonly (readonly number[])[]): OnlineSoftmaxTrace {
  const all = blocks.flat();
  const vals = values ?? all.map((_, j) => [j + 1]);
  if (vals.length !== all.length) throw new RangeError(`explainOnlineSoftmax: ${all.length} scores but ${vals.length} value rows`);
  const d = vals.length > 0 ? vals[0].length : 1;
  const state = createRowState(d);
  const steps: OnlineSoftmaxStep[] = [];
  const lines: string[] = [];
  lines.push(`online softmax over ${blocks.length} block(s) of scores; v_j = ${values ? 'given' : '[j + 1]'}`);
  let offset = 0;
  blocks.forEach((scores, block) => {
    const before = cloneRowState(state);
    let blockMax = -Infinity;
    for (const s of scores) blockMax = Math.max(blockMax, s);
    const mAfter = Math.max(before.m, blockMax);
    const rescale = rescaleFactor(before.m, mAfter);
    updateRow(state, scores, vals.slice(offset, offset + scores.length));
    offset += scores.length;
    let text: string;
    if (before.m === -Infinity) text = `block ${block}: first scores seen; m = ${fmt(mAfter)}, nothing earlier to rescale`;
    else if (mAfter > before.m) text = `block ${block}: max rises ${fmt(before.m)} → ${fmt(mAfter)}, so the earlier l and acc are multiplied by e^(${fmt(before.m)}−${fmt(mAfter)}) = ${fmt(rescale)}`;
    else text = `block ${block}: max stays ${fmt(before.m)}; the new terms are added relative to it (rescale factor 1)`;
    const step: OnlineSoftmaxStep = {
      block,
      scores: [...scores],
      mBefore: before.m,
      mAfter,
      rescale,
      lBefore: before.l,
      lRescaled: before.l * rescale,
      lAfter: state.l,
      accBefore: Array.from(before.acc),
      accAfter: Array.from(state.acc),
      text,
    };
    steps.push(step);
    lines.push(text);
    lines.push(`  scores ${fmtV(scores)}: m ${fmt(step.mBefore)} → ${fmt(step.mAfter)}; l ${fmt(step.lBefore)} → ${fmt(step.lRescaled)} (rescaled) → ${fmt(step.lAfter)}; acc ${fmtV(step.accBefore)} → ${fmtV(step.accAfter)}`);
  });
  const fin = finalizeRow(state);
  const direct = attendRow(all, vals, d);
  lines.push(`finalize: out = acc / l = ${fmtV(fin.out)}, lse = m + log l = ${fmt(fin.lse)}`);
  lines.push(`one block over all scores gives out = ${fmtV(direct.out)}, lse = ${fmt(direct.lse)}`);
  return { steps, out: Array.from(fin.out), lse: fin.lse, direct: { out: Array.from(direct.out), lse: direct.lse }, lines };
}

// ---------------------------------------------------------------------------------------------
// Tile-level API: the same rules over `rows` rows at once, on flat arrays, no allocation.
// Row r's state is m[r], l[r] and acc[r*d .. r*d+d). Score tiles are row-major with stride ld.

/** Resets rows [0, rows) of a tile state to empty (m = −∞, l = 0, acc = 0). */
export function resetTileState(m: Float64Array, l: Float64Array, acc: Float64Array, rows: number, d: number): void {
  for (let r = 0; r < rows; r++) {
    m[r] = -Infinity;
    l[r] = 0;
  }
  acc.fill(0, 0, rows * d);
}

/**
 * Attention sinks (gpt-oss; DESIGN.md): a logit s in every row's denominator that carries no
 * value. Read it first, as a key whose value row is 0: the state becomes m = s, l = e^(s − s) = 1,
 * acc = 0, and every later block rescales it like any other term. After the last block
 * out = acc / l and lse = m + log l include the sink; a row that sees no key finalizes to out 0
 * and lse = s (l = 1, m = s), never −∞. Call after resetTileState.
 */
export function seedSinkTile(m: Float64Array, l: Float64Array, rows: number, sink: number): void {
  for (let r = 0; r < rows; r++) {
    m[r] = sink;
    l[r] = 1;
  }
}

/**
 * The softmax half of a block update for a tile of rows (updateRow without the values).
 * For each row r: raises m[r] to the max of the row's `cols` scores in s, multiplies l[r] and
 * acc[r] by e^(m − m'), overwrites the scores with their weights e^(s − m') and adds them to l.
 * The caller then adds weights·V to acc (the matrix product), which completes updateRow.
 */
export function softmaxTileUpdate(s: Float64Array, ld: number, rows: number, cols: number, m: Float64Array, l: Float64Array, acc: Float64Array, d: number): void {
  for (let r = 0; r < rows; r++) {
    const base = r * ld;
    const mOld = m[r];
    let mNew = mOld;
    for (let c = 0; c < cols; c++) mNew = Math.max(mNew, s[base + c]);
    if (mNew !== mOld) {
      // also covers mNew = NaN, which then spreads to l and acc as it should
      const alpha = Math.exp(mOld - mNew);
      l[r] *= alpha;
      const a0 = r * d;
      for (let c = 0; c < d; c++) acc[a0 + c] *= alpha;
    }
    if (mNew === -Infinity) {
      for (let c = 0; c < cols; c++) s[base + c] = 0; // nothing visible yet: every weight is 0
      continue;
    }
    let sum = 0;
    for (let c = 0; c < cols; c++) {
      const w = Math.exp(s[base + c] - mNew);
      s[base + c] = w;
      sum += w;
    }
    m[r] = mNew;
    l[r] += sum;
  }
}

/**
 * Merges tile state b into tile state a (rows [0, rows)), in place: mergeStates row by row.
 * Combining split-KV partial results in a fixed order makes the result deterministic.
 */
export function mergeTileStates(mA: Float64Array, lA: Float64Array, accA: Float64Array, mB: Float64Array, lB: Float64Array, accB: Float64Array, rows: number, d: number): void {
  for (let r = 0; r < rows; r++) {
    const m = Math.max(mA[r], mB[r]);
    if (m === -Infinity) continue; // both empty: a stays empty
    const fa = rescaleFactor(mA[r], m);
    const fb = rescaleFactor(mB[r], m);
    lA[r] = lA[r] * fa + lB[r] * fb;
    const o = r * d;
    for (let c = 0; c < d; c++) accA[o + c] = accA[o + c] * fa + accB[o + c] * fb;
    mA[r] = m;
  }
}

/**
 * Finalizes rows [0, rows): acc[r] becomes out = acc / l in place (0 for an empty row) and
 * lseOut[r] = m + log l (−∞ for an empty row).
 */
export function finalizeTile(m: Float64Array, l: Float64Array, acc: Float64Array, rows: number, d: number, lseOut: Float64Array): void {
  for (let r = 0; r < rows; r++) {
    const o = r * d;
    if (m[r] === -Infinity) {
      for (let c = 0; c < d; c++) acc[o + c] = 0;
      lseOut[r] = -Infinity;
      continue;
    }
    const inv = 1 / l[r];
    for (let c = 0; c < d; c++) acc[o + c] *= inv;
    lseOut[r] = m[r] + Math.log(l[r]);
  }
}

/**
 * The backward pass's recomputation for a tile: overwrites scores s with P = e^(s − lse[r])
 * (0 for rows whose lse is −∞, i.e. rows that saw no key).
 *
 * With `rowSums`, also adds each row's Σ P to rowSums[r]. That turns the backward's pre-pass
 * into an online-softmax state whose "max" is pinned at the saved lse: m = lse, l = Σ P,
 * acc = Σ P·v. Had lse been stored exactly, l would be 1; it was rounded to float32, so l is
 * 1 + O(|lse|·2⁻²⁴), and finalizeTile(m = lse, l, acc) returns both the output and the
 * corrected lse + log l — P recomputed from that sums to 1 again.
 */
export function probabilitiesFromLseTile(s: Float64Array, ld: number, rows: number, cols: number, lse: Float64Array, rowSums?: Float64Array): void {
  for (let r = 0; r < rows; r++) {
    const base = r * ld;
    const L = lse[r];
    if (L === -Infinity) {
      for (let c = 0; c < cols; c++) s[base + c] = 0;
      continue;
    }
    let sum = 0;
    for (let c = 0; c < cols; c++) {
      const w = Math.exp(s[base + c] - L);
      s[base + c] = w;
      sum += w;
    }
    if (rowSums) rowSums[r] += sum;
  }
}
