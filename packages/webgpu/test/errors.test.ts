/**
 * Failure paths: the registry's reasons, E_TOO_LARGE naming the limit, device loss (the next call
 * re-acquires a device; tensors of the lost device say so), buffers of failed calls freed, a
 * KV-cache call that fails on the GPU leaves the host caches as they were.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { FAError, appendKVCacheHost, tensor, type HostTensor, type Tensor } from '@fa/core';
import { cloneHost, kvCacheCaseInputs, makeKVCacheCase } from '@fa/core/testing';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';
import { randn } from './ref.js';

const pkg = fileURLToPath(new URL('..', import.meta.url));
let be: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}

const code = async (p: Promise<unknown>) => {
  try {
    await p;
    return 'no error';
  } catch (e) {
    expect(e).toBeInstanceOf(FAError);
    return `${(e as FAError).code}: ${(e as FAError).message}`;
  }
};

describe('webgpu registry', () => {
  it('says exactly why the backend is unavailable when Dawn finds no adapter', () => {
    const script = `import('@fa/core').then(async (core) => { await import('./dist/index.js'); const l = await core.listBackends(); console.log(JSON.stringify(l.find((b) => b.name === 'webgpu'))); })`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: pkg, env: { ...process.env, VK_ICD_FILENAMES: '/nonexistent/icd.json', VK_DRIVER_FILES: '/nonexistent/icd.json' }, encoding: 'utf8', timeout: 60_000 });
    const line = r.stdout.trim().split('\n').pop() ?? '';
    const status = JSON.parse(line) as { available: boolean; reason?: string };
    expect(status.available).toBe(false);
    expect(status.reason).toMatch(/no WebGPU adapter \(requestAdapter returned null\)/);
  });
});

describe('webgpu errors', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be;
  afterAll(() => b.dispose());
  const small = (n: number, seed: number) => tensor(randn(2 * n * 2 * 16, seed), [2, n, 2, 16]);

  it('E_TOO_LARGE names the storage-binding limit', async () => {
    const lim = b.gpuDevice.limits.maxStorageBufferBindingSize;
    const T = Math.ceil(lim / (4 * 64)) + 1; // one head of D = 64 in f32 just over the limit
    const q = tensor(new Float32Array(T * 64), [1, T, 1, 64]);
    const k = tensor(new Float32Array(64), [1, 1, 1, 64]);
    const msg = await code(b.forward(q, k, k));
    expect(msg).toMatch(/^E_TOO_LARGE: .*maxStorageBufferBindingSize/);
  });

  it('a failed call frees its buffers and the backend stays usable', async () => {
    const before = b.memoryStats().current;
    const q = small(9, 1);
    const k = small(9, 2);
    const gone = await b.upload(small(9, 3));
    b.disposeTensor(gone);
    const msg = await code(b.forward(q, k, gone));
    expect(msg).toMatch(/^E_ARG: .*disposed/);
    expect(b.memoryStats().current).toBe(before);
    const r = await b.forward(q, k, k);
    expect(r.out.shape).toEqual([2, 9, 2, 16]);
    expect(b.memoryStats().current).toBe(before);
  });

  it('after a device loss the next call re-acquires a device; old tensors say so', async () => {
    const q = small(5, 4);
    const qd = await b.upload(q);
    const first = await b.forward(q, q, q);
    b.loseDeviceForTesting();
    const msg = await code(b.forward(qd, qd, qd));
    expect(msg).toMatch(/^E_ARG: .*(disposed|lost)/);
    const again = await b.forward(q, q, q);
    expect(Array.from((again.out as HostTensor).data)).toEqual(Array.from((first.out as HostTensor).data));
  });

  // A KV-cache call on host caches that passes validation and then fails on the GPU: the caches
  // must be as before (the rows are appended on the host only after the call succeeded).
  const kv = kvCacheCaseInputs(makeKVCacheCase({ dtype: 'f32', seqlens: [20, 0, 7], tnew: 2, blockSize: 8, d: 16, h: 4, hkv: 2 }));
  const kvCall = (q: Tensor, k: HostTensor, v: HostTensor) =>
    b.forwardWithKVCache(q, k, v, { ...kv.options, cacheSeqlens: kv.cacheSeqlens, blockTable: kv.blockTable, kNew: kv.kNew, vNew: kv.vNew });
  const bytes = (t: HostTensor) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const expectCaches = (k: HostTensor, v: HostTensor, appended: boolean) => {
    const wk = cloneHost(kv.kCache);
    const wv = cloneHost(kv.vCache);
    if (appended) appendKVCacheHost(kv.problem, wk, wv, kv.kNew, kv.vNew);
    expect(bytes(k).equals(bytes(wk))).toBe(true);
    expect(bytes(v).equals(bytes(wv))).toBe(true);
  };

  for (const onDevice of [false, true]) {
    it(`a KV-cache call failing on the GPU (forced validation error, ${onDevice ? 'device' : 'host'} q) leaves host caches unchanged`, async () => {
      const q = onDevice ? await b.upload(kv.q) : kv.q;
      const before = b.memoryStats().current;
      const k = cloneHost(kv.kCache);
      const v = cloneHost(kv.vCache);
      const queue = b.gpuDevice.queue;
      const submit = queue.submit;
      // after the call's work is submitted, an invalid buffer (MAP_READ | MAP_WRITE): a
      // validation error in the call's error scope
      queue.submit = (cbs: Iterable<GPUCommandBuffer>) => {
        submit.call(queue, cbs);
        b.gpuDevice.createBuffer({ size: 16, usage: 1 | 2, label: 'forced error' });
      };
      let msg: string;
      try {
        msg = await code(kvCall(q, k, v));
      } finally {
        queue.submit = submit;
      }
      expect(msg).toMatch(/^E_DEVICE: .*forced error/s);
      expectCaches(k, v, false);
      expect(b.memoryStats().current).toBe(before);
      // the backend stays usable, and a successful call appends
      const r = await kvCall(q, k, v);
      for (const t of [r.out, r.lse]) b.disposeTensor(t);
      expectCaches(k, v, true);
      if (onDevice) b.disposeTensor(q);
    });
  }

  // Stream-ordered calls (device tensors in and out) do not wait for their error scopes: a
  // device error surfaces at the next read() or sync(), naming the call, and the backend recovers.
  it('a stream-ordered call failing on the device reports at sync() and read(), naming the call; the backend recovers', async () => {
    const [q, k, v] = await Promise.all([small(9, 11), small(9, 12), small(9, 13)].map((t) => b.upload(t)));
    const queue = b.gpuDevice.queue;
    const submit = queue.submit;
    queue.submit = (cbs: Iterable<GPUCommandBuffer>) => {
      submit.call(queue, cbs);
      b.gpuDevice.createBuffer({ size: 16, usage: 1 | 2, label: 'forced error' });
    };
    let r;
    try {
      r = await b.forward(q, k, v); // resolves: the error is the device's to find
    } finally {
      queue.submit = submit;
    }
    expect(r.out.kind).toBe('device');
    expect(await code(b.sync())).toMatch(/^E_DEVICE: webgpu: forward failed on the device \(reported at sync\): .*forced error/s);
    await b.sync(); // reported once
    // read() surfaces it too
    queue.submit = (cbs: Iterable<GPUCommandBuffer>) => {
      submit.call(queue, cbs);
      b.gpuDevice.createBuffer({ size: 16, usage: 1 | 2, label: 'forced error 2' });
    };
    let r2;
    try {
      r2 = await b.backward(q, k, v, r.out, q, r.lse);
    } finally {
      queue.submit = submit;
    }
    expect(await code(b.read(r2.dq))).toMatch(/^E_DEVICE: webgpu: backward failed .*forced error 2/s);
    // and the backend computes as before
    const ok = await b.forward(q, k, v);
    const host = await b.read(ok.out);
    const ref = await b.forward(small(9, 11), small(9, 12), small(9, 13));
    expect(Array.from(host.data as Float32Array)).toEqual(Array.from((ref.out as HostTensor).data as Float32Array));
    for (const t of [q, k, v, r.out, r.lse, r2.dq, r2.dk, r2.dv, ok.out, ok.lse]) b.disposeTensor(t);
  });

  it('a KV-cache call whose device is lost after validation leaves host caches unchanged', async () => {
    const k = cloneHost(kv.kCache);
    const v = cloneHost(kv.vCache);
    const call = kvCall(kv.q, k, v);
    b.loseDeviceForTesting(); // the call has validated its arguments and waits for the device
    expect(await code(call)).toMatch(/^E_DEVICE: .*lost/);
    expectCaches(k, v, false);
    await kvCall(kv.q, k, v);
    expectCaches(k, v, true);
  });

  it('device tensors chain without host round trips and report their memory', async () => {
    const before = b.memoryStats().current;
    const [q, k, v, dO] = await Promise.all([small(33, 5), small(33, 6), small(33, 7), small(33, 8)].map((t) => b.upload(t)));
    const f = await b.forward(q, k, v, { causal: true });
    expect(f.out.kind).toBe('device');
    const g = await b.backward(q, k, v, f.out, dO, f.lse, { causal: true });
    expect(g.dq.kind).toBe('device');
    const host = await b.read(g.dq);
    expect(host.data.length).toBe(2 * 33 * 2 * 16);
    for (const t of [q, k, v, dO, f.out, f.lse, g.dq, g.dk, g.dv]) b.disposeTensor(t);
    expect(b.memoryStats().current).toBe(before);
  });
});

describe('webgpu concurrency', () => {
  it('concurrent calls give the same results as sequential ones', async () => {
    const b2 = await createWebGPUBackend().catch(() => undefined);
    if (!b2) return;
    try {
      const mk = (seed: number) => tensor(randn(1 * 20 * 2 * 8, seed), [1, 20, 2, 8]);
      const inputs = [0, 1, 2, 3].map((i) => [mk(10 + i), mk(20 + i), mk(30 + i)] as const);
      const seq: Awaited<ReturnType<typeof b2.forward>>[] = [];
      for (const [q, k, v] of inputs) seq.push(await b2.forward(q, k, v, { causal: true }));
      const par = await Promise.all(inputs.map(([q, k, v]) => b2.forward(q, k, v, { causal: true })));
      par.forEach((r, i) => expect(Array.from((r.out as HostTensor).data)).toEqual(Array.from((seq[i].out as HostTensor).data)));
    } finally {
      await b2.dispose();
    }
  });
});
