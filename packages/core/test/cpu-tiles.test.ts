import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { chooseTiles, createCpuBackend, DEFAULT_CPU_CACHE, paddedD, workingSetBytes, type CpuBackend } from '../dist/index.js';
import { buildProblem, lseCheck, problemSpec, referenceOf, relCheck, valuesOf, type ProblemSpec } from './cpu-helpers.js';

describe('tile sizes from the cache model (chooseTiles)', () => {
  const dims = Array.from({ length: 256 }, (_, i) => i + 1);

  it('D = 64 on the default model (32 KiB L1, 512 KiB L2): forward 128×32, backward 56×32', () => {
    expect(chooseTiles(64, 'forward')).toEqual({ br: 128, bc: 32 });
    expect(chooseTiles(64, 'backward')).toEqual({ br: 56, bc: 32 });
  });

  for (const pass of ['forward', 'backward'] as const) {
    it(`${pass}: sizes are multiples of 4 in [16, 128], br ≥ bc, and fit the model unless clamped`, () => {
      for (const d of dims) {
        const { br, bc } = chooseTiles(d, pass);
        expect(br % 4).toBe(0);
        expect(bc % 4).toBe(0);
        expect(bc).toBeGreaterThanOrEqual(16);
        expect(br).toBeLessThanOrEqual(128);
        expect(br).toBeGreaterThanOrEqual(bc);
        // the swept K/V tile fills at most half of L1 (unless bc is at its floor of 16)
        if (bc > 16) expect(bc * paddedD(d) * 8).toBeLessThanOrEqual(DEFAULT_CPU_CACHE.l1Bytes / 2);
        // the step's working set fits half of L2 (unless br is at its floor)
        if (br > Math.max(16, bc)) expect(workingSetBytes(pass, br, bc, d)).toBeLessThanOrEqual(DEFAULT_CPU_CACHE.l2Bytes / 2);
        // and a larger br (by 4) would not fit, unless br is at its ceiling
        if (br < 128) expect(workingSetBytes(pass, br + 4, bc, d)).toBeGreaterThan(DEFAULT_CPU_CACHE.l2Bytes / 2);
      }
    });

    it(`${pass}: tiles shrink (never grow) as D grows, and grow with the caches`, () => {
      for (let d = 2; d <= 256; d++) {
        const a = chooseTiles(d - 1, pass);
        const b = chooseTiles(d, pass);
        expect(b.bc).toBeLessThanOrEqual(a.bc);
        if (b.bc === a.bc) expect(b.br).toBeLessThanOrEqual(a.br);
      }
      const big = { l1Bytes: 64 * 1024, l2Bytes: 2 * 1024 * 1024 };
      for (const d of [32, 64, 128, 256]) {
        const a = chooseTiles(d, pass);
        const b = chooseTiles(d, pass, big);
        expect(b.bc).toBeGreaterThanOrEqual(a.bc);
        expect(b.br).toBeGreaterThanOrEqual(a.br);
      }
    });
  }

  it('the engine uses the model unless the `tiles` option overrides it', async () => {
    const a = await createCpuBackend({ threads: 0 });
    expect(a.tileSizes(64, 'forward')).toEqual(chooseTiles(64, 'forward'));
    expect(a.tileSizes(64, 'backward')).toEqual(chooseTiles(64, 'backward'));
    const b = await createCpuBackend({ threads: 0, tiles: { br: 5, bc: 7 } });
    expect(b.tileSizes(64, 'forward')).toEqual({ br: 5, bc: 7 });
    expect(b.tileSizes(64, 'backward')).toEqual({ br: 5, bc: 7 });
    await expect(createCpuBackend({ threads: 0, tiles: { br: 0, bc: 7 } })).rejects.toMatchObject({ code: 'E_ARG' });
  });
});

/** Runs forward + backward and checks both against the float64 reference. */
async function checkAgainstReference(be: CpuBackend, spec: ProblemSpec): Promise<void> {
  const p = buildProblem(spec);
  const ref = referenceOf(p);
  const f = await be.forward(p.q, p.k, p.v, p.opts);
  const g = await be.backward(p.q, p.k, p.v, f.out, p.dOut, f.lse, p.opts);
  const fails = [
    relCheck('out', valuesOf(f.out as never), ref.out, ref.mag!.out),
    lseCheck(valuesOf(f.lse as never), ref.lse, ref.mag!.lse),
    relCheck('dq', valuesOf(g.dq as never), ref.dq, ref.magGrad!.dq),
    relCheck('dk', valuesOf(g.dk as never), ref.dk, ref.magGrad!.dk),
    relCheck('dv', valuesOf(g.dv as never), ref.dv, ref.magGrad!.dv),
  ].filter((x) => x !== undefined);
  if (fails.length) expect.fail(`${fails.join('; ')}\nspec ${JSON.stringify(spec)}`);
}

describe('the result does not depend on tile sizes (fast-check, against the float64 reference, 1e-5 relative)', () => {
  const tile = fc.integer({ min: 1, max: 48 });

  it('random problems (every option, varlen with empty segments, GQA, Tq ≠ Tk) × random Br, Bc — inline (either backward pre-pass)', async () => {
    await fc.assert(
      fc.asyncProperty(problemSpec, tile, tile, fc.boolean(), async (spec, br, bc, exactRowStats) => {
        const be = await createCpuBackend({ threads: 0, tiles: { br, bc }, exactRowStats });
        await checkAgainstReference(be, spec);
      }),
      { numRuns: 150, seed: 424242 },
    );
  });

  // Worker threads, with the inline threshold at 0 so even small problems go through the pool:
  // the forward's (batch, kv head, query tile) units and both backward plans (one unit per
  // (batch, kv head) group, or key-tile slices with private dQ accumulators when groups are
  // fewer than threads).
  const pooled: CpuBackend[] = [];
  afterAll(async () => {
    for (const b of pooled) await b.dispose();
  });

  it('random problems × random Br, Bc — on 2 and 3 worker threads', async () => {
    const configs = [
      { threads: 2, tiles: { br: 7, bc: 5 } },
      { threads: 3, tiles: { br: 4, bc: 13 } },
      { threads: 2, tiles: { br: 32, bc: 16 } },
    ];
    for (const c of configs) pooled.push(await createCpuBackend({ ...c, inlineBelowFlops: 0 }));
    await fc.assert(
      fc.asyncProperty(problemSpec, fc.integer({ min: 0, max: configs.length - 1 }), async (spec, i) => {
        await checkAgainstReference(pooled[i], spec);
      }),
      { numRuns: 60, seed: 99 },
    );
  });
});
