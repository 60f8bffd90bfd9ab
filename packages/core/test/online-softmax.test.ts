import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  attendRow,
  createRowState,
  explainOnlineSoftmax,
  finalizeRow,
  finalizeTile,
  mergeStates,
  mergeTileStates,
  probabilitiesFromLseTile,
  probabilityFromLse,
  rescaleFactor,
  resetTileState,
  softmaxTileUpdate,
  updateRow,
  weight,
  type RowState,
} from '../dist/index.js';

const E = Math.exp;

/** |a − b| ≤ tol·(1 + |b|), treating equal infinities and NaN-with-NaN as equal. */
function close(a: number, b: number, tol: number): boolean {
  if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) && Number.isNaN(b);
  if (a === b) return true;
  return Math.abs(a - b) <= tol * (1 + Math.abs(b));
}

function expectClose(a: number, b: number, tol = 1e-12): void {
  if (!close(a, b, tol)) expect.fail(`${a} is not within ${tol} of ${b}`);
}

function expectResult(x: { out: ArrayLike<number>; lse: number }, y: { out: ArrayLike<number>; lse: number }, tol = 1e-12): void {
  expectClose(x.lse, y.lse, tol);
  expect(x.out.length).toBe(y.out.length);
  for (let c = 0; c < y.out.length; c++) expectClose(x.out[c], y.out[c], tol);
}

function stateOf(scores: number[], values: number[][], d: number): RowState {
  return updateRow(createRowState(d), scores, values);
}

describe('the seed example: [1, 2, 3], then a block containing 4', () => {
  const trace = explainOnlineSoftmax([[1, 2, 3], [4]]);
  const [s0, s1] = trace.steps;

  it('first block: m = 3, l = e^-2 + e^-1 + 1, acc = Σ e^(s−3)·v with v_j = j + 1', () => {
    expect(s0.mBefore).toBe(-Infinity);
    expect(s0.mAfter).toBe(3);
    expect(s0.rescale).toBe(0); // nothing before: e^(−∞ − 3)
    expectClose(s0.lAfter, E(-2) + E(-1) + 1);
    expectClose(s0.accAfter[0], 1 * E(-2) + 2 * E(-1) + 3);
  });

  it('second block raises the max to 4: the earlier l and acc are multiplied by e^(3−4)', () => {
    expect(s1.mBefore).toBe(3);
    expect(s1.mAfter).toBe(4);
    expectClose(s1.rescale, E(3 - 4));
    expectClose(s1.lRescaled, s0.lAfter * E(-1));
    expectClose(s1.lAfter, (E(-2) + E(-1) + 1) * E(-1) + 1);
    expectClose(s1.accAfter[0], (1 * E(-2) + 2 * E(-1) + 3) * E(-1) + 4);
    expect(s1.text).toContain('e^(3−4)');
  });

  it('finalize equals softmax over all four scores at once', () => {
    const Z = E(1) + E(2) + E(3) + E(4);
    expectClose(trace.lse, Math.log(Z));
    expectClose(trace.out[0], (1 * E(1) + 2 * E(2) + 3 * E(3) + 4 * E(4)) / Z);
    expectClose(trace.out[0], trace.direct.out[0]);
    expectClose(trace.lse, trace.direct.lse);
  });

  it('prints readable lines', () => {
    expect(trace.lines.length).toBeGreaterThanOrEqual(6);
    expect(trace.lines.join('\n')).toMatch(/max rises 3 → 4/);
  });

  it('accepts explicit value rows', () => {
    const t = explainOnlineSoftmax([[0], [0]], [[1, 0], [0, 1]]);
    expectClose(t.out[0], 0.5);
    expectClose(t.out[1], 0.5);
    expectClose(t.lse, Math.log(2));
  });
});

describe('rules for −∞ (masked scores, empty rows)', () => {
  it('rescaleFactor never makes NaN from −∞ − −∞', () => {
    expect(rescaleFactor(-Infinity, -Infinity)).toBe(1);
    expect(rescaleFactor(-Infinity, 2)).toBe(0);
    expect(rescaleFactor(2, 2)).toBe(1);
    expect(weight(-Infinity, -Infinity)).toBe(0);
    expect(probabilityFromLse(-Infinity, -Infinity)).toBe(0);
    expect(probabilityFromLse(-Infinity, 1)).toBe(0);
  });

  it('a row with no scores, or only masked ones, gives out 0 and lse −∞', () => {
    for (const scores of [[], [-Infinity], [-Infinity, -Infinity, -Infinity]]) {
      const r = finalizeRow(stateOf(scores, scores.map(() => [5, -7]), 2));
      expect(r.lse).toBe(-Infinity);
      expect(Array.from(r.out)).toEqual([0, 0]);
    }
  });

  it('masked scores contribute nothing, even next to Infinity or NaN in their value rows', () => {
    const r = attendRow([0, -Infinity, 0], [[1], [Infinity], [3]], 1);
    expectClose(r.out[0], 2);
    const r2 = attendRow([0, -Infinity], [[1], [NaN]], 1);
    expectClose(r2.out[0], 1);
  });

  it('an empty state is the identity of merge, on either side; two empties merge to empty', () => {
    const a = stateOf([0.5, 2, -1], [[1], [2], [3]], 1);
    const e = createRowState(1);
    for (const m of [mergeStates(a, e), mergeStates(e, a)]) {
      expect(m.m).toBe(a.m);
      expect(m.l).toBe(a.l);
      expect(m.acc[0]).toBe(a.acc[0]);
    }
    const ee = mergeStates(e, e);
    expect(ee.m).toBe(-Infinity);
    expect(ee.l).toBe(0);
    expect(finalizeRow(ee).lse).toBe(-Infinity);
  });

  it('NaN in a score propagates to out and lse', () => {
    const r = attendRow([1, NaN, 2], [[1], [1], [1]], 1);
    expect(r.lse).toBeNaN();
    expect(r.out[0]).toBeNaN();
  });

  it('tile API: fully masked rows stay empty, then finalize to 0 / −∞', () => {
    const rows = 2;
    const d = 4;
    const m = new Float64Array(rows);
    const l = new Float64Array(rows);
    const acc = new Float64Array(rows * d);
    resetTileState(m, l, acc, rows, d);
    const s = Float64Array.from([-Infinity, -Infinity, 1, 2]);
    softmaxTileUpdate(s, 2, rows, 2, m, l, acc, d);
    expect(Array.from(s.subarray(0, 2))).toEqual([0, 0]);
    expect(m[0]).toBe(-Infinity);
    expect(Number.isNaN(l[0])).toBe(false);
    const lse = new Float64Array(rows);
    finalizeTile(m, l, acc, rows, d, lse);
    expect(lse[0]).toBe(-Infinity);
    expect(Array.from(acc.subarray(0, d))).toEqual([0, 0, 0, 0]);
    expectClose(lse[1], Math.log(E(1) + E(2)));
  });

  it('probabilitiesFromLseTile: e^(s − lse), and 0 for rows whose lse is −∞', () => {
    const s = Float64Array.from([-Infinity, -Infinity, 0, Math.log(3)]);
    probabilitiesFromLseTile(s, 2, 2, 2, Float64Array.from([-Infinity, Math.log(4)]));
    expect(Array.from(s.subarray(0, 2))).toEqual([0, 0]);
    expectClose(s[2], 0.25);
    expectClose(s[3], 0.75);
  });
});

// ---- properties ---------------------------------------------------------------------------

const D = 3;
/** Scores: mostly moderate, some large (the rescaling must keep exp() in range), some masked. */
const score = fc.oneof(
  { weight: 6, arbitrary: fc.double({ min: -20, max: 20, noNaN: true }) },
  { weight: 2, arbitrary: fc.double({ min: -800, max: 800, noNaN: true }) },
  { weight: 1, arbitrary: fc.constant(-Infinity) },
);
const valueRow = fc.array(fc.double({ min: -10, max: 10, noNaN: true }), { minLength: D, maxLength: D });
const entry = fc.tuple(score, valueRow);
/** A row of (score, value) entries and cut points splitting it into blocks (some empty). */
const rowWithCuts = fc.array(entry, { minLength: 0, maxLength: 40 }).chain((row) =>
  fc.tuple(fc.constant(row), fc.array(fc.integer({ min: 0, max: row.length }), { maxLength: 6 })),
);

function blocksOf<T>(row: T[], cuts: number[]): T[][] {
  const c = [0, ...[...cuts].sort((a, b) => a - b), row.length];
  const out: T[][] = [];
  for (let i = 0; i + 1 < c.length; i++) out.push(row.slice(c[i], c[i + 1]));
  return out;
}

const scoresOf = (es: [number, number[]][]) => es.map((e) => e[0]);
const valuesOf = (es: [number, number[]][]) => es.map((e) => e[1]);

/** Out is relative to the values' scale (10), lse to its own magnitude. */
function expectSame(x: { out: ArrayLike<number>; lse: number }, y: { out: ArrayLike<number>; lse: number }): void {
  expectClose(x.lse, y.lse, 1e-12);
  for (let c = 0; c < D; c++) if (!close(x.out[c], y.out[c], 1e-12) && Math.abs(x.out[c] - y.out[c]) > 1e-11) expect.fail(`out[${c}]: ${x.out[c]} vs ${y.out[c]}`);
}

describe('properties (fast-check)', () => {
  it('any split of a row into blocks gives the same (out, lse) as one block', () => {
    fc.assert(
      fc.property(rowWithCuts, ([row, cuts]) => {
        const direct = attendRow(scoresOf(row), valuesOf(row), D);
        const st = createRowState(D);
        for (const b of blocksOf(row, cuts)) updateRow(st, scoresOf(b), valuesOf(b));
        expectSame(finalizeRow(st), direct);
      }),
      { numRuns: 500, seed: 20240601 },
    );
  });

  it('merging the blocks\' partial states (in any grouping) gives the one-block result', () => {
    fc.assert(
      fc.property(rowWithCuts, ([row, cuts]) => {
        const direct = attendRow(scoresOf(row), valuesOf(row), D);
        const parts = blocksOf(row, cuts).map((b) => stateOf(scoresOf(b), valuesOf(b), D));
        const left = parts.reduce((a, b) => mergeStates(a, b), createRowState(D));
        const right = parts.reduceRight((a, b) => mergeStates(b, a), createRowState(D));
        expectSame(finalizeRow(left), direct);
        expectSame(finalizeRow(right), direct);
      }),
      { numRuns: 500, seed: 7 },
    );
  });

  const partial = fc.array(entry, { maxLength: 12 }).map((es) => stateOf(scoresOf(es), valuesOf(es), D));

  it('merge is commutative (exactly) and associative (within rounding)', () => {
    fc.assert(
      fc.property(partial, partial, partial, (a, b, c) => {
        const ab = mergeStates(a, b);
        const ba = mergeStates(b, a);
        expect(ab.m).toBe(ba.m);
        expect(ab.l).toBe(ba.l);
        expect(Array.from(ab.acc)).toEqual(Array.from(ba.acc));
        const x = mergeStates(mergeStates(a, b), c);
        const y = mergeStates(a, mergeStates(b, c));
        expect(x.m).toBe(y.m);
        expectClose(x.l, y.l, 1e-13);
        for (let i = 0; i < D; i++) if (!close(x.acc[i], y.acc[i], 1e-13) && Math.abs(x.acc[i] - y.acc[i]) > 1e-12 * x.l) expect.fail(`acc[${i}] ${x.acc[i]} vs ${y.acc[i]}`);
        expectSame(finalizeRow(x), finalizeRow(y));
      }),
      { numRuns: 500, seed: 11 },
    );
  });

  it('the tile API (softmaxTileUpdate + weights·V, mergeTileStates, finalizeTile) matches the row API', () => {
    const rows = fc.array(rowWithCuts, { minLength: 1, maxLength: 4 });
    fc.assert(
      fc.property(rows, fc.integer({ min: 1, max: 8 }), (rs, bc) => {
        const n = rs.length;
        const width = Math.max(0, ...rs.map(([r]) => r.length));
        const m = new Float64Array(n);
        const l = new Float64Array(n);
        const acc = new Float64Array(n * D);
        resetTileState(m, l, acc, n, D);
        // split-KV: the first half of the key blocks into (m, l, acc), the second into (m2, l2, acc2)
        const m2 = new Float64Array(n);
        const l2 = new Float64Array(n);
        const acc2 = new Float64Array(n * D);
        resetTileState(m2, l2, acc2, n, D);
        const half = Math.ceil(Math.ceil(width / bc) / 2) * bc;
        const s = new Float64Array(n * bc);
        for (let j0 = 0; j0 < width; j0 += bc) {
          const nc = Math.min(bc, width - j0);
          s.fill(-Infinity);
          for (let r = 0; r < n; r++) for (let c = 0; c < nc; c++) if (j0 + c < rs[r][0].length) s[r * bc + c] = rs[r][0][j0 + c][0];
          const [M, L, A] = j0 < half ? [m, l, acc] : [m2, l2, acc2];
          softmaxTileUpdate(s, bc, n, nc, M, L, A, D);
          for (let r = 0; r < n; r++)
            for (let c = 0; c < nc; c++) {
              const w = s[r * bc + c];
              if (w === 0) continue;
              const v = rs[r][0][j0 + c][1];
              for (let x = 0; x < D; x++) A[r * D + x] += w * v[x];
            }
        }
        mergeTileStates(m, l, acc, m2, l2, acc2, n, D);
        const lse = new Float64Array(n);
        finalizeTile(m, l, acc, n, D, lse);
        for (let r = 0; r < n; r++) {
          const direct = attendRow(scoresOf(rs[r][0]), valuesOf(rs[r][0]), D);
          expectSame({ out: acc.subarray(r * D, r * D + D), lse: lse[r] }, direct);
        }
      }),
      { numRuns: 300, seed: 3 },
    );
  });
});
