// Runs everywhere (CI has no GPU): the package loads, registers "cuda", and says why it is
// unavailable; the TypeScript path works against a dry-run native context.
import { FAError, describeProblem, listBackends, tensor, type HostTensor } from '@fa/core';
import { describe, expect, it } from 'vitest';
import { CudaBackend, createCudaBackend, cudaStatus, loadNative } from '../src/index.js';

const native = loadNative();

describe('@fa/cuda on any machine', () => {
  it('registers backend "cuda" (priority 100) and reports its state', async () => {
    const list = await listBackends();
    const e = list.find((b) => b.name === 'cuda');
    expect(e).toBeDefined();
    expect(e!.priority).toBe(100);
    const st = cudaStatus();
    expect(e!.available).toBe(st.available);
    if (!e!.available) {
      // the registry reports the reason without the engine's leading "unavailable:"
      expect(e!.reason).toMatch(/^(built without CUDA \(.+\)|no NVIDIA driver found \(CUDA driver: cuda\w+|the NVIDIA driver supports CUDA|CUDA driver: cuda\w+|no CUDA device found|.*compute capability)/);
      console.log(`cuda backend: ${e!.reason}`);
    } else {
      console.log(`cuda backend: available on ${e!.device}`);
    }
  });

  it('createCudaBackend() rejects with FAError E_DEVICE when unavailable', async () => {
    const st = cudaStatus();
    if (st.available) return;
    const err = await createCudaBackend().catch((x: unknown) => x);
    expect(err).toBeInstanceOf(FAError);
    expect((err as FAError).code).toBe('E_DEVICE');
    expect((err as FAError).message).toBe(st.reason);
  });

  it('createCudaBackend() checks its options before anything else', async () => {
    await expect(createCudaBackend({ f32: 'fast' as 'ffma' })).rejects.toMatchObject({ code: 'E_ARG', message: expect.stringMatching(/f32 must be one of 'auto', 'tensor-cores', 'ffma'/) });
  });

  it('loads the addon when it was built; the first CUDA call fails cleanly without a driver', () => {
    if (!native.ok) {
      expect(native.reason).toMatch(/^unavailable: (built without CUDA|the CUDA addon failed to load)/);
      return;
    }
    const p = native.binding.probe();
    expect(typeof p.ok).toBe('boolean');
    expect(typeof p.runtime).toBe('number');
    if (!p.ok) {
      expect(p.reason).toMatch(/CUDA driver: cuda\w+|no CUDA device/);
      expect(() => new native.binding.Context()).toThrow(/CUDA driver|no CUDA|does not exist/);
    }
  });
});

describe.skipIf(!native.ok)('TypeScript wrapper over a dry-run context (no CUDA calls)', () => {
  const mk = () => {
    if (!native.ok) throw new Error('unreachable');
    const ctx = new native.binding.Context({ dryRun: true });
    return new CudaBackend(ctx, { ok: true, driver: 0, runtime: 0, device: 'dry' });
  };
  const rand = (n: number) => {
    const u = new Uint16Array(n);
    for (let i = 0; i < n; i++) u[i] = 0x3c00 + (i % 97);
    return u;
  };

  it('supports() accepts f32 and every head dim from 1 to 256', () => {
    const b = mk();
    expect(b.dtypes).toEqual(['f32', 'f16', 'bf16']);
    const f32 = describeProblem(tensor(new Float32Array(2 * 3 * 4 * 8), [2, 3, 4, 8], 'f32'), tensor(new Float32Array(2 * 3 * 4 * 8), [2, 3, 4, 8], 'f32'), tensor(new Float32Array(2 * 3 * 4 * 8), [2, 3, 4, 8], 'f32'));
    expect(b.supports(f32)).toEqual({ ok: true });
    for (const d of [1, 12, 13, 200, 256]) {
      for (const dtype of ['f32', 'bf16'] as const) {
        const x = tensor(dtype === 'f32' ? new Float32Array(2 * d) : rand(2 * d), [1, 2, 1, d], dtype);
        expect(b.supports(describeProblem(x, x, x))).toEqual({ ok: true });
      }
    }
  });

  it('supports() declines head dims whose kernels need more shared memory than the GPU offers', () => {
    if (!native.ok) throw new Error('unreachable');
    const ctx = new native.binding.Context({ dryRun: true });
    // A dry context runs no kernels (limit 0); its needs are those of the mma.sync kernels (no
    // sm_90), i.e. what an sm_8x card runs. Hand-computed from the tile traits (fa_common.cuh):
    // backward BwdCfg<256, BM 64, BN 64>: (2·64·256 + 4·64·256 + 2·64·64)·2 B + 4·64·4 B.
    expect(ctx.smemNeeds(256)).toEqual({ fwd: (64 * 256 + 4 * 32 * 256) * 2, bwd: (2 * 64 * 256 + 4 * 64 * 256 + 2 * 64 * 64) * 2 + 1024, bwdDeterministic: (2 * 64 * 256 + 4 * 64 * 256 + 2 * 64 * 64) * 2 + 1024, kv: 4 * 2 * 2 * 16 * 256 * 2, limit: 0 });
    expect(ctx.smemNeeds(128).bwd).toBe((2 * 128 * 128 + 4 * 64 * 128 + 2 * 128 * 64) * 2 + 1024);
    // a head dim that is not a multiple of 8 runs the dense kernels of the next multiple of 8 (and
    // the FFMA KV-cache kernel: below)
    const dense = (n: { kv: number }) => ({ ...n, kv: 0 });
    expect(dense(ctx.smemNeeds(12))).toEqual(dense(ctx.smemNeeds(16)));
    expect(dense(ctx.smemNeeds(1, 'f16'))).toEqual(dense(ctx.smemNeeds(8, 'f16')));
    expect(() => ctx.smemNeeds(0)).toThrow(/integer from 1 to 256/);
    expect(() => ctx.smemNeeds(64, 'f64' as 'f32')).toThrow(/dtype/);
    expect(() => ctx.smemNeeds(64, 'f32', 'fast' as 'ffma')).toThrow(/f32Path/);
    // f32, split into two f16 planes (twice the 16-bit tiles; fa_traits.cuh): the mma.sync forward
    // FwdTraits<128, split> = BM 64, BN 64; backward BwdTraits<128, split> = BM 32, BN 64.
    // kv: the KV-cache kernel at D = 128: f16/bf16 run KvTraits<128> (8 warps x 2 stages x (K + V) x
    // 16 keys x 128 x 2 B); f32 the FFMA kernel (fa_kvcache_ffma.cuh: Q [16][128], P [8 warps][8
    // keys][16 rows], 4 x 16 row fields, then 8 warps x 2 stages x (K + V) x 8 keys x 144 floats)
    const kv128 = 8 * 2 * 2 * 16 * 128 * 2;
    const kvF32 = (16 * 128 + 8 * 8 * 16 + 4 * 16 + 8 * 2 * 2 * 8 * 144) * 4;
    expect(ctx.smemNeeds(128, 'bf16').kv).toBe(kv128);
    expect(ctx.smemNeeds(13, 'bf16').kv).toBe((16 * 32 + 8 * 32 * 16 + 4 * 16 + 8 * 2 * 2 * 32 * 36) * 4);  // d % 8 != 0: FFMA, bucket 32
    const split128 = { fwd: (64 * 128 + 4 * 64 * 128) * 2 * 2, bwd: (2 * 64 * 128 + 4 * 32 * 128 + 2 * 64 * 32) * 2 * 2 + 4 * 32 * 4 };
    expect(ctx.smemNeeds(128, 'f32')).toEqual({ ...split128, bwdDeterministic: split128.bwd, kv: kvF32, limit: 0 });
    expect(ctx.smemNeeds(128, 'f32', 'auto', 163 * 1024)).toEqual(ctx.smemNeeds(128, 'f32'));
    // FFMA (fa_smem.cuh): q rows [16][d], key tiles [32][d | 1]; chosen where the split tiles do not fit
    const ffma128 = { fwd: (16 * 128 + 32 * 129 + 32 * 128) * 4, bwd: (2 * 16 * 128 + 2 * 32 * 129 + 2 * 32) * 4 };
    expect(ctx.smemNeeds(128, 'f32', 'ffma')).toEqual({ ...ffma128, bwdDeterministic: ffma128.bwd, kv: kvF32, limit: 0 });
    expect(ctx.smemNeeds(128, 'f32', 'auto', 99 * 1024)).toEqual(ctx.smemNeeds(128, 'f32', 'ffma'));
    expect(ctx.smemNeeds(256, 'f32', 'ffma').bwd).toBeLessThanOrEqual(99 * 1024);
    expect(ctx.smemNeeds(128, 'f32', 'tensor-cores', 99 * 1024)).toEqual(ctx.smemNeeds(128, 'f32'));
    const withLimit = (limit: number) =>
      new CudaBackend(
        new Proxy(ctx, {
          get: (t, k) => (k === 'smemNeeds' ? (d: number) => ({ ...t.smemNeeds(d), limit }) : Reflect.get(t, k)),
        }),
        { ok: true, driver: 0, runtime: 0, device: 'dry' },
      );
    const prob = (d: number, deterministic = false) => {
      const x = tensor(rand(2 * d), [1, 2, 1, d], 'bf16');
      return describeProblem(x, x, x, { deterministic });
    };
    const sm80 = withLimit(163 * 1024); // A100: 163 KiB opt-in
    const sm86 = withLimit(99 * 1024); // RTX 30xx / 40xx: 99 KiB
    expect(sm80.supports(prob(128))).toEqual({ ok: true });
    expect(sm80.supports(prob(256))).toEqual({ ok: false, reason: 'head dim 256: the backward kernel needs 209.0 KiB of shared memory per block; dry run (no CUDA) allows 163.0 KiB' });
    expect(sm86.supports(prob(64))).toEqual({ ok: true });
    expect(sm86.supports(prob(128, true)).ok).toBe(false);
    expect((sm86.supports(prob(128, true)) as { reason: string }).reason).toMatch(/deterministic backward kernel needs 161\.0 KiB/);
    expect(withLimit(90 * 1024).supports(prob(256))).toMatchObject({ ok: false, reason: expect.stringMatching(/the forward kernel needs 96\.0 KiB/) });
  });

  it('forward/backward with host and device tensors allocate, validate and free', async () => {
    const b = mk();
    const q = tensor(rand(2 * 5 * 4 * 64), [2, 5, 4, 64], 'bf16');
    const k = tensor(rand(2 * 7 * 2 * 64), [2, 7, 2, 64], 'bf16');
    const v = tensor(rand(2 * 7 * 2 * 64), [2, 7, 2, 64], 'bf16');
    const r = await b.forward(q, k, v, { causal: true, softcap: 3, alibiSlopes: [0.1, 0.2, 0.3, 0.4] });
    expect(r.out.kind).toBe('host');
    expect(r.out.shape).toEqual([2, 5, 4, 64]);
    expect(r.lse.shape).toEqual([2, 4, 5]);
    const g = await b.backward(q, k, v, r.out, q, r.lse, { causal: true, deterministic: true });
    expect(g.dk.shape).toEqual([2, 7, 2, 64]);
    const dq = await b.upload(q);
    const dk = await b.upload(k);
    const dv = await b.upload(v);
    const rd = await b.forward(dq, dk, dv, { window: [3, 1] });
    expect(rd.out.kind).toBe('device');
    const host = (await b.read(rd.out)) as HostTensor;
    expect(host.data).toBeInstanceOf(Uint16Array);
    for (const t of [dq, dk, dv, rd.out, rd.lse]) b.disposeTensor(t);
    expect((dq as { disposed?: boolean }).disposed).toBe(true);
    await expect(b.forward(dq, dk, dv)).rejects.toMatchObject({ code: 'E_ARG' });
    await expect(b.forward(q, k, v, { scale: Number.NaN })).rejects.toMatchObject({ code: 'E_ARG' });
    const f32 = tensor(new Float32Array(3 * 5), [1, 3, 1, 5], 'f32');
    const r32 = await b.forward(f32, f32, f32, { causal: true });
    expect(r32.out.dtype).toBe('f32');
    expect((r32.out as HostTensor).data).toBeInstanceOf(Float32Array);
    const g32 = await b.backward(f32, f32, f32, r32.out, f32, r32.lse);
    expect(g32.dv.shape).toEqual([1, 3, 1, 5]);
    const other = mk();
    const foreign = await other.upload(q);
    await expect(b.forward(foreign, dk, dv)).rejects.toMatchObject({ code: 'E_ARG' });
    await b.dispose();
    await expect(b.forward(q, k, v)).rejects.toMatchObject({ code: 'E_DEVICE', message: expect.stringMatching(/disposed/) });
  });

  it('operations settle in the order they were issued, launched on the calling thread or on a worker', async () => {
    if (!native.ok) throw new Error('unreachable');
    // An attention call queues its work on the calling thread when the turn is free, on a worker
    // behind an upload or download that holds it (binding.cc, Op::Start); either way promises
    // settle in issue order (CtxState::completed).
    const ctx = new native.binding.Context({ dryRun: true });
    const B = 2, T = 64, H = 4, D = 64, n = B * T * H * D * 2;
    const cu = Int32Array.from({ length: B + 1 }, (_, i) => i * T);
    const [q, k, v] = [ctx.alloc(n), ctx.alloc(n), ctx.alloc(n)];
    const spec = () => ({ dtype: 'bf16' as const, B, H, Hkv: H, d: D, totalQ: B * T, totalK: B * T, varlen: false, cuSeqlensQ: cu, cuSeqlensK: cu, alibi: null, scale: 0.125, softcap: 0, windowLeft: -1, windowRight: 0, deterministic: false, q, k, v, out: ctx.alloc(n), lse: ctx.alloc(B * T * H * 4) });
    for (let round = 0; round < 20; round++) {
      const settled: number[] = [];
      const calls: Promise<unknown>[] = [];
      const add = (p: Promise<unknown>) => {
        const i = calls.length;
        calls.push(p.then(() => settled.push(i)));
      };
      for (let i = 0; i < 24; i++) {
        const r = (i * 7 + round) % 5;
        if (r === 0) add(ctx.upload(q, new Uint16Array(n / 2)));
        else if (r === 1) add(ctx.download(k, new Uint16Array(n / 2)));
        else if (r === 2) add(ctx.synchronize());
        else add(ctx.forward(spec()));
      }
      await Promise.all(calls);
      expect(settled).toEqual(calls.map((_, i) => i));
    }
  });

  it('varlen with an empty segment and zero-length problems', async () => {
    const b = mk();
    const q = tensor(rand(9 * 2 * 32), [9, 2, 32], 'f16');
    const k = tensor(rand(6 * 1 * 32), [6, 1, 32], 'f16');
    const r = await b.forward(q, k, k, { cuSeqlensQ: [0, 4, 4, 9], cuSeqlensK: [0, 3, 5, 6] });
    expect(r.lse.shape).toEqual([2, 9]);
    const e = tensor(new Uint16Array(0), [1, 0, 2, 32], 'bf16');
    const r0 = await b.forward(e, e, e);
    expect(r0.out.shape).toEqual([1, 0, 2, 32]);
  });
});
