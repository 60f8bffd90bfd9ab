/**
 * The online softmax, tile by tile, animated: a 4 × 12 score matrix read in tiles of 2 query
 * rows × 4 keys, in FlashAttention's order (each query tile sweeps the key tiles). Every row keeps
 * m (running max), l (running sum of e^(s − m)) and acc (running Σ e^(s − m)·v); when a tile
 * raises a row's max, the row's l and acc are rescaled by e^(m_old − m_new). The arithmetic is
 * @fa/core's online-softmax module (createRowState, updateRow, finalizeRow, attendRow).
 */
import { attendRow, cloneRowState, createRowState, finalizeRow, rescaleFactor, updateRow, type RowState } from '@fa/core';
import { esc } from '../src/story/charts.js';

/** Row 0 begins like the seed example: [1, 2, 3], and a later tile brings a 4. */
export const SCORES: readonly (readonly number[])[] = [
  [1, 2, 3, 0, 4, 1, 0, 2, 0.5, 1, 3, 2],
  [2, 0, 1, 1, 0, 1, 2, 1, 5, 0, 1, 2],
  [0, 1, 0, 2, 1, 0, 1, 3, 1, 2, 0, 1],
  [3, 3, 1, 0, 2, 2, 1, 0, 1, 0, 2, 1],
];
const BR = 2;
const BC = 4;
const ROWS = SCORES.length;
const COLS = SCORES[0].length;
const V = Array.from({ length: COLS }, (_, j) => [j + 1]);

export interface Step {
  readonly qTile: number;
  readonly kTile: number;
  /** States of every row after this step. */
  readonly states: readonly RowState[];
  /** Per row of the tile: max before and after, rescale factor. */
  readonly changes: readonly { readonly row: number; readonly mBefore: number; readonly mAfter: number; readonly rescale: number }[];
}

export function buildSteps(): Step[] {
  const states = Array.from({ length: ROWS }, () => createRowState(1));
  const steps: Step[] = [];
  for (let qt = 0; qt < ROWS / BR; qt++) {
    for (let kt = 0; kt < COLS / BC; kt++) {
      const changes: { row: number; mBefore: number; mAfter: number; rescale: number }[] = [];
      for (let r = qt * BR; r < (qt + 1) * BR; r++) {
        const before = states[r].m;
        const block = SCORES[r].slice(kt * BC, (kt + 1) * BC);
        updateRow(states[r], block, V.slice(kt * BC, (kt + 1) * BC));
        changes.push({ row: r, mBefore: before, mAfter: states[r].m, rescale: rescaleFactor(before, states[r].m) });
      }
      steps.push({ qTile: qt, kTile: kt, states: states.map(cloneRowState), changes });
    }
  }
  return steps;
}

const f = (x: number, d = 3): string => (x === -Infinity ? '−∞' : Number.isInteger(x) ? String(x) : x.toFixed(d));

/** SVG of the matrix and the row states after step `k` (−1: before the first step). */
export function renderStep(steps: readonly Step[], k: number): { svg: string; caption: string } {
  const cell = 34;
  const x0 = 40;
  const y0 = 34;
  const panelX = x0 + COLS * cell + 24;
  const W = panelX + 320;
  const H = y0 + ROWS * cell + 40;
  const cur = k >= 0 ? steps[k] : undefined;
  const seen = (r: number, c: number): boolean => {
    const qt = Math.floor(r / BR);
    const kt = Math.floor(c / BC);
    return steps.slice(0, k + 1).some((s) => s.qTile === qt && s.kTile === kt);
  };
  const p: string[] = [];
  p.push(`<svg class="walk" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" font-family="system-ui, sans-serif" font-size="13" role="img" aria-label="online softmax, tile by tile">`);
  p.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  for (let c = 0; c < COLS; c++) p.push(`<text x="${x0 + c * cell + cell / 2}" y="${y0 - 8}" text-anchor="middle" fill="#777" font-size="11">k${c}</text>`);
  for (let r = 0; r < ROWS; r++) {
    p.push(`<text x="${x0 - 8}" y="${y0 + r * cell + cell / 2 + 4}" text-anchor="end" fill="#777" font-size="11">q${r}</text>`);
    for (let c = 0; c < COLS; c++) {
      const inCur = cur && Math.floor(r / BR) === cur.qTile && Math.floor(c / BC) === cur.kTile;
      const fill = inCur ? '#ffe08a' : seen(r, c) ? '#d6e6f5' : '#f3f3f3';
      p.push(`<rect x="${x0 + c * cell}" y="${y0 + r * cell}" width="${cell}" height="${cell}" fill="${fill}" stroke="#fff"/>`);
      p.push(`<text x="${x0 + c * cell + cell / 2}" y="${y0 + r * cell + cell / 2 + 4}" text-anchor="middle">${f(SCORES[r][c], 1)}</text>`);
    }
  }
  for (let qt = 0; qt < ROWS / BR; qt++) {
    for (let kt = 0; kt < COLS / BC; kt++) {
      const active = cur && cur.qTile === qt && cur.kTile === kt;
      p.push(`<rect x="${x0 + kt * BC * cell}" y="${y0 + qt * BR * cell}" width="${BC * cell}" height="${BR * cell}" fill="none" stroke="${active ? '#d08b00' : '#9aa'}" stroke-width="${active ? 3 : 1}"/>`);
    }
  }
  // row states: m, l and out = acc / l of every row, in three columns
  const cols = [panelX, panelX + 90, panelX + 210];
  ['m (max)', 'l = Σ e^(s−m)', 'out = acc / l'].forEach((h, i) => p.push(`<text x="${cols[i]}" y="${y0 - 8}" fill="#555" font-size="12">${esc(h)}</text>`));
  const last = k >= 0 ? steps[k].states : undefined;
  for (let r = 0; r < ROWS; r++) {
    const st = last?.[r];
    const y = y0 + r * cell + cell / 2;
    const changed = cur?.changes.find((c) => c.row === r);
    const rose = changed !== undefined && changed.mBefore !== -Infinity && changed.mAfter > changed.mBefore;
    const vals = st && st.m !== -Infinity ? [f(st.m), f(st.l), f(finalizeRow(st).out[0])] : ['−∞', '0', '–'];
    vals.forEach((t, i) => p.push(`<text x="${cols[i]}" y="${y}" fill="${rose ? '#b03a2e' : '#222'}" font-family="ui-monospace, monospace">${esc(t)}</text>`));
    if (rose) p.push(`<text x="${panelX}" y="${y + 13}" fill="#b03a2e" font-size="11">max ${f(changed.mBefore)} → ${f(changed.mAfter)}: l, acc × e^(${f(changed.mBefore)}−${f(changed.mAfter)}) = ${changed.rescale.toFixed(3)}</text>`);
  }
  let caption: string;
  if (!cur) caption = 'Before the first tile: every row has m = −∞, l = 0, acc = 0.';
  else {
    const rows = `rows ${cur.qTile * BR}–${cur.qTile * BR + BR - 1}`;
    const keys = `keys ${cur.kTile * BC}–${cur.kTile * BC + BC - 1}`;
    const notes = cur.changes.map((c) => (c.mBefore === -Infinity ? `q${c.row}: first scores, m = ${f(c.mAfter)}` : c.mAfter > c.mBefore ? `q${c.row}: max ${f(c.mBefore)} → ${f(c.mAfter)}, earlier l and acc × ${c.rescale.toFixed(3)}` : `q${c.row}: max stays ${f(c.mBefore)}`));
    caption = `Step ${k + 1}/${steps.length}: query tile ${cur.qTile} (${rows}) × key tile ${cur.kTile} (${keys}). ${notes.join('; ')}.`;
    if (k === steps.length - 1) {
      const ok = SCORES.every((row, r) => Math.abs(attendRow(row, V, 1).out[0] - finalizeRow(steps[k].states[r]).out[0]) < 1e-12);
      caption += ok ? ' Every row now equals softmax over all 12 scores at once (v_j = j + 1).' : ' Mismatch with the one-block softmax!';
    }
  }
  p.push(`<text x="${x0}" y="${H - 12}" fill="#555" font-size="12">v_j = j + 1; a yellow tile is being read, blue ones are done. Only m, l, acc per row are kept.</text>`);
  p.push('</svg>');
  return { svg: p.join(''), caption };
}
