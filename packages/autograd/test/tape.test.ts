/** The tape itself: accumulation, graph freeing, noGrad, detach, multiple roots, modules, optimizers. */
import { describe, expect, it } from 'vitest';
import {
  AdamW, Linear, LayerNorm, Module, Rng, SGD, Tensor, TransformerBlock, add, backward, clipGradNorm, isGradEnabled, linear, memoryReport, mul,
  mean, noGrad, randn, reshape, sum, tensor, zeros,
} from '@fa/autograd';

describe('reverse mode', () => {
  it('sums gradients over every use of a tensor', async () => {
    const x = tensor([1, -2, 3], [3], { requiresGrad: true });
    const y = sum(add(mul(x, x), x)); // Σ x² + x
    await y.backward();
    expect(Array.from(x.grad!.data)).toEqual([3, -3, 7]); // 2x + 1
  });

  it('accumulates into .grad across backward calls until zeroGrad', async () => {
    const x = tensor([2], [1], { requiresGrad: true });
    await sum(mul(x, 3)).backward();
    await sum(mul(x, 3)).backward();
    expect(x.grad!.item()).toBe(6);
    x.zeroGrad();
    expect(x.grad).toBeNull();
  });

  it('frees the graph after backward unless retainGraph', async () => {
    const x = tensor([1, 2], [2], { requiresGrad: true });
    const y = sum(mul(x, x));
    expect(memoryReport(y).bytes + memoryReport(y).leafBytes).toBeGreaterThan(0);
    x.zeroGrad();
    const z = sum(mul(x, x));
    await z.backward(undefined, { retainGraph: true });
    await z.backward();
    expect(Array.from(x.grad!.data)).toEqual([4, 8]);
    expect(memoryReport(z).nodes).toBe(0);
    await expect(z.backward()).rejects.toThrow(/retainGraph/);
  });

  it('backward from several roots at once, with explicit gradients', async () => {
    const x = tensor([1, 2], [2], { requiresGrad: true });
    const a = mul(x, 2);
    const b = mul(a, a);
    await backward([a, b], [Float32Array.from([1, 1]), Float32Array.from([1, 0])]);
    // d/dx [a·1 + b·(1,0)] = 2 + (2a·2, 0) = (2 + 8·1, 2)
    expect(Array.from(x.grad!.data)).toEqual([10, 2]);
  });

  it('needs a gradient for a non-scalar root, and a root that requires grad', async () => {
    const x = tensor([1, 2], [2], { requiresGrad: true });
    await expect(mul(x, 2).backward()).rejects.toMatchObject({ code: 'E_ARG' });
    await expect(tensor([1]).backward()).rejects.toMatchObject({ code: 'E_ARG' });
  });

  it('noGrad records nothing (sync and async); detach cuts the graph', async () => {
    const x = tensor([1, 2], [2], { requiresGrad: true });
    const y = noGrad(() => mul(x, x));
    expect(y.requiresGrad).toBe(false);
    expect(y.gradFn).toBeNull();
    const z = await noGrad(async () => {
      expect(isGradEnabled()).toBe(false);
      await Promise.resolve();
      return mul(x, 3);
    });
    expect(z.requiresGrad).toBe(false);
    expect(isGradEnabled()).toBe(true);
    const d = mul(x, x).detach();
    expect(d.requiresGrad).toBe(false);
  });

  it('ops never write into their inputs; reshape shares data and its gradient flows', async () => {
    const x = tensor([1, 2, 3, 4, 5, 6], [2, 3], { requiresGrad: true });
    const before = Array.from(x.data);
    const r = reshape(x, [3, -1]);
    expect(r.data).toBe(x.data);
    expect(r.shape).toEqual([3, 2]);
    await sum(mul(r, r)).backward();
    expect(Array.from(x.data)).toEqual(before);
    expect(Array.from(x.grad!.data)).toEqual(before.map((v) => 2 * v));
  });

  it('shape errors are FAErrors with E_SHAPE', () => {
    expect(() => add(zeros([2, 3]), zeros([4]))).toThrow(expect.objectContaining({ code: 'E_SHAPE' }));
    expect(() => linear(zeros([2, 3]), zeros([4, 5]))).toThrow(expect.objectContaining({ code: 'E_SHAPE' }));
    expect(() => reshape(zeros([2, 3]), [4, -1])).toThrow(expect.objectContaining({ code: 'E_SHAPE' }));
    expect(() => new Tensor(new Float32Array(3), [2, 2])).toThrow(expect.objectContaining({ code: 'E_SHAPE' }));
  });
});

describe('modules and optimizers', () => {
  it('Module finds parameters by walking fields, with dotted names', () => {
    class Net extends Module {
      readonly ln = new LayerNorm(4);
      readonly layers = [new Linear(4, 8), new Linear(8, 4, { bias: false })];
    }
    const names = new Net().namedParameters().map(([n, p]) => `${n}:${p.shape.join('x')}`);
    expect(names).toEqual(['ln.weight:4', 'ln.bias:4', 'layers.0.weight:8x4', 'layers.0.bias:8', 'layers.1.weight:4x8']);
    const block = new TransformerBlock(16, 4, { kvHeads: 2 });
    // ln1 (2·16) + q (16·16+16) + k, v (2·(8·16+8)) + proj (16·16+16) + ln2 (2·16) + fc1 (64·16+64) + fc2 (16·64+16)
    expect(block.numParameters()).toBe(32 + 272 + 2 * 136 + 272 + 32 + 1088 + 1040);
  });

  it('AdamW and SGD minimise a least-squares problem', async () => {
    const rng = new Rng(1);
    const target = randn([4, 3], { rng });
    const x = randn([16, 3], { rng });
    const y = linear(x, target);
    for (const make of [(ps: Tensor[]) => new AdamW(ps, { lr: 0.05, weightDecay: 0 }), (ps: Tensor[]) => new SGD(ps, 0.1, 0.9)]) {
      const w = zeros([4, 3], { requiresGrad: true });
      const opt = make([w]);
      let first = 0;
      let last = 0;
      for (let step = 0; step < 200; step++) {
        opt.zeroGrad();
        const d = add(linear(x, w), mul(y, -1));
        const loss = mean(mul(d, d));
        await loss.backward();
        clipGradNorm([w], 100);
        opt.step();
        if (step === 0) first = loss.item();
        last = loss.item();
      }
      expect(last).toBeLessThan(first * 1e-3);
    }
  });
});
