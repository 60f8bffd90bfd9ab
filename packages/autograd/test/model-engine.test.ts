/**
 * The model engine (src/engine.ts): linear and matmul products, forward and backward, and the
 * float32 work of gelu, layerNorm, crossEntropy, AdamW and linear's bias gradient go to the
 * engine set with setModelEngine; an engine without model ops (or with only some) is refused with
 * its reason; the default is the cpu kernels; float64 work (gradcheck) stays on the float64 code.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { cpuModelOps, isFAError, MODEL_OP_NAMES, type AttentionBackend, type GemmCall, type HostModelOps } from '@fa/core';
import { AdamW, Rng, crossEntropy, gelu, layerNorm, linear, matmul, modelEngine, randn, setModelEngine, sum } from '@fa/autograd';

afterEach(() => setModelEngine(null));

/** The cpu ops, recording each product's shape (calls) and every other op's name (others). */
function recording(): HostModelOps & { calls: string[]; others: string[] } {
  const calls: string[] = [];
  const others: string[] = [];
  const ops = { ...cpuModelOps, engine: 'recording', kernel: 'cpu, counted', calls, others } as HostModelOps & { calls: string[]; others: string[] };
  for (const name of MODEL_OP_NAMES) {
    if (name === 'gemm') continue;
    const f = cpuModelOps[name] as (c: unknown) => unknown;
    (ops as unknown as Record<string, unknown>)[name] = (c: unknown) => (others.push(name), f(c));
  }
  ops.gemm = (g: GemmCall) => {
    calls.push(`${g.transA ? 't' : 'n'}${g.transB ? 't' : 'n'} ${g.M}x${g.N}x${g.K}${g.bias ? ' +bias' : ''}`);
    cpuModelOps.gemm(g);
  };
  return ops;
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
    expect(r.calls).toEqual(['nt 10x4x6 +bias', 'nn 10x6x4', 'tn 4x6x10']);
    expect(r.others).toEqual(['sumRows']); // the bias gradient
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

  it('runs gelu, layerNorm, crossEntropy and AdamW on the engine, forward and backward', async () => {
    const run = async () => {
      const rng = new Rng(5);
      const x = randn([6, 8], { rng, requiresGrad: true });
      const w = randn([8], { rng, requiresGrad: true });
      const b = randn([8], { rng, requiresGrad: true });
      const lin = randn([5, 8], { rng, requiresGrad: true });
      const h = linear(gelu(layerNorm(x, w, b)), lin);
      const loss = crossEntropy(h, Int32Array.of(0, 1, 2, 3, 4, -100));
      await loss.backward();
      new AdamW([x, w, b, lin], { lr: 0.1 }).step();
      return [loss.item(), ...x.toArray().flat(), ...lin.toArray().flat()];
    };
    const ref = await run();
    const r = recording();
    setModelEngine(r);
    const got = await run();
    expect([...new Set(r.others)].sort()).toEqual(['adamw', 'crossEntropy', 'crossEntropyBackward', 'gelu', 'geluBackward', 'layerNorm', 'layerNormBackward']);
    expect(r.others.filter((n) => n === 'adamw').length).toBe(4);
    expect(got).toEqual(ref);
  });

  it('refuses model ops that lack some op, naming them', () => {
    let err: unknown;
    try {
      setModelEngine({ engine: 'partial', kernel: 'x', gemm: cpuModelOps.gemm } as unknown as HostModelOps);
    } catch (e) {
      err = e;
    }
    expect(isFAError(err) && err.code).toBe('E_UNSUPPORTED');
    expect(String((err as Error).message)).toMatch(/partial lacks model ops gelu, geluBackward, layerNorm/);
    expect(modelEngine()).toBe(cpuModelOps);
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
