/**
 * Generation with a KV cache: examples/generate.mjs trains a tiny causal transformer and
 * generates the held-out answers with and without the cache (the same tokens), and the cached
 * forward of SelfAttention/TransformerBlock matches the full forward row by row.
 */
import { expect, it } from 'vitest';
import { createCpuBackend, FAError, type AttentionBackend, type HostTensor, type Tensor as CoreTensor } from '@fa/core';
import { KVCache, Rng, Tensor, TransformerBlock, noGrad, randn } from '../dist/index.js';
import { run } from '../examples/generate.mjs';

it('examples/generate.mjs: the same tokens with and without the KV cache, and the task learned', async () => {
  const r = await run({ steps: 300 }, (line) => console.log(line));
  expect(r.identical).toBe(r.heldOut);
  expect(r.correct / r.heldOut).toBeGreaterThanOrEqual(0.9);
  expect(r.maxLogitDiff).toBeLessThan(1e-4);
}, 240_000);

it('TransformerBlock.forwardCached (prefill, then one token at a time) equals forward() over the whole sequence', async () => {
  const rng = new Rng(5);
  const C = 24, H = 6, Hkv = 2, T = 11, B = 2;
  const block = new TransformerBlock(C, H, { rng, kvHeads: Hkv, attention: { causal: true, softcap: 3 } });
  const x = randn([B, T, C], { rng });
  const full = await noGrad(() => block.forward(x));
  const cache = await KVCache.create({ layers: 1, batch: B, capacity: 16, kvHeads: Hkv, headDim: C / H });
  const rows = (t: Tensor, a: number, b: number) => {
    const d = new Float32Array(B * (b - a) * C);
    for (let s = 0; s < B; s++) d.set(t.data.subarray((s * T + a) * C, (s * T + b) * C), s * (b - a) * C);
    return d;
  };
  const parts: Float32Array[] = [];
  const step = async (a: number, b: number) => {
    const xi = new Tensor(rows(x, a, b), [B, b - a, C]);
    const y = await noGrad(() => block.forwardCached(xi, cache, 0));
    await cache.advance(b - a);
    parts.push(y.data as Float32Array);
  };
  await step(0, 7);
  for (let t = 7; t < T; t++) await step(t, t + 1);
  let err = 0;
  for (let s = 0; s < B; s++) {
    let t0 = 0;
    for (const p of parts) {
      const n = p.length / B / C;
      for (let i = 0; i < n * C; i++) err = Math.max(err, Math.abs(p[s * n * C + i] - full.data[(s * T + t0) * C + i]));
      t0 += n;
    }
  }
  cache.dispose();
  expect(err).toBeLessThan(1e-5);
});

it('KVCache.create that fails part way (an upload or uploadIndex refused) disposes every cache it uploaded and rethrows', async () => {
  const cpu = await createCpuBackend({ threads: 0 });
  try {
    for (const failAt of ['upload 3', 'uploadIndex']) {
      let uploads = 0;
      const uploaded: CoreTensor[] = [];
      const disposed: CoreTensor[] = [];
      const be: AttentionBackend = Object.assign(Object.create(cpu) as AttentionBackend, {
        async upload(t: HostTensor): Promise<CoreTensor> {
          if (failAt === `upload ${++uploads}`) throw new FAError('E_OOM', 'injected: out of device memory');
          const u = await cpu.upload(t);
          uploaded.push(u);
          return u;
        },
        async uploadIndex(): Promise<never> {
          throw new FAError('E_OOM', 'injected: out of device memory');
        },
        disposeTensor(t: CoreTensor): void {
          disposed.push(t);
        },
      });
      if (failAt !== 'uploadIndex') be.uploadIndex = cpu.uploadIndex.bind(cpu);
      const err = await KVCache.create({ layers: 3, batch: 2, capacity: 8, kvHeads: 1, headDim: 4, backend: be }).catch((e: unknown) => e);
      expect([failAt, (err as FAError).code]).toEqual([failAt, 'E_OOM']);
      expect(uploaded.length).toBe(failAt === 'uploadIndex' ? 6 : 2);
      expect(disposed).toEqual(uploaded);
    }
  } finally {
    await cpu.dispose();
  }
});

it('examples/gpt.mjs: the GPT trains on the corpus (loss falls), and greedy generation with the cache equals recomputing', async () => {
  const { run: runGpt } = await import('../examples/gpt.mjs');
  const r = await runGpt({ steps: 40, T: 64, batch: 8, layers: 2, dModel: 64, generate: 40 }, (line: string) => console.log(line));
  expect(r.same).toBe(true);
  expect(r.lastLoss).toBeLessThan(r.firstLoss - 0.8);
  expect(r.heldOut).toBeLessThan(r.firstLoss - 0.8);
  expect(r.text.length).toBe(40);
  expect(['native', 'wasm']).toContain(r.modelOps); // never the TypeScript cpu kernels behind the caller's back
}, 240_000);

it('a LLaMA-style GPT (rotary positions, RMSNorm, SwiGLU): the cached generation equals recomputing, and it trains', async () => {
  const { run: runGpt } = await import('../examples/gpt.mjs');
  const r = await runGpt({ steps: 40, T: 64, batch: 8, layers: 2, dModel: 64, generate: 40, style: 'llama' }, (line: string) => console.log(line));
  expect(r.same).toBe(true);
  expect(r.lastLoss).toBeLessThan(r.firstLoss - 0.8);
});

it('examples/gpt.mjs --backend webgpu --device on: the whole model trains on the WebGPU device, then generates', async (ctx) => {
  const { run: runGpt, pickEngines } = await import('../examples/gpt.mjs');
  const ok = await pickEngines('webgpu', '').then(() => true, () => false);
  if (!ok) {
    ctx.skip('no WebGPU adapter here');
    return;
  }
  const r = await runGpt({ backend: 'webgpu', device: 'on', steps: 30, T: 64, batch: 8, layers: 2, dModel: 64, generate: 24 }, (line: string) => console.log(line));
  expect(r.attention).toBe('webgpu');
  expect(r.same).toBe(true);
  expect(r.lastLoss).toBeLessThan(r.firstLoss - 0.5);
}, 240_000);

it('TransformerBlock with rotary positions: forwardCached (prefill, then one token at a time) equals forward() over the sequence', async () => {
  const { rotaryTables } = await import('../dist/index.js');
  const rng = new Rng(9);
  const C = 32, H = 4, Hkv = 2, T = 9, B = 2;
  const block = new TransformerBlock(C, H, { rng, kvHeads: Hkv, norm: 'rms', mlp: 'swiglu', rotary: { tables: rotaryTables(16, C / H) }, attention: { causal: true } });
  const x = randn([B, T, C], { rng });
  const full = await noGrad(() => block.forward(x));
  const cache = await KVCache.create({ layers: 1, batch: B, capacity: 16, kvHeads: Hkv, headDim: C / H });
  const rows = (a: number, b: number) => {
    const d = new Float32Array(B * (b - a) * C);
    for (let s = 0; s < B; s++) d.set(x.data.subarray((s * T + a) * C, (s * T + b) * C), s * (b - a) * C);
    return d;
  };
  const got = new Float32Array(B * T * C);
  const step = async (a: number, b: number) => {
    const y = await noGrad(() => block.forwardCached(new Tensor(rows(a, b), [B, b - a, C]), cache, 0));
    await cache.advance(b - a);
    for (let s = 0; s < B; s++) got.set(y.data.subarray(s * (b - a) * C, (s + 1) * (b - a) * C), (s * T + a) * C);
  };
  await step(0, 5);
  for (let t = 5; t < T; t++) await step(t, t + 1);
  let e = 0, n = 0;
  for (let i = 0; i < got.length; i++) {
    e += (got[i] - full.data[i]) ** 2;
    n += full.data[i] ** 2;
  }
  expect(Math.sqrt(e / n)).toBeLessThan(1e-5);
  cache.dispose();
});
