/**
 * Model ops (src/ops): the op kit passes on the cpu engine's gemm, and it can fail: products
 * that drop the accumulation, mix up a transpose, round badly or skip validation are caught.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkGemm, cpuModelOps, createCpuBackend, gemmFlops, type GemmCall, type HostModelOps } from '../dist/index.js';
import { gemmCases, gemmReference, runOpConformance } from '../dist/testing/index.js';

const cpu = await createCpuBackend({ threads: 0 });
afterAll(() => cpu.dispose());

const small = gemmCases().filter((c) => c.M * c.N * c.K <= 1e6);
const names = (ops: HostModelOps) => runOpConformance(ops, { cases: small }).failures.map((f) => `${f.name}: ${f.message}`);

describe('model ops: gemm', () => {
  it('the cpu engine passes the op kit, through its modelOps', () => {
    expect(cpu.modelOps).toBe(cpuModelOps);
    const s = runOpConformance(cpu.modelOps!);
    expect(s.failures.map((f) => `${f.name}: ${f.message}`)).toEqual([]);
    expect(s.passed).toBe(gemmCases().length + 6);
  });

  it('catches a product that ignores accumulate', () => {
    const bad: HostModelOps = { engine: 'bad', kernel: 'x', gemm: (g) => cpuModelOps.gemm({ ...g, accumulate: false }) };
    expect(names(bad).some((n) => n.includes('+='))).toBe(true);
  });

  it('catches a transposed B read as if it were not', () => {
    const bad: HostModelOps = { engine: 'bad', kernel: 'x', gemm: (g) => cpuModelOps.gemm({ ...g, transB: g.N === g.K ? !g.transB : g.transB }) };
    expect(names(bad).some((n) => n.includes('gemm nt') || n.includes('gemm tt'))).toBe(true);
  });

  it('catches results rounded to bf16-like precision', () => {
    const bad: HostModelOps = {
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
    const bad: HostModelOps = { engine: 'bad', kernel: 'x', gemm: () => {} };
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
