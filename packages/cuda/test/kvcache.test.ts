// The KV-cache path of the CUDA engine (src/kvcache.ts) over a dry-run native context: no CUDA
// call is made, so this runs in CI. It checks what the TypeScript layer decides (support, index
// tensors and their mirrors, host caches appended only after the call, ownership checks); the
// kernels' numbers are checked by the conformance kit and dev/kv_harness.cu on a GPU.
import { describeKVCacheProblem, tensor, type HostTensor, type KVCacheOptions } from '@fa/core';
import { describe, expect, it } from 'vitest';
import { CudaBackend, CudaIndexTensor, loadNative } from '../src/index.js';

const native = loadNative();

describe.skipIf(!native.ok)('KV cache over a dry-run context (no CUDA calls)', () => {
  const mk = (limit?: number) => {
    if (!native.ok) throw new Error('unreachable');
    const ctx = new native.binding.Context({ dryRun: true });
    const c = limit === undefined ? ctx : new Proxy(ctx, { get: (t, k) => (k === 'smemNeeds' ? (d: number) => ({ ...t.smemNeeds(d), limit }) : Reflect.get(t, k)) });
    return new CudaBackend(c, { ok: true, driver: 0, runtime: 0, device: 'dry' });
  };
  const bits = (n: number, seed = 1) => Uint16Array.from({ length: n }, (_, i) => 0x3c00 + ((i * 7 + seed) % 97));
  // B = 2, Tq = 1, H = 4, Hkv = 2, D = 64; a paged cache of 6 blocks of 4 rows, lengths [5, 2], one new token
  const setup = (dtype: 'bf16' | 'f16' | 'f32' = 'bf16') => {
    const data = (n: number, seed: number) => (dtype === 'f32' ? new Float32Array(n).fill(0.5) : bits(n, seed));
    const q = tensor(data(2 * 4 * 64, 1), [2, 1, 4, 64], dtype);
    const kCache = tensor(data(6 * 4 * 2 * 64, 2), [6, 4, 2, 64], dtype);
    const vCache = tensor(data(6 * 4 * 2 * 64, 3), [6, 4, 2, 64], dtype);
    const kNew = tensor(data(2 * 2 * 64, 4), [2, 1, 2, 64], dtype);
    const vNew = tensor(data(2 * 2 * 64, 5), [2, 1, 2, 64], dtype);
    const opts: KVCacheOptions = { cacheSeqlens: [5, 2], blockTable: [[3, 0, -1], [5, -1, -1]], kNew, vNew, causal: true };
    return { q, kCache, vCache, kNew, vNew, opts };
  };

  it('supportsKVCache: every dtype and head dim 1..256, the dense rules, plus the KV kernel\'s shared memory', () => {
    const b = mk();
    const x = setup();
    expect(b.supportsKVCache(describeKVCacheProblem(x.q, x.kCache, x.vCache, x.opts))).toEqual({ ok: true });
    const f = setup('f32');
    expect(b.supportsKVCache(describeKVCacheProblem(f.q, f.kCache, f.vCache, f.opts))).toEqual({ ok: true });
    for (const [dtype, d] of [['f16', 12], ['bf16', 1], ['f32', 1], ['f32', 13], ['f16', 255], ['f32', 256]] as const) {
      const qd = tensor(dtype === 'f32' ? new Float32Array(d) : bits(d), [1, 1, 1, d], dtype);
      const cd = tensor(dtype === 'f32' ? new Float32Array(3 * d) : bits(3 * d), [1, 3, 1, d], dtype);
      expect(b.supportsKVCache(describeKVCacheProblem(qd, cd, cd, { cacheSeqlens: [2] })), `${dtype} d=${d}`).toEqual({ ok: true });
    }
    // The TS rule: decline when smemNeeds(d).kv exceeds the limit. A dry context reports the
    // default D = 256 configuration, 4 warps x 2 stages x (K + V) x 16 keys x 256 x 2 bytes =
    // 128 KiB; a real GPU with less reports (and runs) the smaller one (KvTraitsSmall, 64 KiB).
    const q256 = tensor(bits(256), [1, 1, 1, 256], 'bf16');
    const c256 = tensor(bits(3 * 256), [1, 3, 1, 256], 'bf16');
    const p256 = describeKVCacheProblem(q256, c256, c256, { cacheSeqlens: [3] });
    expect(mk(163 * 1024).supportsKVCache(p256)).toEqual({ ok: true });
    expect(mk(99 * 1024).supportsKVCache(p256)).toEqual({ ok: false, reason: 'head dim 256: the KV-cache kernel needs 128.0 KiB of shared memory per block; dry run (no CUDA) allows 99.0 KiB' });
  });

  it('index tensors live on the device with a mirror that writeIndex keeps equal', async () => {
    const b = mk();
    const lens = await b.uploadIndex([5, 2]);
    expect(lens).toBeInstanceOf(CudaIndexTensor);
    expect(lens.backend).toBe('cuda');
    expect([...lens.mirror]).toEqual([5, 2]);
    const table = await b.uploadIndex([3, 0, -1, 5, -1, -1], [2, 3]);
    expect(table.shape).toEqual([2, 3]);
    await b.writeIndex(lens, [6], 0);
    await b.writeIndex(table, [1], 4);
    expect([...lens.mirror]).toEqual([6, 2]);
    expect([...table.mirror]).toEqual([3, 0, -1, 5, 1, -1]);
    await expect(b.writeIndex(lens, [1, 2], 1)).rejects.toMatchObject({ code: 'E_SHAPE' });
    expect([...lens.mirror]).toEqual([6, 2]);
    await expect(b.uploadIndex([1.5])).rejects.toMatchObject({ code: 'E_DTYPE' });
    // another CUDA backend's index tensor has the same backend name: refused by ownership
    const other = mk();
    const foreign = await other.uploadIndex([5, 2]);
    await expect(b.writeIndex(foreign, [1])).rejects.toMatchObject({ code: 'E_ARG' });
    const x = setup();
    await expect(b.forwardWithKVCache(x.q, x.kCache, x.vCache, { ...x.opts, cacheSeqlens: foreign })).rejects.toMatchObject({ code: 'E_ARG' });
    expect(() => b.disposeTensor(foreign)).toThrow(/another backend/);
    b.disposeTensor(lens);
    expect(lens.disposed).toBe(true);
    await expect(b.forwardWithKVCache(x.q, x.kCache, x.vCache, { ...x.opts, cacheSeqlens: lens })).rejects.toMatchObject({ code: 'E_ARG' });
  });

  it('host caches are appended on the host only after the call; outputs follow q', async () => {
    const b = mk();
    const x = setup();
    const before = Uint16Array.from(x.kCache.data as Uint16Array);
    const r = await b.forwardWithKVCache(x.q, x.kCache, x.vCache, x.opts);
    expect(r.out.kind).toBe('host');
    expect(r.out.shape).toEqual([2, 1, 4, 64]);
    expect(r.lse.shape).toEqual([2, 4, 1]);
    // sequence 0 appends at position 5: block table[0][1] = 0, row 1; sequence 1 at 2: block 5, row 2
    const w = 2 * 64;
    const kc = x.kCache.data as Uint16Array;
    expect([...kc.subarray((0 * 4 + 1) * w, (0 * 4 + 2) * w)]).toEqual([...(x.kNew.data as Uint16Array).subarray(0, w)]);
    expect([...kc.subarray((5 * 4 + 2) * w, (5 * 4 + 3) * w)]).toEqual([...(x.kNew.data as Uint16Array).subarray(w, 2 * w)]);
    let changed = 0;
    for (let i = 0; i < kc.length; i++) if (kc[i] !== before[i]) changed++;
    expect(changed).toBeLessThanOrEqual(2 * w);
    // a refused call writes nothing: caches of mixed kinds, a bad block index
    const y = setup();
    const snap = Uint16Array.from(y.kCache.data as Uint16Array);
    const dv = await b.upload(y.vCache);
    await expect(b.forwardWithKVCache(y.q, y.kCache, dv, y.opts)).rejects.toMatchObject({ code: 'E_ARG' });
    await expect(b.forwardWithKVCache(y.q, y.kCache, y.vCache, { ...y.opts, blockTable: [[3, 9, -1], [5, -1, -1]] })).rejects.toMatchObject({ code: 'E_ARG' });
    expect([...(y.kCache.data as Uint16Array)]).toEqual([...snap]);
  });

  it('device tensors and index tensors stay on the device; f32 and odd head dims run with outputs of their dtype', async () => {
    const b = mk();
    const x = setup();
    const [q, kc, vc, kn, vn] = await Promise.all([x.q, x.kCache, x.vCache, x.kNew, x.vNew].map((t) => b.upload(t)));
    const lens = await b.uploadIndex([5, 2]);
    const table = await b.uploadIndex([3, 0, -1, 5, -1, -1], [2, 3]);
    const r = await b.forwardWithKVCache(q, kc, vc, { ...x.opts, kNew: kn, vNew: vn, cacheSeqlens: lens, blockTable: table });
    expect(r.out.kind).toBe('device');
    expect(r.lse.kind).toBe('device');
    const lse = (await b.read(r.lse)) as HostTensor;
    expect(lse.dtype).toBe('f32');
    // contiguous cache, Tq = 0 and an empty batch are valid calls
    const c = tensor(bits(2 * 3 * 2 * 64), [2, 3, 2, 64], 'bf16');
    const q0 = tensor(new Uint16Array(0), [2, 0, 4, 64], 'bf16');
    const r0 = await b.forwardWithKVCache(q0, c, c, { cacheSeqlens: [1, 3] });
    expect(r0.out.shape).toEqual([2, 0, 4, 64]);
    const qe = tensor(new Uint16Array(0), [0, 1, 4, 64], 'bf16');
    const ce = tensor(new Uint16Array(0), [0, 3, 2, 64], 'bf16');
    expect((await b.forwardWithKVCache(qe, ce, ce, { cacheSeqlens: [] })).lse.shape).toEqual([0, 4, 1]);
    const f = setup('f32');
    const rf = await b.forwardWithKVCache(f.q, f.kCache, f.vCache, f.opts);
    expect(rf.out.dtype).toBe('f32');
    expect((rf.out as HostTensor).data).toBeInstanceOf(Float32Array);
    expect((rf.out as HostTensor).data.length).toBe(2 * 4 * 64);
    // f32 host caches are appended on the host after the call, as 16-bit ones
    expect([...(f.kCache.data as Float32Array).subarray((0 * 4 + 1) * 128, (0 * 4 + 2) * 128)]).toEqual([...(f.kNew.data as Float32Array).subarray(0, 128)]);
    // an odd head dim on device tensors (the FFMA kernel's narrow loads): outputs in [B, Tq, H, 13]
    const q13 = await b.upload(tensor(bits(2 * 3 * 13), [2, 1, 3, 13], 'bf16'));
    const [k13, v13] = await Promise.all([2, 3].map((seed) => b.upload(tensor(bits(2 * 5 * 1 * 13, seed), [2, 5, 1, 13], 'bf16'))));
    const n13 = await b.upload(tensor(bits(2 * 13), [2, 1, 1, 13], 'bf16'));
    const r13 = await b.forwardWithKVCache(q13, k13, v13, { cacheSeqlens: [4, 0], kNew: n13, vNew: n13 });
    expect(r13.out.kind).toBe('device');
    expect(r13.out.shape).toEqual([2, 1, 3, 13]);
    await b.dispose();
    await expect(b.uploadIndex([1])).rejects.toMatchObject({ code: 'E_DEVICE', message: expect.stringMatching(/disposed/) });
  });
});
