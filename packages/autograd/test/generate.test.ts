/**
 * Generation with a KV cache: examples/generate.mjs trains a tiny causal transformer and
 * generates the held-out answers with and without the cache (the same tokens), and the cached
 * forward of SelfAttention/TransformerBlock matches the full forward row by row.
 */
import { expect, it } from 'vitest';
import '@fa/core';
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
