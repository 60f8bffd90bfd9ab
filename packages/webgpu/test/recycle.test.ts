/**
 * Reuse across calls (src/recycle.ts, src/constants.ts): a steady loop of calls on device tensors
 * creates no buffers and no bind groups once warm, computes what a cold call computes, keeps freed
 * buffers apart from memoryStats().current, and a bind group never outlives a destroyed buffer.
 */
import { afterAll, expect, it } from 'vitest';
import { tensor } from '@fa/core';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';
import { randn } from './ref.js';

let found: WebGPUBackend | undefined;
let why = '';
try {
  found = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}
const b = found as WebGPUBackend;
afterAll(() => found?.dispose());
const itGpu = found ? it : it.skip;
if (!found) it.skip(`no WebGPU adapter: ${why}`, () => undefined);

function counting() {
  const dev = b.gpuDevice;
  const n = { createBuffer: 0, createBindGroup: 0 };
  const orig = { createBuffer: dev.createBuffer, createBindGroup: dev.createBindGroup };
  dev.createBuffer = function (d: GPUBufferDescriptor) { n.createBuffer++; return orig.createBuffer.call(dev, d); };
  dev.createBindGroup = function (d: GPUBindGroupDescriptor) { n.createBindGroup++; return orig.createBindGroup.call(dev, d); };
  return { n, restore: () => Object.assign(dev, orig) };
}

itGpu('a warm loop of forward and KV-cache calls creates no buffers or bind groups, and computes as a cold call', async () => {
  const [B, T, H, D] = [1, 24, 2, 32];
  const mk = (s: number) => tensor(randn(B * T * H * D, s), [B, T, H, D]);
  const [q, k, v] = await Promise.all([mk(1), mk(2), mk(3)].map((t) => b.upload(t)));
  const first = await b.forward(q, k, v, { causal: true });
  const want = Array.from((await b.read(first.out)).data as Float32Array);
  b.disposeTensor(first.out);
  b.disposeTensor(first.lse);
  const before = b.memoryStats().current;
  const c = counting();
  try {
    for (let i = 0; i < 20; i++) {
      const r = await b.forward(q, k, v, { causal: true });
      if (i === 19) expect(Array.from((await b.read(r.out)).data as Float32Array)).toEqual(want);
      b.disposeTensor(r.out);
      b.disposeTensor(r.lse);
    }
  } finally {
    c.restore();
  }
  // the read's staging buffer is mappable (never pooled): one buffer
  expect(c.n.createBuffer).toBeLessThanOrEqual(1);
  expect(c.n.createBindGroup).toBe(0);
  expect(b.memoryStats().current).toBe(before);
  expect(b.memoryStats().pooled).toBeGreaterThan(0);
  for (const t of [q, k, v]) b.disposeTensor(t);
});

itGpu('a bind group is not reused after its buffer was destroyed (a buffer too large to pool)', async () => {
  // 1 query row over 17 MiB of keys: k and v are above the pool's 16 MiB buffer limit
  const Tk = (17 << 20) / (4 * 64) + 64;
  const q = await b.upload(tensor(randn(64, 4), [1, 1, 1, 64]));
  const k1 = await b.upload(tensor(randn(Tk * 64, 5), [1, Tk, 1, 64]));
  const r1 = await b.forward(q, k1, k1);
  const out1 = Array.from((await b.read(r1.out)).data as Float32Array);
  b.disposeTensor(k1); // destroyed for real: any group binding it must go
  const k2 = await b.upload(tensor(randn(Tk * 64, 5), [1, Tk, 1, 64]));
  const r2 = await b.forward(q, k2, k2);
  expect(Array.from((await b.read(r2.out)).data as Float32Array)).toEqual(out1);
  await b.sync(); // no validation error from a stale group
  for (const t of [q, k2, r1.out, r1.lse, r2.out, r2.lse]) b.disposeTensor(t);
});
