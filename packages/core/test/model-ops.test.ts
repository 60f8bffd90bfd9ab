/**
 * Model ops (src/ops): the op kit passes on the cpu engine's gemm, and it can fail: products
 * that drop the accumulation, mix up a transpose, round badly or skip validation are caught.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkGemm, cpuModelOps, createCpuBackend, gemmFlops, type GemmCall, type HostModelOps } from '../dist/index.js';
import { badLayerOpCalls, gemmCases, gemmReference, layerOpCases, runOpConformance } from '../dist/testing/index.js';

const cpu = await createCpuBackend({ threads: 0 });
afterAll(() => cpu.dispose());

const small = gemmCases().filter((c) => c.M * c.N * c.K <= 1e6);
const names = (ops: HostModelOps) => runOpConformance(ops, { cases: small, layerCases: [] }).failures.map((f) => `${f.name}: ${f.message}`);
const layerNames = (ops: HostModelOps) => runOpConformance(ops, { cases: [] }).failures.map((f) => `${f.name}: ${f.message}`);

describe('model ops: gemm', () => {
  it('the cpu engine passes the op kit, through its modelOps', () => {
    expect(cpu.modelOps).toBe(cpuModelOps);
    const s = runOpConformance(cpu.modelOps!);
    expect(s.failures.map((f) => `${f.name}: ${f.message}`)).toEqual([]);
    expect(s.passed).toBe(gemmCases().length + 6 + layerOpCases().length + badLayerOpCalls().length);
  });

  it('catches a product that ignores accumulate', () => {
    const bad: HostModelOps = { ...cpuModelOps, engine: 'bad', kernel: 'x', gemm: (g) => cpuModelOps.gemm({ ...g, accumulate: false }) };
    expect(names(bad).some((n) => n.includes('+='))).toBe(true);
  });

  it('catches a transposed B read as if it were not', () => {
    const bad: HostModelOps = { ...cpuModelOps, engine: 'bad', kernel: 'x', gemm: (g) => cpuModelOps.gemm({ ...g, transB: g.N === g.K ? !g.transB : g.transB }) };
    expect(names(bad).some((n) => n.includes('gemm nt') || n.includes('gemm tt'))).toBe(true);
  });

  it('catches results rounded to bf16-like precision', () => {
    const bad: HostModelOps = {
      ...cpuModelOps,
      engine: 'bad',
      kernel: 'x',
      gemm: (g) => {
        cpuModelOps.gemm(g);
        for (let i = 0; i < g.c.length; i++) g.c[i] = Math.fround(g.c[i] * (1 + 2 ** -9));
      },
    };
    expect(names(bad).length).toBeGreaterThan(0);
  });

  it('catches an engine that computes bad calls instead of refusing them', () => {
    const bad: HostModelOps = { ...cpuModelOps, engine: 'bad', kernel: 'x', gemm: () => {} };
    const f = names(bad);
    expect(f.filter((n) => n.startsWith('bad gemm')).length).toBe(6);
  });

  it('checkGemm: one-line errors with codes', () => {
    const f = (n: number) => new Float32Array(n);
    const call: GemmCall = { transA: false, transB: false, M: 2, N: 3, K: 4, a: f(8), b: f(11), c: f(6) };
    expect(() => checkGemm(call)).toThrow(/b holds 11 values; M 2, N 3, K 4 need 12/);
    expect(() => checkGemm(null as unknown as GemmCall)).toThrow(/must be an object/);
    expect(gemmFlops({ M: 2, N: 3, K: 4 })).toBe(48);
  });

  it('the reference honours both transposes and accumulate', () => {
    // A (2x3) stored transposed, B (3x2) stored transposed, C += A·B
    const a = Float32Array.of(1, 4, 2, 5, 3, 6); // A = [[1,2,3],[4,5,6]] stored 3x2
    const b = Float32Array.of(1, 0, 1, 0, 1, 1); // B = [[1,0],[0,1],[1,1]] stored 2x3: rows (1,0,1), (0,1,1)
    const c = Float32Array.of(10, 20, 30, 40);
    const ref = gemmReference({ transA: true, transB: true, M: 2, N: 2, K: 3, a, b, c, accumulate: true });
    expect(Array.from(ref)).toEqual([10 + 4, 20 + 5, 30 + 10, 40 + 11]);
  });
});

describe('model ops: the layer ops', () => {
  const broken = (patch: Partial<HostModelOps>): HostModelOps => ({ ...cpuModelOps, engine: 'bad', kernel: 'x', ...patch });

  it('catches gelu computed with the tanh form when the exact one is asked', () => {
    const f = layerNames(broken({ gelu: (c) => cpuModelOps.gelu({ ...c, approximate: 'tanh' }) }));
    expect(f.some((n) => n.startsWith('gelu none'))).toBe(true);
    expect(f.some((n) => n.startsWith('gelu tanh'))).toBe(false);
  });

  it('catches a gelu gradient that ignores accumulate', () => {
    const f = layerNames(broken({ geluBackward: (c) => cpuModelOps.geluBackward({ ...c, accumulate: false }) }));
    expect(f.some((n) => n.startsWith('geluBackward') && n.includes('+='))).toBe(true);
  });

  it('catches a layerNorm with an f32 one-pass variance (rows far from zero)', () => {
    const f = layerNames(
      broken({
        layerNorm: (c) => {
          cpuModelOps.layerNorm(c);
          for (let r = 0; r < c.rows; r++) {
            let s = 0, q = 0;
            for (let j = 0; j < c.cols; j++) {
              s = Math.fround(s + c.x[r * c.cols + j]);
              q = Math.fround(q + c.x[r * c.cols + j] ** 2);
            }
            const mu = Math.fround(s / c.cols);
            c.rstd[r] = 1 / Math.sqrt(Math.max(0, Math.fround(q / c.cols - mu * mu)) + c.eps);
            for (let j = 0; j < c.cols; j++) c.y[r * c.cols + j] = (c.x[r * c.cols + j] - mu) * c.rstd[r] * (c.weight?.[j] ?? 1) + (c.bias?.[j] ?? 0);
          }
        },
      }),
    );
    expect(f.some((n) => n.includes('mean 1000'))).toBe(true);
  });

  it('catches a layerNorm backward that drops the mean term, and dbias left unset', () => {
    expect(layerNames(broken({ layerNormBackward: (c) => cpuModelOps.layerNormBackward({ ...c, dbias: null }) })).some((n) => n.startsWith('layerNormBackward'))).toBe(true);
  });

  it('catches cross-entropy that counts ignored rows, and a gradient without the target term', () => {
    const f = layerNames(broken({ crossEntropy: (c) => { const r = cpuModelOps.crossEntropy(c); return { ...r, count: c.rows }; } }));
    expect(f.some((n) => n.startsWith('crossEntropy ') && n.includes('ignored'))).toBe(true);
    const g = layerNames(broken({ crossEntropyBackward: (c) => cpuModelOps.crossEntropyBackward({ ...c, targets: c.targets.map(() => -100), ignoreIndex: -100 }) }));
    expect(g.some((n) => n.startsWith('crossEntropyBackward'))).toBe(true);
  });

  it('catches AdamW without bias correction, and coupled weight decay', () => {
    expect(layerNames(broken({ adamw: (c) => cpuModelOps.adamw({ ...c, step: 1e6 }) })).some((n) => n.startsWith('adamw') && n.includes('step7'))).toBe(true);
    expect(layerNames(broken({ adamw: (c) => cpuModelOps.adamw({ ...c, weightDecay: 0 }) })).some((n) => /^adamw .*weightDecay 0\.\d/.test(n))).toBe(true);
  });

  it('catches a product that drops the bias, and a row sum that ignores accumulate', () => {
    expect(layerNames(broken({ gemm: (g) => cpuModelOps.gemm({ ...g, bias: null }) })).some((n) => n.includes('+ bias'))).toBe(true);
    expect(layerNames(broken({ sumRows: (c) => cpuModelOps.sumRows({ ...c, accumulate: false }) })).some((n) => n.startsWith('sumRows') && n.includes('+='))).toBe(true);
  });

  it('catches an engine that computes bad calls instead of refusing them', () => {
    const f = layerNames(broken({ gelu: () => {}, adamw: () => {}, crossEntropy: () => ({ loss: 0, count: 0 }) }));
    expect(f.filter((n) => n.startsWith('bad ')).length).toBeGreaterThanOrEqual(6);
  });
});
