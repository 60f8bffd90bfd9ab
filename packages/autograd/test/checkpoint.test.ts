/** checkpoint(): same gradients as the plain graph, only its inputs kept, parameters reached. */
import '@fa/core';
import { describe, expect, it } from 'vitest';
import { Linear, Rng, Tensor, TransformerBlock, checkpoint, crossEntropy, linear, memoryReport, mul, noGrad, randn, sum, formatMemoryReport } from '@fa/autograd';
import { relMaxErr } from './helpers.js';

const B = 2;
const T = 12;
const C = 16;

function model(seed: number) {
  const rng = new Rng(seed);
  const blocks = [new TransformerBlock(C, 2, { rng, attention: { causal: true, backend: 'cpu' } }), new TransformerBlock(C, 2, { rng, kvHeads: 1, attention: { causal: true, backend: 'cpu' } })];
  const head = new Linear(C, 5, { rng });
  const params = [...blocks.flatMap((b) => b.parameters()), ...head.parameters()];
  const targets = Int32Array.from({ length: B * T }, (_, i) => (i * 7) % 5);
  const run = async (x: Tensor, ckpt: boolean) => {
    for (const b of blocks) x = ckpt ? await checkpoint((h: Tensor) => b.forward(h), x) : await b.forward(x);
    return crossEntropy(head.forward(x), targets);
  };
  return { params, run };
}

describe('checkpoint', () => {
  it('gives the gradients of the plain graph (float32, cpu backend)', async () => {
    const m = model(1);
    const x = randn([B, T, C], { rng: new Rng(2), requiresGrad: true });
    const plain = await m.run(x, false);
    await plain.backward();
    const g0 = [x, ...m.params].map((p) => Float32Array.from(p.grad!.data));
    [x, ...m.params].forEach((p) => (p.grad = null));
    const ck = await m.run(x, true);
    expect(ck.item()).toBe(plain.item());
    await ck.backward();
    [x, ...m.params].forEach((p, i) => expect(relMaxErr(p.grad!.data, g0[i]), `param ${i}`).toBeLessThan(1e-6));
  });

  it('keeps only the inputs of each checkpointed block', async () => {
    const m = model(3);
    const x = randn([B, T, C], { rng: new Rng(4), requiresGrad: true });
    const h = mul(x, 1); // an activation, as a block input usually is
    const plain = memoryReport(await m.run(h, false));
    const ck = memoryReport(await m.run(h, true));
    console.log(`plain:\n${formatMemoryReport(plain)}\ncheckpointed:\n${formatMemoryReport(ck)}`);
    const act = B * T * C * 4;
    expect(ck.byOp.checkpoint.nodes).toBe(2);
    expect(ck.byOp.checkpoint.bytes).toBe(2 * act); // h and the first block's output
    expect(Object.keys(ck.byOp).sort()).toEqual(['checkpoint', 'crossEntropy', 'linear', 'mul']);
    expect(plain.bytes).toBeGreaterThan(5 * ck.bytes - 5 * (ck.byOp.crossEntropy.bytes + ck.byOp.linear.bytes));
  });

  it('reaches parameters used inside even when no input requires grad', async () => {
    const lin = new Linear(3, 2, { rng: new Rng(5) });
    const x = randn([4, 3], { rng: new Rng(6) });
    const y = await checkpoint((a: Tensor) => lin.forward(a), x);
    expect(y.requiresGrad).toBe(true);
    await sum(mul(y, y)).backward();
    lin.zeroGrad();
    const g = lin.weight.grad;
    expect(g).toBeNull();
    const y2 = await checkpoint((a: Tensor) => lin.forward(a), x);
    await sum(mul(y2, y2)).backward();
    const ref = lin.forward(x);
    lin.weight.grad = null;
    await sum(mul(ref, ref)).backward();
    expect(lin.weight.grad).not.toBeNull();
  });

  it('handles several outputs, nesting, and runs plainly under noGrad', async () => {
    const rng = new Rng(7);
    const w = randn([3, 3], { rng, requiresGrad: true });
    const x = randn([2, 3], { rng, requiresGrad: true });
    const two = (a: Tensor): Promise<Tensor[]> => checkpoint((b: Tensor) => [linear(b, w), mul(b, 2)], a);
    const [p, q] = await checkpoint(async (a: Tensor) => two(a), x);
    await sum(mul(p, q)).backward();
    const gx = Float32Array.from(x.grad!.data);
    const gw = Float32Array.from(w.grad!.data);
    x.grad = null;
    w.grad = null;
    await sum(mul(linear(x, w), mul(x, 2))).backward();
    expect(relMaxErr(gx, x.grad!.data)).toBeLessThan(1e-6);
    expect(relMaxErr(gw, w.grad!.data)).toBeLessThan(1e-6);
    const n = await noGrad(() => checkpoint((a: Tensor) => mul(a, 2), x));
    expect(n.gradFn).toBeNull();
  });
});
