// Context parallelism, the pure parts: shard layouts, splitting and joining shards, and the
// block plan. The plan is checked exhaustively on small problems: over all ranks and steps,
// every visible (query, key) pair of the whole problem is computed exactly once, and nothing
// else — independent of any arithmetic.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  FAError,
  checkLayout,
  contiguousLayout,
  describeProblem,
  joinShards,
  keyRange,
  locateToken,
  planRing,
  rangeRows,
  splitShards,
  windowKeyRange,
  zigzagLayout,
  zigzagVarlenLayout,
  type AttentionOptions,
  type AttentionProblem,
  type DeviceTensor,
  type ShardLayout,
} from '../dist/index.js';
import { hostTensor } from '../dist/testing/index.js';

const virtual = (shape: number[]): DeviceTensor => ({ kind: 'device', backend: 'test', dtype: 'f32', shape, handle: null, disposed: false });

function problem(o: { b?: number; tq: number; tk?: number; h?: number; hkv?: number; opts?: AttentionOptions }): AttentionProblem {
  const { b = 1, tq, tk = tq, h = 1, hkv = h, opts = {} } = o;
  if (opts.cuSeqlensQ) return describeProblem(virtual([tq, h, 8]), virtual([tk, hkv, 8]), virtual([tk, hkv, 8]), opts);
  return describeProblem(virtual([b, tq, h, 8]), virtual([b, tk, hkv, 8]), virtual([b, tk, hkv, 8]), opts);
}

/** Counts how often each (query token, key token) pair of batch 0's packed axis is computed. */
function coverage(p: AttentionProblem, layout: ShardLayout): { counts: Map<string, number>; calls: number } {
  const counts = new Map<string, number>();
  let calls = 0;
  for (let r = 0; r < layout.ranks; r++) {
    const plan = planRing(p, layout, r);
    const nq = rangeRows(layout.q[r]);
    for (const st of plan.steps) {
      const nk = rangeRows(layout.k[st.src]);
      for (const call of st.calls) {
        calls++;
        const segs = call.cuSeqlensQ.length - 1;
        for (let s = 0; s < segs; s++) {
          const q0 = call.cuSeqlensQ[s];
          const tq = call.cuSeqlensQ[s + 1] - q0;
          const k0 = call.cuSeqlensK[s];
          const tk = call.cuSeqlensK[s + 1] - k0;
          for (let x = 0; x < tq; x++) {
            const [lo, hi] = windowKeyRange(call.windowLeft, call.windowRight, x, tq, tk);
            for (let y = lo; y <= hi; y++) {
              // packed local rows → (batch, local token) → global token
              const rowQ = q0 + x;
              const rowK = k0 + y;
              const bq = p.varlen ? 0 : Math.floor(rowQ / nq);
              const bk = p.varlen ? 0 : Math.floor(rowK / nk);
              const gq = globalToken(layout.q[r], p.varlen ? rowQ : rowQ % nq);
              const gk = globalToken(layout.k[st.src], p.varlen ? rowK : rowK % nk);
              const key = `${bq}:${gq}|${bk}:${gk}`;
              counts.set(key, (counts.get(key) ?? 0) + 1);
            }
          }
        }
      }
    }
  }
  return { counts, calls };
}

function globalToken(ranges: ShardLayout['q'][number], row: number): number {
  for (const g of ranges) {
    if (row < g.end - g.start) return g.start + row;
    row -= g.end - g.start;
  }
  throw new Error(`row ${row} beyond the rank's ranges`);
}

/** The visible pairs of the whole problem, in the same keys. */
function visible(p: AttentionProblem): Set<string> {
  const out = new Set<string>();
  for (let b = 0; b < p.batch; b++) {
    const q0 = p.cuSeqlensQ[b];
    const k0 = p.cuSeqlensK[b];
    const tq = p.cuSeqlensQ[b + 1] - q0;
    const tk = p.cuSeqlensK[b + 1] - k0;
    for (let i = 0; i < tq; i++) {
      const [lo, hi] = keyRange(p, i, tq, tk);
      for (let j = lo; j <= hi; j++) out.add(p.varlen ? `0:${q0 + i}|0:${k0 + j}` : `${b}:${i}|${b}:${j}`);
    }
  }
  return out;
}

function expectExactCover(p: AttentionProblem, layout: ShardLayout): number {
  const { counts, calls } = coverage(p, layout);
  const want = visible(p);
  for (const [key, n] of counts) {
    if (!want.has(key)) expect.fail(`pair ${key} is computed but not visible`);
    if (n !== 1) expect.fail(`pair ${key} is computed ${n} times`);
  }
  expect(counts.size).toBe(want.size);
  return calls;
}

describe('shard layouts', () => {
  it('zigzag: rank r holds chunks r and 2N−1−r; uneven lengths differ by at most one token', () => {
    const l = zigzagLayout(4, 37);
    checkLayout(l);
    expect(l.q[0]).toEqual([{ start: 0, end: 4 }, { start: 32, end: 37 }]);
    const rows = l.q.map(rangeRows);
    expect(rows.reduce((a, b) => a + b, 0)).toBe(37);
    expect(Math.max(...rows) - Math.min(...rows)).toBeLessThanOrEqual(2);
    // one rank: the two chunks touch and merge into one range
    expect(zigzagLayout(1, 10).q[0]).toEqual([{ start: 0, end: 10 }]);
    // fewer tokens than chunks: some ranks hold nothing
    const tiny = zigzagLayout(8, 3);
    checkLayout(tiny);
    expect(tiny.q.map(rangeRows).reduce((a, b) => a + b, 0)).toBe(3);
    expect(tiny.q.some((r) => r.length === 0)).toBe(true);
  });

  it('contiguous and per-sequence zigzag layouts tile their axes', () => {
    checkLayout(contiguousLayout(3, 10, 7));
    const v = zigzagVarlenLayout(2, [0, 5, 5, 17], [0, 7, 8, 8]);
    checkLayout(v);
    expect(v.tq).toBe(17);
    expect(v.tk).toBe(8);
    expect(locateToken(v.q, 16)).toEqual({ rank: 0, row: rangeRows(v.q[0]) - 1 });
  });

  it('checkLayout names what is wrong', () => {
    const l = zigzagLayout(2, 8);
    const bad = (x: unknown) => {
      try {
        checkLayout(x as ShardLayout);
      } catch (e) {
        expect(e).toBeInstanceOf(FAError);
        expect((e as FAError).code).toBe('E_ARG');
        return (e as FAError).message;
      }
      return expect.fail('accepted a bad layout');
    };
    expect(bad({ ...l, q: [l.q[0], [{ start: 2, end: 5 }]] })).toMatch(/held by no rank/);
    expect(bad({ ...l, q: [l.q[0], [{ start: 1, end: 6 }]] })).toMatch(/held twice/);
    expect(bad({ ...l, q: [l.q[0]] })).toMatch(/each of the 2 ranks/);
    expect(bad({ ...l, k: [[{ start: 0, end: 9 }], []] })).toMatch(/outside/);
  });

  it('splitShards/joinShards round-trip q-like, k-like and LSE tensors, dense and varlen', () => {
    const l = zigzagLayout(3, 11, 7);
    const q = hostTensor(Float32Array.from({ length: 2 * 11 * 2 * 3 }, (_, i) => i), [2, 11, 2, 3], 'f32');
    const k = hostTensor(Float32Array.from({ length: 2 * 7 * 1 * 3 }, (_, i) => -i), [2, 7, 1, 3], 'bf16');
    const lse = hostTensor(Float32Array.from({ length: 2 * 2 * 11 }, (_, i) => i / 3), [2, 2, 11], 'f32');
    const qs = splitShards(q, l, 'q');
    expect(qs.map((s) => s.shape[1])).toEqual(l.q.map(rangeRows));
    expect(joinShards(qs, l, 'q')).toEqual(q);
    expect(joinShards(splitShards(k, l, 'k'), l, 'k')).toEqual(k);
    expect(joinShards(splitShards(lse, l, 'q', 2), l, 'q', 2)).toEqual(lse);
    const vl = zigzagVarlenLayout(2, [0, 3, 9], [0, 4, 4]);
    const qv = hostTensor(Float32Array.from({ length: 9 * 2 }, (_, i) => i), [9, 1, 2], 'f32');
    expect(joinShards(splitShards(qv, vl, 'q'), vl, 'q')).toEqual(qv);
    expect(() => splitShards(qv, l, 'q')).toThrow(/layout's q length/);
  });
});

describe('the block plan', () => {
  it('zigzag causal: one engine call per step (own shard causal, every other step one full block), balanced work', () => {
    for (const [N, T] of [[2, 64], [3, 90], [4, 37], [8, 257]]) {
      const p = problem({ tq: T, opts: { causal: true } });
      const l = zigzagLayout(N, T);
      const pairs: number[] = [];
      for (let r = 0; r < N; r++) {
        const plan = planRing(p, l, r);
        expect(plan.steps.map((s) => s.calls.length)).toEqual(Array.from({ length: N }, () => 1));
        expect(plan.steps[0].calls[0].windowLeft).toBe(-1);
        expect(plan.steps[0].calls[0].windowRight).toBe(0); // causal
        for (const st of plan.steps.slice(1)) expect([st.calls[0].windowLeft, st.calls[0].windowRight]).toEqual([-1, -1]);
        pairs.push(plan.steps.reduce((a, s) => a + s.pairs, 0));
      }
      expect(pairs.reduce((a, b) => a + b, 0)).toBe((T * (T + 1)) / 2);
      // equal up to the chunks' rounding (chunks differ by at most one token)
      const chunk = Math.ceil(T / (2 * N));
      expect(Math.max(...pairs) - Math.min(...pairs)).toBeLessThanOrEqual(2 * T + 2 * chunk);
    }
  });

  it('non-causal: one full call per step', () => {
    const p = problem({ tq: 50, tk: 31, h: 2 });
    const plan = planRing(p, zigzagLayout(3, 50, 31), 1);
    for (const st of plan.steps) expect(st.calls.map((c) => [c.windowLeft, c.windowRight])).toEqual([[-1, -1]]);
  });

  it('covers every visible pair exactly once: causal, windows, Tq ≠ Tk, batches, uneven and empty shards', () => {
    const cases: [AttentionProblem, ShardLayout][] = [
      [problem({ tq: 33, opts: { causal: true } }), zigzagLayout(4, 33)],
      [problem({ b: 2, tq: 17, tk: 40, opts: { causal: true } }), zigzagLayout(3, 17, 40)],
      [problem({ tq: 40, tk: 17, opts: { causal: true } }), zigzagLayout(3, 40, 17)],
      [problem({ tq: 29, opts: { window: [3, 2] } }), zigzagLayout(4, 29)],
      [problem({ tq: 29, opts: { window: [0, 0] } }), contiguousLayout(5, 29)],
      [problem({ tq: 25, tk: 30, opts: { window: [-1, 4] } }), zigzagLayout(2, 25, 30)],
      [problem({ tq: 5, opts: { causal: true } }), zigzagLayout(8, 5)],
      [problem({ tq: 1, tk: 9, opts: { causal: true, window: [2, 0] } }), zigzagLayout(3, 1, 9)],
    ];
    for (const [p, l] of cases) expectExactCover(p, l);
  });

  it('covers every visible pair exactly once with varlen sequences across shard boundaries', () => {
    const cuQ = [0, 5, 5, 22, 31];
    const cuK = [0, 7, 7, 7, 40];
    for (const opts of [{ causal: true }, {}, { window: [2, 1] as [number, number] }]) {
      const p = problem({ tq: 31, tk: 40, h: 2, opts: { ...opts, cuSeqlensQ: cuQ, cuSeqlensK: cuK } });
      expectExactCover(p, zigzagVarlenLayout(3, cuQ, cuK));
      expectExactCover(p, contiguousLayout(4, 31, 40));
    }
  });

  it('property: exact cover on random problems and layouts', () => {
    fc.assert(
      fc.property(
        fc.record({
          ranks: fc.integer({ min: 1, max: 6 }),
          tq: fc.integer({ min: 1, max: 30 }),
          tk: fc.integer({ min: 1, max: 30 }),
          b: fc.integer({ min: 1, max: 2 }),
          left: fc.constantFrom(-1, 0, 1, 3, 7),
          right: fc.constantFrom(-1, 0, 2, 5),
          causal: fc.boolean(),
          zigzag: fc.boolean(),
        }),
        (c) => {
          const p = problem({ b: c.b, tq: c.tq, tk: c.tk, opts: { causal: c.causal, window: [c.left, c.right] } });
          const l = c.zigzag ? zigzagLayout(c.ranks, c.tq, c.tk) : contiguousLayout(c.ranks, c.tq, c.tk);
          expectExactCover(p, l);
        },
      ),
      { numRuns: 150, seed: 14 },
    );
  });

  it('ALiBi: exact with one rank; across shards E_UNSUPPORTED with the reason', () => {
    const p = problem({ tq: 20, h: 2, opts: { causal: true, alibiSlopes: [0.5, 0.25] } });
    expectExactCover(p, zigzagLayout(1, 20));
    try {
      planRing(p, zigzagLayout(2, 20), 0);
      expect.fail('planned ALiBi across shards');
    } catch (e) {
      expect((e as FAError).code).toBe('E_UNSUPPORTED');
      expect((e as FAError).message).toMatch(/ALiBi.*absolute query–key distance.*one rank/);
    }
  });

  it('refuses a layout of another length', () => {
    expect(() => planRing(problem({ tq: 20 }), zigzagLayout(2, 21), 0)).toThrow(/layout shards 21 query/);
  });
});
