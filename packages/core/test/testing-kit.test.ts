import { afterAll, describe, expect, it } from 'vitest';
import { FAError, keyRange, referenceForward, type AttentionOptions, type AttentionProblem, type DType, type HostTensor } from '../dist/index.js';

const refOf = (q: HostTensor, k: HostTensor, v: HostTensor, o: AttentionOptions) => referenceForward(q, k, v, o);
import {
  caseInputs, caseProblem, CASE_HEAD_DIMS, checkBadInputs, checkCase, checkNaNPropagation, checkRepeatable, compareLse, compareTensor,
  conformanceCases, defineConformanceSuite, EDGE_LENGTHS, formatSummary, makeCase, MAX_CASE_WORK, QUICK_CASE_WORK,
  referenceBackend, runConformance, type ConformanceCase, kvCacheCases, EXTRA_CHECKS, KV_EXTRA_CHECKS, checkDropoutMask,
} from '../dist/testing/index.js';
import { flashSimBackend } from './helpers/flash-sim.js';
import { hostBackend, WRONG_ENGINES } from './helpers/engines.js';

const DTYPES: DType[] = ['f32', 'f16', 'bf16'];
const cases = conformanceCases();
const quick = conformanceCases({ quick: true });

/** Features every dtype must cover. */
const REQUIRED_TAGS = [
  'causal', 'window', 'window+causal', 'gqa', 'mqa', 'varlen', 'varlen-empty-both', 'varlen-empty-k', 'varlen-empty-q',
  'softcap', 'alibi-H', 'alibi-BH', 'scale', 'scale-negative', 'scale-large', 'T1', 'tq<tk', 'tq>tk', 'masked-rows',
  'all-rows-masked', 'large-magnitude', 'multi-batch', 'multi-head', 'deterministic', 'sinks', 'dropout',
  ...['[0,0]', '[3,-1]', '[-1,5]', '[2,2]'].flatMap((w) => [`window${w}`, `window${w}+causal`]),
  ...EDGE_LENGTHS.filter((t) => t > 1).map((t) => `T${t}`),
  ...CASE_HEAD_DIMS.map((d) => `D${d}`),
];

function coverage(list: readonly ConformanceCase[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const c of list) for (const t of c.tags) m.set(`${c.dtype} ${t}`, (m.get(`${c.dtype} ${t}`) ?? 0) + 1);
  return m;
}

describe('case generator', () => {
  it('makes at least 300 valid, uniquely named, small cases by default', () => {
    expect(cases.length).toBeGreaterThanOrEqual(300);
    expect(new Set(cases.map((c) => c.name)).size).toBe(cases.length);
    for (const c of cases) {
      expect(c.work).toBeLessThanOrEqual(MAX_CASE_WORK);
      expect(c.backward).toBe(true);
      expect(() => caseProblem(c)).not.toThrow();
    }
    expect(cases[0].name).toMatch(/^#000 f32 B1 Tq1 Tk1 H1\/1 D32$/);
    expect(cases.some((c) => /^#\d{3} f16 B\d Tq\d+ Tk\d+ H\d\/\d D\d+ causal window\[3,-1\]/.test(c.name))).toBe(true);
  });

  it('covers every option and edge in every dtype', () => {
    for (const [label, list] of [['default', cases], ['quick', quick]] as const) {
      const cov = coverage(list);
      const missing = DTYPES.flatMap((d) => REQUIRED_TAGS.filter((t) => !cov.get(`${d} ${t}`)).map((t) => `${d} ${t}`));
      expect(missing, `${label}: uncovered`).toEqual([]);
    }
    const cov = coverage(cases);
    // Report the counts in the test output.
    console.log(`coverage (${cases.length} cases): ` + DTYPES.map((d) => `${d}: ` + REQUIRED_TAGS.map((t) => `${t}=${cov.get(`${d} ${t}`)}`).join(' ')).join('\n'));
    for (const d of DTYPES) {
      expect(cov.get(`${d} causal`)).toBeGreaterThanOrEqual(20);
      expect(cov.get(`${d} varlen`)).toBeGreaterThanOrEqual(10);
      expect(cov.get(`${d} gqa`)! + cov.get(`${d} mqa`)!).toBeGreaterThanOrEqual(20);
      expect(cov.get(`${d} large-magnitude`)).toBeGreaterThanOrEqual(4);
    }
    const mags = new Set(cases.map((c) => c.magnitude));
    for (const m of [20, 35, 50]) expect(mags.has(m)).toBe(true);
  });

  it('is deterministic in its options', () => {
    const again = conformanceCases();
    expect(again.map((c) => `${c.name} ${c.seed}`)).toEqual(cases.map((c) => `${c.name} ${c.seed}`));
    const a = caseInputs(cases[40]);
    const b = caseInputs(again[40]);
    expect(Array.from(a.q.data)).toEqual(Array.from(b.q.data));
    const other = conformanceCases({ seed: 2 });
    const nT = quick.length;
    expect(other.slice(0, nT).map((c) => c.name.slice(5))).toEqual(cases.slice(0, nT).map((c) => c.name.slice(5)));
    expect(other.slice(nT).map((c) => c.name)).not.toEqual(cases.slice(nT).map((c) => c.name));
  });

  it('honours quick, count, dtypes, maxD and backward', () => {
    for (const c of quick) expect(c.work).toBeLessThanOrEqual(QUICK_CASE_WORK);
    expect(conformanceCases({ count: 10 }).length).toBe(10);
    // A short list still has every template (in some dtype).
    const short = new Set(conformanceCases({ count: 70 }).flatMap((c) => c.tags));
    expect(REQUIRED_TAGS.filter((t) => !short.has(t))).toEqual([]);
    const f32 = conformanceCases({ dtypes: ['f32'], count: 120 });
    expect(f32.every((c) => c.dtype === 'f32')).toBe(true);
    const cov = coverage(f32);
    expect(REQUIRED_TAGS.filter((t) => !cov.get(`f32 ${t}`))).toEqual([]);
    const small = conformanceCases({ maxD: 64 });
    expect(small.every((c) => c.d <= 64 && c.dv <= 64)).toBe(true);
    expect(small.length).toBe(320);
    expect(conformanceCases({ backward: false, count: 5 }).every((c) => !c.backward)).toBe(true);
    expect(() => conformanceCases({ maxD: 0 })).toThrow();
  });
});

describe('tolerance policy', () => {
  it('f32: 1e-5 relative, with the magnitude floor only where the reference cancels', () => {
    const ref = Float64Array.from([1, -2, 3]);
    const mag = ref.map(Math.abs);
    expect(compareTensor({ tensor: 'out', dtype: 'f32', got: ref.map((x) => x * (1 + 5e-6)), ref, mag }).pass).toBe(true);
    expect(compareTensor({ tensor: 'out', dtype: 'f32', got: ref.map((x) => x * (1 + 2e-5)), ref, mag }).pass).toBe(false);
    const zero = new Float64Array(3);
    expect(compareTensor({ tensor: 'dq', dtype: 'f32', got: zero, ref: zero, mag: zero }).pass).toBe(true);
    expect(compareTensor({ tensor: 'dq', dtype: 'f32', got: Float64Array.from([1e-20, 0, 0]), ref: zero, mag: zero }).pass).toBe(false);
    // Cancelled reference: noise of a few u32 times the magnitudes passes, more does not.
    const big = Float64Array.from([10, 10, 10]);
    expect(compareTensor({ tensor: 'dq', dtype: 'f32', got: Float64Array.from([3e-7, -3e-7, 0]), ref: zero, mag: big }).pass).toBe(true);
    expect(compareTensor({ tensor: 'dq', dtype: 'f32', got: Float64Array.from([1e-5, 0, 0]), ref: zero, mag: big }).pass).toBe(false);
    // ... and the exact effect of the rounded out given to backward (corr) is allowed twice.
    expect(compareTensor({ tensor: 'dq', dtype: 'f32', got: Float64Array.from([1e-3, 0, 0]), ref: zero, mag: zero, correction: Float64Array.from([6e-4, 0, 0]) }).pass).toBe(true);
    expect(compareTensor({ tensor: 'dq', dtype: 'f32', got: Float64Array.from([1e-3, 0, 0]), ref: zero, mag: zero, correction: Float64Array.from([4e-4, 0, 0]) }).pass).toBe(false);
    expect(compareTensor({ tensor: 'out', dtype: 'f32', got: Float64Array.from([1, NaN, 3]), ref, mag }).pass).toBe(false);
  });

  it('f16/bf16: twice naive plus two ulps', () => {
    const ref = Float64Array.from([1, 0.5, -0.25]);
    const mag = ref.map(Math.abs);
    const naive = Float64Array.from([1 + 2 ** -9, 0.5, -0.25]);
    const u = 2 ** -11;
    expect(compareTensor({ tensor: 'out', dtype: 'f16', got: Float64Array.from([1 + 2 ** -8, 0.5, -0.25]), ref, mag, naive }).pass).toBe(true);
    expect(compareTensor({ tensor: 'out', dtype: 'f16', got: Float64Array.from([1, 0.5 + 2 ** -8 + 4 * u + 1e-4, -0.25]), ref, mag, naive }).pass).toBe(false);
    // naive exact: two ulps at max|ref| are allowed
    expect(compareTensor({ tensor: 'out', dtype: 'f16', got: Float64Array.from([1 + 2 ** -10, 0.5, -0.25]), ref, mag, naive: ref }).pass).toBe(true);
    expect(compareTensor({ tensor: 'out', dtype: 'f16', got: Float64Array.from([1 + 2 ** -8, 0.5, -0.25]), ref, mag, naive: ref }).pass).toBe(false);
    expect(() => compareTensor({ tensor: 'out', dtype: 'bf16', got: ref, ref, mag })).toThrow(/naive/);
  });

  it('LSE: -Infinity must match exactly; finite rows within 1e-5 (f32)', () => {
    const ref = Float64Array.from([-Infinity, 2, 3]);
    const mag = Float64Array.from([0, 3, 4]);
    expect(compareLse('f32', Float64Array.from([-Infinity, 2 + 5e-6, 3]), ref, mag).pass).toBe(true);
    expect(compareLse('f32', Float64Array.from([-Infinity, 2 + 3e-5, 3]), ref, mag).pass).toBe(false);
    expect(compareLse('f32', Float64Array.from([-1e30, 2, 3]), ref, mag).pass).toBe(false);
    expect(compareLse('f32', Float64Array.from([-Infinity, NaN, 3]), ref, mag).pass).toBe(false);
    expect(compareLse('f16', Float64Array.from([-Infinity, 2 + 3e-5, 3]), ref, mag).pass).toBe(true);
  });
});

describe('the kit accepts correct engines', () => {
  it(`the float64 reference as a backend passes all ${cases.length} cases, the KV-cache cases and the extra checks`, async () => {
    const s = await runConformance(referenceBackend());
    console.log(formatSummary(s));
    expect(s.failures).toEqual([]);
    expect(s.skipped).toEqual([]);
    expect(s.passed).toBe(cases.length + kvCacheCases().length + EXTRA_CHECKS.length + KV_EXTRA_CHECKS.length);
  });

  for (const roundP of [false, true]) {
    it(`a float32 tiled FlashAttention simulation${roundP ? ' rounding P and dS to the dtype' : ''} passes (quick cases with backward)`, async () => {
      const s = await runConformance(flashSimBackend({ roundP, tile: roundP ? 32 : 16 }), { cases: quick });
      expect(s.failures).toEqual([]);
      expect(s.passed).toBe(quick.length + EXTRA_CHECKS.length);
    });
  }
});

interface Expect {
  /** true: must fail; false: must pass; undefined: either. */
  (c: ConformanceCase, p: AttentionProblem): boolean | undefined;
}

function rowsOf(p: AttentionProblem) {
  const rows: { b: number; i: number; tq: number; tk: number; lo: number; hi: number }[] = [];
  for (let b = 0; b < p.batch; b++) {
    const tq = p.cuSeqlensQ[b + 1] - p.cuSeqlensQ[b];
    const tk = p.cuSeqlensK[b + 1] - p.cuSeqlensK[b];
    for (let i = 0; i < tq; i++) {
      const [lo, hi] = keyRange(p, i, tq, tk);
      rows.push({ b, i, tq, tk, lo, hi });
    }
  }
  return rows;
}
const lowpLarge = (c: ConformanceCase) => c.dtype !== 'f32' && c.magnitude > 1;
const anyVisible = (p: AttentionProblem) => rowsOf(p).some((r) => r.lo <= r.hi);
const segsUneven = (p: AttentionProblem) => rowsOf(p).some((r) => r.tq !== r.tk && r.tk > 0);

const EXPECT: Record<string, { backward: boolean; must: Expect }> = {
  // With large-magnitude scores, naive f16/bf16 attention (scores rounded to the dtype) is so
  // inaccurate that the FlashAttention rule's bound exceeds a 20% perturbation: either outcome.
  'perturbs one element of out': { backward: false, must: (c) => (lowpLarge(c) ? undefined : true) },
  'perturbs one element of dk': { backward: true, must: (c, p) => (p.totalK === 0 ? false : lowpLarge(c) ? undefined : true) },
  'drops the scale': { backward: false, must: (_c, p) => p.scale !== 1 && anyVisible(p) },
  'ignores the window': {
    backward: false,
    must: (c, p) => {
      if (!c.options.window) return false;
      const noWin = { ...p, windowLeft: -1, windowRight: p.causal ? 0 : -1 };
      return rowsOf(p).some((r) => {
        const [lo, hi] = keyRange(noWin, r.i, r.tq, r.tk);
        return lo !== r.lo || hi !== r.hi;
      });
    },
  },
  'maps query head h to kv head h % Hkv': { backward: false, must: (_c, p) => (p.hkv >= 2 && p.h > p.hkv ? anyVisible(p) : false) },
  'aligns causal top-left': {
    backward: false,
    must: (c, p) => (c.options.causal && segsUneven(p) && anyVisible(p) ? true : !c.options.causal && !c.options.window ? false : !segsUneven(p) ? false : undefined),
  },
  'flips the ALiBi sign': { backward: false, must: (c, p) => (c.options.alibiSlopes ? rowsOf(p).some((r) => r.hi > r.lo) : false) },
  'ignores sinks': { backward: false, must: (c) => (c.options.sinks === undefined ? false : undefined) },
  'ignores dropout': { backward: false, must: (c, p) => (c.options.dropout === undefined ? false : anyVisible(p) ? true : undefined) },
  // (with large-magnitude scores a sink's share, and so dsinks, can be below any tolerance)
  'returns dsinks with the wrong sign': { backward: true, must: (c) => (c.options.sinks === undefined ? false : c.magnitude < 10 ? true : undefined) },
  'ignores softcap': { backward: false, must: (c, p) => (c.options.softcap === undefined ? false : c.dtype === 'f32' && anyVisible(p) ? true : undefined) },
  'returns NaN for rows that see no key': { backward: false, must: (c) => c.tags.includes('masked-rows') },
  'returns LSE in base 2': { backward: false, must: (_c, p) => anyVisible(p) },
  'does not sum dK/dV over the query heads of a group': { backward: true, must: (_c, p) => p.h > p.hkv && anyVisible(p) },
  'f32 out off by a relative 1e-4': { backward: false, must: (c, p) => (c.dtype === 'f32' ? anyVisible(p) : false) },
};

describe('the kit rejects wrong engines', () => {
  for (const [name, parts] of Object.entries(WRONG_ENGINES)) {
    it(`an engine that ${name} fails exactly where it is wrong`, async () => {
      const e = EXPECT[name];
      const backend = hostBackend(name, parts);
      const bad: string[] = [];
      const failedByDtype = new Map<DType, number>();
      let controls = 0;
      for (const c of quick) {
        const must = e.must(c, caseProblem(c));
        // Every case where the mistake shows, and a third of the others as controls.
        if (must === false && controls++ % 3 !== 0) continue;
        const r = await checkCase(backend, c, { backward: e.backward });
        if (!r.pass) failedByDtype.set(c.dtype, (failedByDtype.get(c.dtype) ?? 0) + 1);
        if (must === true && r.pass) bad.push(`should fail but passed: ${c.name} (${r.message})`);
        if (must === false && !r.pass) bad.push(`should pass but failed: ${r.message}`);
      }
      expect(bad).toEqual([]);
      for (const d of name.startsWith('f32') ? (['f32'] as DType[]) : DTYPES) expect(failedByDtype.get(d) ?? 0, `failures in ${d}`).toBeGreaterThan(0);
    });
  }
});

describe('the dropout mask check', () => {
  it("passes the reference, and fails an engine whose mask is another (offset + 1) or that ignores dropout", async () => {
    expect((await checkDropoutMask(referenceBackend())).pass).toBe(true);
    const shifted = hostBackend('shifted', { forward: (q, k, v, o) => referenceForward(q, k, v, { ...o, dropout: o.dropout && { ...o.dropout, offset: (o.dropout.offset ?? 0) + 1 } }) });
    const r = await checkDropoutMask(shifted);
    expect(r.pass).toBe(false);
    expect(r.message).toMatch(/philox (keeps|drops) key/);
    expect((await checkDropoutMask(hostBackend('ignores', WRONG_ENGINES['ignores dropout']))).pass).toBe(false);
  });
});

describe('reporting', () => {
  const c = makeCase({ dtype: 'f16', tq: 9, tk: 12, h: 2, d: 1 });
  it('an unsupported case is skipped with the engine reason; a refusal without a reason fails', async () => {
    const r = await checkCase(referenceBackend({ supports: (p) => (p.d === 1 ? { ok: false, reason: 'head dim 1 unsupported' } : { ok: true }) }), c);
    expect(r).toMatchObject({ pass: true, skipped: true, reason: 'head dim 1 unsupported' });
    const r2 = await checkCase(referenceBackend({ supports: () => ({ ok: false, reason: ' ' }) }), c);
    expect(r2.pass).toBe(false);
    expect(r2.message).toMatch(/without giving a reason/);
    const s = await runConformance(referenceBackend({ supports: (p) => (p.d === 1 ? { ok: false, reason: 'head dim 1 unsupported' } : { ok: true }) }), { cases: [c, makeCase({ dtype: 'f32', tq: 3, d: 8 })], extras: false });
    expect(s.passed).toBe(1);
    expect(s.skipped).toEqual([{ name: c.name, reason: 'head dim 1 unsupported' }]);
    expect(formatSummary(s)).toMatch(/^conformance reference \(float64 reference\): 1 passed, 1 skipped \(head dim 1 unsupported ×1\), 0 failed/);
  });

  it('a throwing engine fails with the stage and the error code', async () => {
    const b = hostBackend('thrower', { backward: () => { throw new FAError('E_OOM', 'out of memory in test'); } });
    const r = await checkCase(b, c);
    expect(r.pass).toBe(false);
    expect(r.message).toMatch(/backward threw FAError E_OOM: out of memory in test/);
  });

  it('a wrong result dtype or shape fails; a failure says where and by how much', async () => {
    const b = referenceBackend();
    const wrongDtype = { ...b, forward: async (...a: Parameters<typeof b.forward>) => { const r = await b.forward(...a); return { out: { ...r.out, dtype: 'f32' as const }, lse: r.lse }; } };
    const r = await checkCase(wrongDtype, c);
    expect(r.pass).toBe(false);
    expect(r.message).toMatch(/out has dtype f32, expected f16/);
    const p = await checkCase(hostBackend('p', WRONG_ENGINES['perturbs one element of out']), makeCase({ dtype: 'f32', batch: 2, tq: 5, h: 2, d: 8 }));
    expect(p.message).toMatch(/out rel err .* > bound .*worst at out\[b=\d, i=\d, h=\d, d=\d\]: got .*, want/);
    const ok = await checkCase(b, makeCase({ dtype: 'bf16', tq: 5, d: 8 }));
    expect(ok.message).toMatch(/^ok: out .*lse .*dq .*dk .*dv/);
    expect(ok.metrics.map((m) => m.tensor)).toEqual(['out', 'lse', 'dq', 'dk', 'dv']);
  });

  it('can pass inputs as device tensors through upload()', async () => {
    let uploads = 0;
    const b = referenceBackend();
    const counting = { ...b, upload: async (t: Parameters<typeof b.upload>[0]) => { uploads++; return t; } };
    const r = await checkCase(counting, makeCase({ dtype: 'f32', tq: 5, d: 8 }), { upload: true });
    expect(r.pass).toBe(true);
    expect(uploads).toBe(4);
  });
});

describe('extra checks', () => {
  it('pass for the reference', async () => {
    for (const f of [checkNaNPropagation, checkRepeatable, checkBadInputs]) {
      const r = await f(referenceBackend());
      expect(r.pass, r.message).toBe(true);
    }
  });

  it('NaN: reject an engine that replaces NaN, and one that lets NaN leak across sequences', async () => {
    const clean = (t: HostTensor): HostTensor => ({ ...t, data: Float32Array.from(t.data as Float32Array, (x) => (Number.isNaN(x) ? 0 : x)) });
    const zap = hostBackend('zap', { forward: (q, k, v, o) => refOf(clean(q), clean(k), clean(v), o) });
    expect((await checkNaNPropagation(zap)).pass).toBe(false);
    const leak = hostBackend('leak', {
      forward: (q, k, v, o) => {
        const r = refOf(q, k, v, o);
        const anyNaN = [q, k, v].some((t) => Array.from(t.data as Float32Array).some(Number.isNaN));
        return anyNaN ? { out: r.out.map(() => NaN), lse: r.lse } : r;
      },
    });
    const r = await checkNaNPropagation(leak);
    expect(r.pass).toBe(false);
    expect(r.message).toMatch(/leaked/);
  });

  it('repeatability: reject an engine with state that leaks between calls', async () => {
    let calls = 0;
    const leaky = hostBackend('leaky', { forward: (q, k, v, o) => { const r = refOf(q, k, v, o); calls++; return { out: r.out.map((x) => x + calls * 1e-3), lse: r.lse }; } });
    const r = await checkRepeatable(leaky);
    expect(r.pass).toBe(false);
    expect(r.message).toMatch(/out differs between two identical calls/);
  });

  it('bad inputs: reject an engine that does not validate, and one that breaks after an error', async () => {
    const lax = hostBackend('lax', { noValidation: true, forward: () => { throw new TypeError('cannot read properties of undefined'); } });
    const r = await checkBadInputs(lax);
    expect(r.pass).toBe(false);
    expect(r.message).toMatch(/threw TypeError/);
    let broken = false;
    const b = referenceBackend();
    const fragile = {
      ...b,
      forward: async (...a: Parameters<typeof b.forward>) => {
        if (broken) throw new Error('engine is in a bad state');
        try {
          return await b.forward(...a);
        } catch (e) {
          broken = true;
          throw e;
        }
      },
    };
    const r2 = await checkBadInputs(fragile);
    expect(r2.pass).toBe(false);
    expect(r2.message).toMatch(/a valid call after the bad ones failed/);
  });
});

// defineConformanceSuite, registered with vitest itself: skipped cases appear with their reason.
const suiteLog: string[] = [];
const suiteCases = [...quick.filter((c) => c.d === 1 && c.dv === 1), ...quick.slice(0, 6)];
defineConformanceSuite(
  referenceBackend({ name: 'reference-noD1', supports: (p) => (p.d === 1 ? { ok: false, reason: 'head dim 1 unsupported' } : { ok: true }) }),
  { describe, it, expect, afterAll },
  { cases: suiteCases, extras: false, log: (l) => suiteLog.push(l) },
);
const getterLog: string[] = [];
defineConformanceSuite(async () => referenceBackend({ supports: (p) => (p.d === 1 ? { ok: false, reason: 'no D=1' } : { ok: true }) }), { describe, it, expect }, {
  name: 'getter', cases: suiteCases.slice(0, 5), extras: true, log: (l) => getterLog.push(l),
});
describe('defineConformanceSuite', () => {
  it('printed a summary line with the skip reasons', () => {
    expect(suiteLog).toEqual([`conformance reference-noD1 (float64 reference): 6 passed, 3 skipped (head dim 1 unsupported ×3), 0 failed`]);
    expect(getterLog).toEqual([`conformance getter (float64 reference): 7 passed, 3 skipped (no D=1 ×3), 0 failed`]);
  });
});
