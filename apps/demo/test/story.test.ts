/**
 * The story's building blocks: the per-row float64 gradient and naive-in-dtype rows against
 * @fa/core's full reference and naive simulation, the sampled-row check, chunked runs, the
 * charts, the formatting and the budget rule, and part 7's generation with a KV cache.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { naiveBackward, referenceBackward, resetBackends, resolveBackend, type AttentionBackend, type DType, type HostTensor } from '@fa/core';
import { runGeneration, type GenerationResult } from '../src/story/generate.js';
import { tokensForBudget } from '../src/commands/demo.js';
import { missingVulkanDriver } from '../src/engines.js';
import { barChart, lineChart } from '../src/story/charts.js';
import { checkRows, naiveRow, rowGradient, sampleRows, valuesOf } from '../src/story/exact.js';
import { memoryChart, throughputChart } from '../src/story/figures.js';
import { fmtBytes, fmtInt, fmtSeconds, fmtTokens, wrap } from '../src/story/format.js';
import { naiveMemory } from '../src/story/model.js';
import { naiveAttention } from '../src/story/naive.js';
import { AttentionRun, chunkBounds, makeInputs } from '../src/story/run.js';

afterAll(() => resetBackends());

function rowsOfRef(q: HostTensor, k: HostTensor, v: HostTensor, dO: HostTensor, causal: boolean, givenOut: Float32Array) {
  return referenceBackward(q, k, v, dO, causal ? { causal: true } : {}, { magnitudes: true, givenOut });
}

describe('per-row float64 gradient', () => {
  for (const causal of [false, true]) {
    it(`equals core's referenceBackward row by row (dq and magnitudes, causal=${causal})`, () => {
      const T = 37;
      const D = 12;
      const inp = makeInputs(T, D, 'f32', 3, false);
      // the out a backward engine is given: the exact one, slightly off
      const exact = referenceBackward(inp.q, inp.k, inp.v, inp.dOut, causal ? { causal: true } : {}).out;
      const given = Float32Array.from(exact, (x, i) => x * (1 + (i % 3) * 1e-4));
      const ref = rowsOfRef(inp.q, inp.k, inp.v, inp.dOut, causal, given);
      const [Q, K, V, DO] = [inp.q, inp.k, inp.v, inp.dOut].map(valuesOf);
      for (const i of [0, 1, 17, T - 1]) {
        const out = ref.out.subarray(i * D, i * D + D);
        const g = rowGradient(Q, K, V, DO, D, i, causal ? i : T - 1, 1 / Math.sqrt(D), out, ref.lse[i], given.subarray(i * D, i * D + D));
        for (let d = 0; d < D; d++) {
          expect(g.dq[d]).toBeCloseTo(ref.dq[i * D + d], 12);
          expect(g.magOut[d]).toBeCloseTo(ref.mag!.out[i * D + d], 10);
          expect(g.magDq[d]).toBeCloseTo(ref.magGrad!.dq[i * D + d], 10);
          expect(g.corr[d]).toBeCloseTo(ref.outCorrection!.dq[i * D + d], 12);
        }
        expect(g.magLse).toBeCloseTo(ref.mag!.lse[i], 10);
      }
    });
  }
});

describe('naive attention in the dtype, per row', () => {
  for (const dtype of ['bf16', 'f16'] as DType[]) {
    it(`is bit-identical to core's naive simulation (${dtype})`, () => {
      const T = 29;
      const D = 8;
      const inp = makeInputs(T, D, dtype, 5, false);
      for (const causal of [false, true]) {
        const nb = naiveBackward(inp.q, inp.k, inp.v, inp.dOut, causal ? { causal: true } : {});
        const [Q, K, V, DO] = [inp.q, inp.k, inp.v, inp.dOut].map(valuesOf);
        for (const i of [0, 13, T - 1]) {
          const r = naiveRow(Q, K, V, DO, D, i, causal ? i : T - 1, 1 / Math.sqrt(D), dtype);
          expect(Array.from(r.out)).toEqual(Array.from(nb.out.subarray(i * D, i * D + D)));
          expect(Array.from(r.dq)).toEqual(Array.from(nb.dq.subarray(i * D, i * D + D)));
        }
      }
    });
  }
});

describe('the sampled-row check', () => {
  it('samples the first, the last and distinct random rows', () => {
    const r = sampleRows(100_000, 64, 1);
    expect(r).toHaveLength(64);
    expect(r[0]).toBe(0);
    expect(r[63]).toBe(99_999);
    expect(new Set(r).size).toBe(64);
    expect([...r].sort((a, b) => a - b)).toEqual(r);
    expect(sampleRows(10, 64)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('passes the CPU engine and fails a perturbed result', async () => {
    const cpu = await resolveBackend('cpu');
    for (const dtype of ['f32', 'bf16'] as DType[]) {
      const inp = makeInputs(300, 16, dtype, 9);
      const run = new AttentionRun(cpu, inp, true);
      const f = await run.forward({ single: true });
      const g = await run.backward({ single: true });
      const rows = sampleRows(300, 64, 2);
      const ok = checkRows({ ...inp, causal: true, out: f.out, lse: f.lse, dq: g.dq }, rows);
      expect(ok.verified, JSON.stringify(ok)).toBe(true);
      const bad = Float32Array.from(f.out);
      bad[rows[5] * 16 + 3] += dtype === 'f32' ? 1e-3 : 0.1;
      const no = checkRows({ ...inp, causal: true, out: bad, lse: f.lse }, rows);
      expect(no.verified).toBe(false);
      expect(no.out.pass).toBe(false);
      expect(no.out.worstRow).toBe(rows[5]);
      const badLse = Float32Array.from(f.lse);
      badLse[rows.at(-1)!] += 1e-3;
      expect(checkRows({ ...inp, causal: true, out: f.out, lse: badLse }, rows).lse.pass).toBe(false);
    }
  });
});

describe('chunked runs', () => {
  it('cuts rows into increasing chunks at multiples of 64, equal FLOPs when causal', () => {
    for (const [T, n, causal] of [[1000, 4, false], [6400, 20, true], [100, 3, false], [64, 5, true]] as const) {
      const b = chunkBounds(T, n, causal);
      expect(b[0]).toBe(0);
      expect(b.at(-1)).toBe(T);
      for (let i = 1; i < b.length; i++) expect(b[i]).toBeGreaterThan(b[i - 1]);
      for (const x of b.slice(1, -1)) expect(x % 64).toBe(0);
    }
    const c = chunkBounds(6400, 4, true);
    expect(c[1]).toBeGreaterThan(6400 / 4); // the first causal chunk has the cheapest rows
  });

  it('gives the same results as one call (forward and dq; dk, dv summed over chunks)', async () => {
    const cpu = await resolveBackend('cpu');
    for (const causal of [false, true]) {
      const inp = makeInputs(640, 32, 'f32', 11);
      const one = new AttentionRun(cpu, inp, causal);
      const f1 = await one.forward({ single: true });
      const g1 = await one.backward({ single: true });
      const many = new AttentionRun(cpu, inp, causal);
      let calls = 0;
      const f2 = await many.forward({ predictedSeconds: 10, chunkSeconds: 1, progress: () => calls++ });
      const g2 = await many.backward({ predictedSeconds: 10, chunkSeconds: 1 });
      expect(f2.chunks).toBeGreaterThan(1);
      expect(g2.chunks).toBeGreaterThan(1);
      expect(calls).toBe(f2.chunks + 1);
      for (let i = 0; i < f1.out.length; i++) expect(f2.out[i]).toBeCloseTo(f1.out[i], 6);
      for (let i = 0; i < f1.lse.length; i++) expect(f2.lse[i]).toBeCloseTo(f1.lse[i], 5);
      for (let i = 0; i < g1.dq.length; i++) expect(g2.dq[i]).toBeCloseTo(g1.dq[i], 6);
    }
  });
});

describe('memory', () => {
  it('naive needs 2·T²·e bytes for S and P; the textbook implementation allocates them', () => {
    expect(naiveMemory(100_000, 'bf16').scores.bf16).toBe(2e10);
    expect(naiveMemory(100_000, 'f32').forward).toBe(8e10);
    expect(naiveMemory(100_000, 'f32').storedP).toBe(4e10);
    const inp = makeInputs(64, 8, 'f32', 1, false);
    const r = naiveAttention(inp.q.data as Float32Array, inp.k.data as Float32Array, inp.v.data as Float32Array, 64, 8, false);
    const ref = referenceBackward(inp.q, inp.k, inp.v, inp.dOut);
    for (let i = 0; i < r.out.length; i++) expect(r.out[i]).toBeCloseTo(ref.out[i], 5);
  });
});

describe('charts', () => {
  it('are SVG with no external references', () => {
    const svg = memoryChart({ dtype: 'f32', points: [{ T: 512, flash: 3000, naive: 2 * 512 * 512 * 4 }], limits: [{ y: 8e9, label: 'RAM' }] });
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).not.toMatch(/https?:|xlink|href/);
    expect(svg).toMatch(/<polyline class="series"/);
    expect((svg.match(/<circle class="point"/g) ?? []).length).toBe(2);
    expect(svg).toMatch(/class="hline"/);
    const t = throughputChart([{ backend: 'cpu', device: 'CPU ×2', T: 1024, D: 64, dtype: 'f32', causal: false, forwardSeconds: 1, backwardSeconds: 2, forwardRate: 5e8, backwardRate: 6e8 }]);
    expect((t.match(/<rect class="bar"/g) ?? []).length).toBe(2);
    expect(lineChart({ title: '<&>', xLabel: 'x', yLabel: 'y', series: [] })).toContain('&lt;&amp;&gt;');
    expect(barChart({ title: 't', xLabel: 'x', groups: ['a'], bars: [{ label: 'a', values: [1] }, { label: 'b', values: [1e6] }] })).toMatch(/log scale/);
  });
});

describe('formatting and the budget', () => {
  it('formats numbers with units', () => {
    expect(fmtBytes(2e10)).toBe('20.0 GB');
    expect(fmtBytes(4e5)).toBe('400 kB');
    expect(fmtBytes(0)).toBe('0 B');
    expect(fmtInt(100000)).toBe('100,000');
    expect(fmtTokens(100000)).toBe('100K');
    expect(fmtSeconds(0.0123)).toBe('12.3 ms');
    expect(fmtSeconds(4.2)).toBe('4.20 s');
    expect(fmtSeconds(185)).toBe('3 min 05 s');
    expect(fmtSeconds(3720)).toBe('1 h 02 min');
    expect(wrap('a bb ccc dddd', 6, ' ')).toEqual([' a bb', ' ccc', ' dddd']);
  });

  it('picks the largest T (a multiple of 256) whose forward + backward fits the budget', () => {
    const T = tokensForBudget(60, 64, false, 1e9, 1e9);
    // 4·T²·64·(1 + 2.5) / 1e9 ≤ 60
    expect(T % 256).toBe(0);
    expect(4 * T * T * 64 * 3.5 / 1e9).toBeLessThanOrEqual(60);
    expect(4 * (T + 256) ** 2 * 64 * 3.5 / 1e9).toBeGreaterThan(60);
    expect(tokensForBudget(60, 64, true, 1e9, 1e9)).toBeGreaterThan(T);
    expect(tokensForBudget(1e-6, 64, false, 1e9, 1e9)).toBe(256);
    expect(tokensForBudget(1e9, 64, false, 1e15, 1e15)).toBe(100_000);
  });
});

describe('starting Dawn only when Vulkan has a driver', () => {
  it('says why when the loader would find no ICD, and defers to the environment otherwise', () => {
    if (process.platform !== 'linux') return;
    const none = { XDG_CONFIG_DIRS: '/nonexistent', XDG_DATA_DIRS: '/nonexistent' };
    // /etc/vulkan/icd.d is always searched: only assert when this machine has none there
    const etc = missingVulkanDriver({ XDG_CONFIG_DIRS: '/nonexistent', XDG_DATA_DIRS: '/nonexistent', HOME: '/nonexistent' });
    if (etc !== undefined) expect(etc).toMatch(/no Vulkan driver found/);
    expect(missingVulkanDriver({ ...none, VK_ICD_FILENAMES: '/x/icd.json' })).toBeUndefined();
    expect(missingVulkanDriver({ ...none, VK_DRIVER_FILES: '/x/icd.json' })).toBeUndefined();
    expect(missingVulkanDriver({ ...none, FA_WEBGPU_PROBE: '1' })).toBeUndefined();
  });
});

describe('part 7: generation with a KV cache', () => {
  it('passes on the CPU engine, in bf16 too', async () => {
    const be = await resolveBackend('cpu');
    for (const dtype of ['f32', 'bf16'] as const) {
      const g = await runGeneration(be, { context: 600, steps: 3, d: 16, dtype, seed: 3 });
      expect('skipped' in g).toBe(false);
      const r = g as GenerationResult;
      expect(r.pass, `${dtype}: ${r.maxRelDiff} ${r.referenceRel}`).toBe(true);
      expect(r.perToken).toHaveLength(3);
    }
  });

  it('fails an engine whose cache drops the appended token, and reports a decline as skipped', async () => {
    const be = await resolveBackend('cpu');
    const forgetful: AttentionBackend = Object.create(be);
    forgetful.forwardWithKVCache = (q, kc, vc, o) => be.forwardWithKVCache(q, kc, vc, { ...o, kNew: undefined, vNew: undefined });
    const g = (await runGeneration(forgetful, { context: 300, steps: 2, d: 8, dtype: 'f32', seed: 4 })) as GenerationResult;
    expect(g.pass).toBe(false);
    const shy: AttentionBackend = Object.create(be);
    shy.supportsKVCache = () => ({ ok: false, reason: 'no KV cache here' });
    expect(await runGeneration(shy, { context: 300, steps: 2, d: 8, dtype: 'f32', seed: 4 })).toEqual({ skipped: 'no KV cache here' });
  });
});

describe('part 9 with every tensor on the device', () => {
  it('the GPT trains and generates on the WebGPU engine (forced: on this CPU adapter auto keeps the host engines)', async (ctx) => {
    await import('@fa/webgpu').catch(() => undefined);
    const gpu = await resolveBackend('webgpu').catch(() => undefined);
    if (!gpu) {
      ctx.skip('no WebGPU adapter here');
      return;
    }
    const { runTraining, TRAIN_DEFAULTS } = await import('../src/story/train.js');
    const cpu = await resolveBackend('cpu');
    const auto = { ...TRAIN_DEFAULTS, seconds: 0, T: 48, batch: 4, layers: 2, dModel: 64 };
    const r = await runTraining(gpu, [cpu], { ...auto, onDevice: true });
    expect(r.modelOps.engine).toBe('webgpu');
    expect(r.cachedEqualsRecomputed).toBe(true);
    expect(r.steps).toBeGreaterThanOrEqual(2);
    expect(Number.isFinite(r.lastLoss)).toBe(true);
  }, 240_000);
});
