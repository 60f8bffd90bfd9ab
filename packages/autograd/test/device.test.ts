/**
 * Tensors on the engine (issue 25): an MLP's training step (linear with bias, gelu, linear,
 * cross-entropy, backward, AdamW) with every tensor on the WebGPU engine's device — nothing read
 * back inside the step — against the same model on the host (float32 cpu model ops): the same
 * losses and parameters to float32's rule. Ops without a device path refuse device tensors.
 */
import { describe, expect, it } from 'vitest';
import { FAError } from '@fa/core';
import { AdamW, GPT, add, sub, dropout, Linear, Rng, SGD, Tensor, checkpoint, clipGradNorm, clipGradNormAsync, crossEntropy, matmul, permute, softmax, gelu, linear, isDeviceEngine, mean, scale, sum, mul, type DeviceEngine } from '@fa/autograd';
import { relNormErr } from './helpers.js';

let engine: DeviceEngine | undefined;
let batching: DeviceEngine | undefined;
let why = '';
try {
  const dist = new URL('../../webgpu/dist/index.js', import.meta.url).href;
  const { createWebGPUBackend } = (await import(/* @vite-ignore */ dist)) as typeof import('@fa/webgpu');
  const b = await createWebGPUBackend();
  if (isDeviceEngine(b)) engine = b as unknown as DeviceEngine;
  else why = 'the webgpu backend has no device ops';
  batching = (await createWebGPUBackend({ batchCalls: true })) as unknown as DeviceEngine;
} catch (e) {
  why = (e as Error).message.split('\n')[0];
}

describe('autograd tensors on the webgpu engine', () => {
  if (!engine) {
    it.skip(`skipped: no WebGPU here (${why})`, () => undefined);
    return;
  }
  const e = engine;

  it('an MLP trains on the device as on the host: same losses and weights, nothing read inside a step', async () => {
    const [B, I, H, V] = [24, 16, 32, 10];
    const rng = new Rng(7);
    const host = [new Linear(I, H, { rng }), new Linear(H, V, { rng })].flatMap((l) => [l.weight, l.bias!]);
    // the device model starts from the host model's weights
    const onDev = await Promise.all(host.map((p) => p.to(e, { requiresGrad: true, name: p.name })));
    const x = new Tensor(Float32Array.from({ length: B * I }, () => rng.normal(0, 1)), [B, I]);
    const xd = await x.to(e);
    const targets = Int32Array.from({ length: B }, (_, i) => (i * 3) % V);
    const optH = new AdamW(host, { lr: 1e-2 });
    const optD = new AdamW(onDev, { lr: 1e-2 });
    const step = (ps: Tensor[], input: Tensor) => crossEntropy(linear(gelu(linear(input, ps[0], ps[1])), ps[2], ps[3]), targets);
    const lossesH: number[] = [], lossesD: Tensor[] = [];
    for (let s = 0; s < 8; s++) {
      optH.zeroGrad();
      const lh = step(host, x);
      await lh.backward();
      optH.step();
      lossesH.push(lh.item());
      optD.zeroGrad();
      const ld = step(onDev, xd);
      expect(ld.onDevice).toBe(true);
      await ld.backward();
      optD.step();
      lossesD.push(ld);
    }
    // one read at the end of all steps
    const got = await Promise.all(lossesD.map((l) => l.value()));
    for (let s = 0; s < got.length; s++) expect(Math.abs(got[s] - lossesH[s]) / Math.abs(lossesH[s])).toBeLessThan(1e-4);
    expect(got[got.length - 1]).toBeLessThan(got[0]);
    const w = await onDev[2].toHost();
    expect(relNormErr(w.data, host[2].data)).toBeLessThan(1e-4);
    const g = await onDev[0].grad!.toHost();
    expect(relNormErr(g.data, host[0].grad!.data)).toBeLessThan(1e-4);
  });

  for (const [style, batched] of [['gpt2', false], ['gpt2-dropout', false], ['llama', false], ['llama', true], ['gpt-oss', false]] as const) {
    it(`a ${style}-style GPT trains on the device as on the host (embeddings, norms, attention, MLP, tied head, AdamW)${batched ? ', calls batched a turn' : ''}`, async () => {
      const e = batched ? batching! : engine!;
      // gpt-oss-style: a learnable attention sink per head (read back once per attention call)
      const cfg = style === 'llama' || style === 'gpt-oss'
        ? { vocab: 29, maxT: 16, dModel: 32, layers: 2, heads: 4, kvHeads: 2, positions: 'rotary' as const, norm: 'rms' as const, mlp: 'swiglu' as const, seed: 3, sinks: style === 'gpt-oss' }
        : { vocab: 29, maxT: 16, dModel: 32, layers: 2, heads: 4, seed: 3, ...(style === 'gpt2-dropout' ? { dropout: 0.1 } : {}) };
      const host = new GPT(cfg), dev = await new GPT(cfg).to(e);
      expect(dev.parameters().every((p) => p.onDevice)).toBe(true);
      expect(dev.parameters().length).toBe(host.parameters().length); // (the tied head stays tied)
      const [B, T] = [2, 12];
      const ids = Int32Array.from({ length: B * T }, (_, i) => (i * 7 + 3) % cfg.vocab);
      const targets = Int32Array.from({ length: B * T }, (_, i) => (i * 5 + 1) % cfg.vocab);
      const optH = new AdamW(host.parameters(), { lr: 3e-3 }), optD = new AdamW(dev.parameters(), { lr: 3e-3 });
      const lh: number[] = [], ld: Tensor[] = [];
      for (let s = 0; s < 4; s++) {
        for (const [m, opt, out] of [[host, optH, lh], [dev, optD, ld]] as const) {
          opt.zeroGrad();
          // (with dropout: one seed a step, the same masks on the host and on the device)
          const logits = await m.forward(ids, B, style === 'gpt2-dropout' ? { dropoutSeed: 100 + s } : {});
          const loss = crossEntropy(logits, targets);
          await loss.backward();
          opt.step();
          if (m === host) (out as number[]).push(loss.item());
          else (out as Tensor[]).push(loss);
        }
      }
      const got = await Promise.all(ld.map((l) => l.value()));
      for (let s = 0; s < got.length; s++) expect(Math.abs(got[s] - lh[s]) / lh[s], `step ${s}: device ${got[s]}, host ${lh[s]}`).toBeLessThan(2e-3);
      if (cfg.sinks) {
        // the sinks learned: they moved from 0, the same way on both
        const hs = host.blocks[0].attn.sinks!, ds = await dev.blocks[0].attn.sinks!.toHost();
        expect(Math.max(...Array.from(hs.data as Float32Array, Math.abs))).toBeGreaterThan(1e-4);
        expect(relNormErr(ds.data, hs.data)).toBeLessThan(2e-2);
      }
    });
  }

  it('sum, mean and scale, and SGD with momentum, on the device as on the host', async () => {
    const x = new Tensor(Float32Array.from({ length: 37 }, (_, i) => Math.sin(i)), [37], { requiresGrad: true });
    const xd = await x.to(e, { requiresGrad: true });
    const f = (t: Tensor) => mean(scale(gelu(t), 3));
    const lh = f(x), ld = f(xd);
    await lh.backward();
    await ld.backward();
    expect(Math.abs((await ld.value()) - lh.item())).toBeLessThan(1e-6);
    expect(relNormErr((await xd.grad!.toHost()).data, x.grad!.data)).toBeLessThan(1e-6);
    expect(Math.abs((await sum(xd).value()) - sum(x).item())).toBeLessThan(1e-5);
    // a long vector: partial sums over ~1024 workgroups, then one
    const big = new Tensor(Float32Array.from({ length: 300_001 }, (_, i) => Math.sin(i) + 0.25), [300_001]);
    expect(Math.abs((await sum(await big.to(e)).value()) - sum(big).item()) / Math.abs(sum(big).item())).toBeLessThan(1e-5);
    const oh = new SGD([x], 0.1, 0.9), od = new SGD([xd], 0.1, 0.9);
    oh.step(); od.step();
    oh.step(); od.step();
    expect(relNormErr((await xd.toHost()).data, x.data)).toBeLessThan(1e-6);
  });

  it('checkpoint() recomputes on the device, with the gradients of the plain graph', async () => {
    const w = new Tensor(Float32Array.from({ length: 64 }, (_, i) => Math.sin(i) / 4), [8, 8], { requiresGrad: true });
    const x = new Tensor(Float32Array.from({ length: 40 }, (_, i) => Math.cos(i)), [5, 8]);
    const wd = await w.to(e, { requiresGrad: true }), xd = await x.to(e);
    const block = async (a: Tensor, ww: Tensor) => gelu(linear(gelu(linear(a, ww)), ww));
    const lh = mean(await block(x, w));
    await lh.backward();
    const ld = mean(await checkpoint((a: Tensor) => block(a, wd), xd));
    await ld.backward();
    expect(Math.abs((await ld.value()) - lh.item())).toBeLessThan(1e-6);
    expect(relNormErr((await wd.grad!.toHost()).data, w.grad!.data)).toBeLessThan(1e-5);
  });

  it('mul (same shape and a trailing broadcast), softmax along any axis and permute, forward and backward, as on the host', async () => {
    const vals = (n: number, s: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 1.7 + s));
    const a = new Tensor(vals(2 * 3 * 4 * 5, 1), [2, 3, 4, 5], { requiresGrad: true });
    const b = new Tensor(vals(4 * 5, 2), [4, 5], { requiresGrad: true });
    const c = new Tensor(vals(2 * 3 * 4 * 5, 3), [2, 3, 4, 5], { requiresGrad: true });
    const [ad, bd, cd] = await Promise.all([a, b, c].map((t) => t.to(e, { requiresGrad: true })));
    const f = (x: Tensor, y: Tensor, z: Tensor) => mean(mul(permute(softmax(mul(x, y), 1), [0, 2, 3, 1]), permute(z, [0, 2, 3, 1])));
    const lh = f(a, b, c), ld = f(ad, bd, cd);
    await lh.backward();
    await ld.backward();
    expect(Math.abs((await ld.value()) - lh.item()) / Math.abs(lh.item())).toBeLessThan(1e-5);
    for (const [hd, dd] of [[a, ad], [b, bd], [c, cd]] as const) expect(relNormErr((await dd.grad!.toHost()).data, hd.grad!.data)).toBeLessThan(1e-5);
  });

  it('dropout drops the host\'s elements on the device (one mask everywhere), forward and backward', async () => {
    const x = new Tensor(Float32Array.from({ length: 1031 }, (_, i) => Math.cos(i * 0.37)), [1031], { requiresGrad: true });
    const xd = await x.to(e, { requiresGrad: true });
    const w = new Tensor(Float32Array.from({ length: 1031 }, (_, i) => Math.sin(i)), [1031]);
    const wd = await w.to(e);
    const lh = sum(mul(dropout(x, 0.4, { seed: 11, offset: 3 }), w)), ld = sum(mul(dropout(xd, 0.4, { seed: 11, offset: 3 }), wd));
    await lh.backward();
    await ld.backward();
    expect(Math.abs((await ld.value()) - lh.item()) / Math.abs(lh.item())).toBeLessThan(1e-5);
    const gh = x.grad!.data, gd = (await xd.grad!.toHost()).data;
    for (let i = 0; i < gh.length; i++) expect(gd[i] === 0).toBe(gh[i] === 0);
    expect(relNormErr(gd, gh)).toBeLessThan(1e-6);
  });

  it('add, sub and mul with NumPy broadcasting on both sides, forward and backward, as on the host', async () => {
    const vals = (n: number, s: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 1.3 + s));
    for (const [sa, sb] of [[[2, 1, 4], [3, 1]], [[2, 3, 4], [2, 1, 4]], [[1, 5], [4, 1]], [[3, 1, 2, 1], [1, 4, 1, 5]]] as [number[], number[]][]) {
      const a = new Tensor(vals(sa.reduce((x, y) => x * y, 1), 1), sa, { requiresGrad: true });
      const b = new Tensor(vals(sb.reduce((x, y) => x * y, 1), 2), sb, { requiresGrad: true });
      const [ad, bd] = await Promise.all([a.to(e, { requiresGrad: true }), b.to(e, { requiresGrad: true })]);
      const f = (x: Tensor, y: Tensor) => mean(gelu(mul(sub(add(x, y), y), add(y, x))));
      const lh = f(a, b), ld = f(ad, bd);
      await lh.backward();
      await ld.backward();
      expect(Math.abs((await ld.value()) - lh.item()) / Math.abs(lh.item()), `${sa} ⊕ ${sb}`).toBeLessThan(1e-5);
      expect(relNormErr((await ad.grad!.toHost()).data, a.grad!.data), `da ${sa} ⊕ ${sb}`).toBeLessThan(1e-5);
      expect(relNormErr((await bd.grad!.toHost()).data, b.grad!.data), `db ${sa} ⊕ ${sb}`).toBeLessThan(1e-5);
    }
  });

  it('matmul: 2-D, batched × batched, batched × matrix and matrix × batched, as on the host', async () => {
    const vals = (n: number, s: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.9 + s));
    for (const [sa, sb] of [[[5, 6], [6, 7]], [[3, 5, 6], [3, 6, 7]], [[2, 3, 5, 6], [6, 7]], [[5, 6], [3, 6, 7]]] as [number[], number[]][]) {
      const a = new Tensor(vals(sa.reduce((x, y) => x * y), 1), sa, { requiresGrad: true });
      const b = new Tensor(vals(sb.reduce((x, y) => x * y), 2), sb, { requiresGrad: true });
      const [ad, bd] = await Promise.all([a.to(e, { requiresGrad: true }), b.to(e, { requiresGrad: true })]);
      const lh = mean(gelu(matmul(a, b))), ld = mean(gelu(matmul(ad, bd)));
      await lh.backward();
      await ld.backward();
      expect(Math.abs((await ld.value()) - lh.item()) / Math.abs(lh.item()), `${sa} × ${sb}`).toBeLessThan(1e-5);
      expect(relNormErr((await ad.grad!.toHost()).data, a.grad!.data), `dA ${sa} × ${sb}`).toBeLessThan(1e-5);
      expect(relNormErr((await bd.grad!.toHost()).data, b.grad!.data), `dB ${sa} × ${sb}`).toBeLessThan(1e-5);
    }
  });

  it('generate() on a device model (its KV cache on the same engine) gives the host model\'s greedy tokens', async () => {
    for (const style of ['gpt2', 'llama'] as const) {
      const cfg = style === 'llama'
        ? { vocab: 23, maxT: 24, dModel: 32, layers: 2, heads: 4, kvHeads: 2, positions: 'rotary' as const, norm: 'rms' as const, mlp: 'swiglu' as const, seed: 5 }
        : { vocab: 23, maxT: 24, dModel: 32, layers: 2, heads: 4, seed: 5 };
      const host = new GPT(cfg), dev = await new GPT(cfg).to(e);
      const prompt = Int32Array.of(3, 1, 4, 1, 5);
      expect(Array.from(await dev.generate(prompt, 10)), style).toEqual(Array.from(await host.generate(prompt, 10)));
    }
  });

  it('clipGradNormAsync clips on the device (the norm applied there, read only when awaited), as clipGradNorm on the host', async () => {
    const mk = () => [new Tensor(Float32Array.from({ length: 50 }, (_, i) => Math.sin(i)), [50], { requiresGrad: true }), new Tensor(Float32Array.from({ length: 7 }, (_, i) => 3 * Math.cos(i)), [7], { requiresGrad: true })];
    const hp = mk();
    const dp = await Promise.all(mk().map((t) => t.to(e, { requiresGrad: true })));
    const loss = (ps: Tensor[]) => add(mean(scale(gelu(ps[0]), 40)), mean(scale(gelu(ps[1]), 25)));
    await loss(hp).backward();
    await loss(dp).backward();
    const nh = clipGradNorm(hp, 0.5);
    const nd = await clipGradNormAsync(dp, 0.5);
    expect(Math.abs(nd - nh) / nh).toBeLessThan(1e-5);
    for (let i = 0; i < 2; i++) expect(relNormErr((await dp[i].grad!.toHost()).data, hp[i].grad!.data)).toBeLessThan(1e-5);
    expect(await clipGradNormAsync(hp, 0.5)).toBeCloseTo(0.5, 5); // host gradients: the same function
  });

  it('an op without a device path refuses a device tensor with the reason; item() asks for value()', async () => {
    const t = await new Tensor(new Float32Array(12).fill(1), [3, 4]).to(e, { requiresGrad: true });
    const tt = await new Tensor(new Float32Array(16), [4, 4]).to(e, { requiresGrad: true });
    const lossy = mean(tt);
    await lossy.backward();
    expect(() => clipGradNorm([tt], 1)).toThrow(FAError);
    expect(() => clipGradNorm([tt], 1)).toThrow(/lives on the webgpu engine: an op without a device path read its values/);
    const one = await new Tensor(Float32Array.of(2), []).to(e);
    expect(() => one.item()).toThrow(/use await t.value\(\)/);
    expect(await one.value()).toBe(2);
    const h = new Tensor(new Float32Array(4 * 5), [5, 4]);
    expect(() => linear(h, t)).toThrow(/some tensors live on webgpu, others on the host/);
  });
});
