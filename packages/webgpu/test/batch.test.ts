/**
 * batchCalls: the stream-ordered calls of one event-loop turn share a command buffer. The kit
 * (forward, backward, KV cache; host and device tensors) and the device op kit pass on a batching
 * backend; a loop of calls costs one submission; reads, index writes and host-tensor calls see
 * the batch's work first (the same bits as a backend that submits every call).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { tensor, type HostTensor } from '@fa/core';
import { conformanceCases, checkCase, kvCacheCases, checkKVCacheCase, runDeviceOpConformance } from '@fa/core/testing';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';
import { randn } from './ref.js';

let be: WebGPUBackend | undefined;
let plain: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend({ batchCalls: true });
  plain = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}

describe('webgpu batchCalls', () => {
  if (!be || !plain) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be, p = plain;
  afterAll(async () => {
    await b.dispose();
    await p.dispose();
  });

  it('the kit passes on a batching backend (a quick slice, and the KV-cache cases)', async () => {
    const fails: string[] = [];
    for (const c of conformanceCases({ count: 24, quick: true, seed: 5 })) {
      const r = await checkCase(b, c);
      if (!r.pass) fails.push(`${r.name}: ${r.message}`);
    }
    for (const c of kvCacheCases({ quick: true, seed: 5 }).slice(0, 16)) {
      const r = await checkKVCacheCase(b, c);
      if (!r.pass) fails.push(`${r.name}: ${r.message}`);
    }
    expect(fails).toEqual([]);
  });

  it('the device op kit passes on a batching backend', async () => {
    const s = await runDeviceOpConformance(b, b.deviceOps as never);
    expect(s.results.filter((r) => !r.pass).map((r) => `${r.name}: ${r.message}`)).toEqual([]);
  });

  it('a loop of 40 calls issued in one turn is one submission, with the bits of one submission a call', async () => {
    const [M, N, K] = [33, 20, 17];
    const run = async (x: WebGPUBackend) => {
      const a = await x.upload(tensor(randn(M * K, 1), [M * K])), w = await x.upload(tensor(randn(K * N, 2), [K * N]));
      const c = x.allocTensor('f32', [M * N]);
      await x.sync();
      const before = x.batchesSubmitted;
      const calls = [];
      for (let i = 0; i < 40; i++) calls.push(x.gemm({ transA: false, transB: false, M, N, K, a, b: w, c, accumulate: true }));
      await Promise.all(calls);
      const out = (await x.read(c)).data as Float32Array;
      return { out, batches: x.batchesSubmitted - before };
    };
    const batched = await run(b), each = await run(p);
    expect(batched.out).toEqual(each.out);
    expect(batched.batches).toBeLessThanOrEqual(2);
    expect(each.batches).toBe(0);
  });

  it('index writes, host-tensor calls and reads between batched calls see them in order', async () => {
    const [B, H, Hkv, D, cap] = [2, 4, 2, 16, 32];
    const run = async (x: WebGPUBackend) => {
      const up = (n: number, s: number, shape: number[]) => x.upload(tensor(randn(n, s), shape));
      const kc = await up(B * cap * Hkv * D, 1, [B, cap, Hkv, D]), vc = await up(B * cap * Hkv * D, 2, [B, cap, Hkv, D]);
      const lens = await x.uploadIndex(Int32Array.of(3, 7));
      const outs: Float32Array[] = [];
      for (let step = 0; step < 5; step++) {
        const q = await up(B * H * D, 10 + step, [B, 1, H, D]), kn = await up(B * Hkv * D, 20 + step, [B, 1, Hkv, D]), vn = await up(B * Hkv * D, 30 + step, [B, 1, Hkv, D]);
        const r = await x.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn, causal: true });
        await x.writeIndex(lens, [4 + step, 8 + step]);
        const host = await x.forward(tensor(randn(2 * 8 * 16, step), [1, 8, 2, 16]), tensor(randn(2 * 8 * 16, step + 1), [1, 8, 2, 16]), tensor(randn(2 * 8 * 16, step + 2), [1, 8, 2, 16]));
        outs.push((await x.read(r.out)).data as Float32Array, (host.out as HostTensor).data as Float32Array);
      }
      outs.push((await x.read(kc)).data as Float32Array);
      return outs;
    };
    const a = await run(b), c = await run(p);
    expect(a.length).toBe(c.length);
    for (let i = 0; i < a.length; i++) expect(a[i]).toEqual(c[i]);
  });
});
