/**
 * The model engine (src/engine.ts): linear and matmul products, forward and backward, go to the
 * engine set with setModelEngine; an engine without model ops is refused with its reason; the
 * default is the cpu kernel; float64 products (gradcheck) stay on the float64 kernel.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { cpuModelOps, isFAError, type AttentionBackend, type GemmCall, type HostModelOps } from '@fa/core';
import { Rng, linear, matmul, modelEngine, randn, setModelEngine, sum } from '@fa/autograd';

afterEach(() => setModelEngine(null));

function recording(): HostModelOps & { calls: string[] } {
  const calls: string[] = [];
  return {
    engine: 'recording',
    kernel: 'cpu, counted',
    calls,
    gemm(g: GemmCall) {
      calls.push(`${g.transA ? 't' : 'n'}${g.transB ? 't' : 'n'} ${g.M}x${g.N}x${g.K}`);
      cpuModelOps.gemm(g);
    },
  };
}

async function linearGrads() {
  const rng = new Rng(3);
  const x = randn([2, 5, 6], { rng, requiresGrad: true });
  const w = randn([4, 6], { rng, requiresGrad: true });
  const b = randn([4], { rng, requiresGrad: true });
  const y = linear(x, w, b);
  await sum(y).backward();
  return { y: y.toArray(), gx: x.grad!.toArray(), gw: w.grad!.toArray() };
}

describe('model engine', () => {
  it('defaults to the cpu kernel and resets with null', () => {
    expect(modelEngine()).toBe(cpuModelOps);
    const r = recording();
    expect(setModelEngine(r)).toBe(r);
    expect(modelEngine()).toBe(r);
    expect(setModelEngine(null)).toBe(cpuModelOps);
  });

  it('runs linear forward and both backward products on the engine set', async () => {
    const ref = await linearGrads();
    const r = recording();
    setModelEngine(r);
    const got = await linearGrads();
    expect(r.calls).toEqual(['nt 10x4x6', 'nn 10x6x4', 'tn 4x6x10']);
    expect(got).toEqual(ref); // (the recording engine is the cpu kernel: bit-identical)
  });

  it('runs batched matmul on the engine', async () => {
    const r = recording();
    setModelEngine(r);
    const rng = new Rng(4);
    const a = randn([3, 4, 5], { rng, requiresGrad: true });
    const b = randn([3, 5, 2], { rng, requiresGrad: true });
    await sum(matmul(a, b)).backward();
    expect(r.calls.length).toBe(3 + 3 + 3); // forward, dA, dB per batch entry
  });

  it('takes an engine through its modelOps and refuses one without them', () => {
    const withOps = { name: 'cpu', modelOps: cpuModelOps } as unknown as AttentionBackend;
    expect(setModelEngine(withOps)).toBe(cpuModelOps);
    const attentionOnly = { name: 'cuda' } as unknown as AttentionBackend;
    let err: unknown;
    try {
      setModelEngine(attentionOnly);
    } catch (e) {
      err = e;
    }
    expect(isFAError(err) && err.code).toBe('E_UNSUPPORTED');
    expect(String((err as Error).message)).toMatch(/cuda engine runs attention only/);
    expect(modelEngine()).toBe(cpuModelOps); // unchanged
    expect(() => setModelEngine(42 as unknown as HostModelOps)).toThrow(/setModelEngine takes an engine/);
  });

  it('keeps float64 products off the engine', () => {
    const r = recording();
    setModelEngine(r);
    const rng = new Rng(5);
    const x = randn([3, 4], { rng }).clone({ precision: 'float64' });
    const w = randn([2, 4], { rng }).clone({ precision: 'float64' });
    linear(x, w);
    expect(r.calls).toEqual([]);
  });
});
