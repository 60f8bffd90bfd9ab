// Stream calls finished on the calling thread (Op::StartNow, FA_CUDA_STREAM_INLINE=1), in a
// dry-run context (no GPU needed): the binding returns undefined when nothing before the call is
// unfinished and its promise otherwise, and a chain of stream calls runs and syncs. The GPU side
// (timings, the KV flag slots) is measured on the H200 (KERNEL_NOTES "Host cost").
import { describe, expect, it } from 'vitest';
import { tensor } from '@fa/core';
import { loadNative, type NativeProbe } from '../src/native.js';
import { validKvSpec, validSpec } from '../bench/fuzz-lib.mjs';

process.env.FA_CUDA_STREAM_INLINE = '1'; // (read when stream.ts loads: below)
const { CudaBackend } = await import('../src/backend.js');
const native = loadNative();

describe.skipIf(!native.ok)('cuda: stream calls finished on the calling thread (dry run)', () => {
  it('the binding finishes a call here when nothing before it is unfinished, else returns its promise', async () => {
    if (!native.ok) return;
    const ctx = new native.binding.Context({ dryRun: true });
    const spec = validSpec(ctx, false) as never;
    expect(ctx.forward(spec, true)).toBeUndefined();
    expect(ctx.backward(validSpec(ctx, true) as never, true)).toBeUndefined();
    expect(ctx.kvForward(validKvSpec(ctx) as never, true)).toBeUndefined();
    // an upload not yet settled: the next call takes the ordinary path (a promise, settled after it)
    const buf = ctx.alloc(64);
    const up = ctx.upload(buf, new Uint8Array(64));
    const later = ctx.forward(spec, true);
    expect(later).toBeInstanceOf(Promise);
    await Promise.all([up, later]);
    expect(ctx.forward(spec, true)).toBeUndefined();
    await expect(ctx.synchronize()).resolves.toBeUndefined();
    // argument errors still throw at the call
    expect(() => ctx.forward({ ...(spec as object), B: 0 } as never, true)).toThrow();
  });

  it('a chain of stream calls runs and syncs, and the awaitable calls still settle', async () => {
    if (!native.ok) return;
    const be = new CudaBackend(new native.binding.Context({ dryRun: true }), { ok: true, driver: 0, runtime: 0 } as NativeProbe);
    const s = be.stream;
    const shape = [1, 16, 2, 32];
    const q = s.upload(tensor(new Uint16Array(16 * 64), shape, 'bf16'));
    await s.sync();
    const f = s.forward(q, q, q, { causal: true });
    const g = s.backward(q, q, q, f.out, q, f.lse, { causal: true });
    const kc = s.upload(tensor(new Uint16Array(64 * 2 * 32), [1, 64, 2, 32], 'bf16'));
    const vc = s.upload(tensor(new Uint16Array(64 * 2 * 32), [1, 64, 2, 32], 'bf16'));
    const kv = s.forwardWithKVCache(g.dq, kc, vc, { cacheSeqlens: Int32Array.of(10), causal: true });
    await expect(s.sync()).resolves.toBeUndefined();
    expect((await s.read(kv.out)).shape).toEqual(shape);
    const a = await be.forward(q, q, q);
    expect(a.out.shape).toEqual(shape);
  });
});
