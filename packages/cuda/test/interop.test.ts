// Other programs' CUDA memory and streams (issue 24). Argument checks run everywhere (a dry-run
// context validates without CUDA); the zero-copy checks with a second addon (test/peer/peer.cu)
// run where a GPU is, and are listed as skipped with the reason elsewhere.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { FAError } from '@fa/core';
import { CudaBackend, createCudaBackend, cudaStatus } from '../src/backend.js';
import { loadNative, type NativeProbe } from '../src/native.js';
import { buildPeer, PEER_PATH } from './peer/build.mjs';
import { interopChecks } from './interop-checks.mjs';
import { validSpec } from '../bench/fuzz-lib.mjs';

const native = loadNative();
const dryProbe: NativeProbe = { ok: true, driver: 0, runtime: 0 } as NativeProbe;

const code = async (f: () => unknown) => {
  try {
    await f();
    return 'no error';
  } catch (e) {
    expect(e).toBeInstanceOf(FAError);
    return `${(e as FAError).code}: ${(e as FAError).message}`;
  }
};

describe.skipIf(!native.ok)('cuda: wrapped pointers, argument checks (dry run)', () => {
  it('refuses bad addresses, sizes and streams with one line', async () => {
    if (!native.ok) return;
    const be = new CudaBackend(new native.binding.Context({ dryRun: true }), dryProbe);
    const shape = [1, 8, 2, 16];
    expect(await code(() => be.wrapPointer(4096 as unknown as bigint, { dtype: 'f32', shape }))).toMatch(/^E_ARG: wrapPointer: address must be a bigint, got number/);
    expect(await code(() => be.wrapPointer(4096n + 16n, { dtype: 'f32', shape }))).toMatch(/^E_ARG: wrapPointer: address 0x1010 is not a multiple of 256 bytes/);
    expect(await code(() => be.wrapPointer(4096n, { dtype: 'f8' as 'f32', shape }))).toMatch(/^E_DTYPE: /);
    expect(await code(() => be.wrapPointer(4096n, { dtype: 'f32', shape: [2, -1] }))).toMatch(/^E_SHAPE: /);
    expect(await code(() => be.wrapPointer(0n, { dtype: 'f32', shape }))).toMatch(/^E_ARG: cuda: wrap: address is null/);
    expect(await code(() => be.wrapPointer(2n ** 64n, { dtype: 'f32', shape }))).toMatch(/^E_ARG: cuda: wrap: address is not a 64-bit unsigned address/);
    expect(await code(() => createCudaBackend({ stream: 5 as unknown as bigint }))).toMatch(/^E_ARG: createCudaBackend: stream must be a bigint/);
    expect(() => new native.binding.Context({ dryRun: true, stream: 'x' as unknown as bigint })).toThrow(/stream must be a bigint/);
    const t = be.wrapPointer(1n << 36n, { dtype: 'f32', shape });
    expect(be.exportPointer(t)).toMatchObject({ address: 1n << 36n, bytes: 8 * 2 * 16 * 4, dtype: 'f32', shape, device: 0 });
    be.disposeTensor(t);
    expect(await code(() => be.exportPointer(t))).toMatch(/^E_ARG: exportPointer: the tensor is a device tensor that was already disposed/);
  });

  it('the binding refuses an output over the bytes of an input or another output (two buffers, one range)', async () => {
    if (!native.ok) return;
    const ctx = new native.binding.Context({ dryRun: true });
    const s = validSpec(ctx, false) as unknown as Record<string, { address: bigint; bytes: number }>;
    const msg = async (spec: object) => {
      try {
        await ctx.forward(spec as never);
        return 'no error';
      } catch (e) {
        return `${(e as { code?: string }).code}: ${(e as Error).message}`; // the binding's errors: Error with a code
      }
    };
    expect(await msg({ ...s, out: ctx.wrap(s.q.address, s.q.bytes) })).toMatch(/out \(an output\) overlaps an input/);
    expect(await msg({ ...s, lse: ctx.wrap(s.out.address, s.lse.bytes) })).toMatch(/lse overlaps another output/);
    expect(await msg({ ...s, q: ctx.wrap(s.k.address, s.q.bytes) })).not.toMatch(/overlap/); // inputs may share bytes
    expect(await msg(s)).toBe('no error');
  });

  it('a call whose written tensor overlaps another through a second wrap is refused before anything is queued', async () => {
    if (!native.ok) return;
    const be = new CudaBackend(new native.binding.Context({ dryRun: true }), dryProbe);
    const base = 1n << 37n;
    const [B, cap, Hkv, D] = [1, 8, 1, 16];
    const q = be.wrapPointer(base, { dtype: 'f32', shape: [B, 1, 1, D] });
    // the K cache over q's bytes (and more): the call would write the cache while reading q
    const kc = be.wrapPointer(base, { dtype: 'f32', shape: [B, cap, Hkv, D] });
    const vc = be.wrapPointer(base + 65536n, { dtype: 'f32', shape: [B, cap, Hkv, D] });
    expect(await code(() => be.forwardWithKVCache(q, kc, vc, { cacheSeqlens: Int32Array.from([3]) }))).toMatch(/^E_ARG: cuda: kCache overlaps another argument, and one of them is written/);
    const kc2 = be.wrapPointer(base + 4096n, { dtype: 'f32', shape: [B, cap, Hkv, D] });
    expect(await code(() => be.forwardWithKVCache(q, kc2, vc, { cacheSeqlens: Int32Array.from([3]) }))).toBe('no error');
  });
});

const gpu = native.ok && cudaStatus().available;
let peerWhy = gpu ? '' : `no GPU here (${native.ok ? (cudaStatus() as { reason?: string }).reason : native.reason})`;
if (gpu && !existsSync(PEER_PATH)) peerWhy = buildPeer() ?? '';

describe.skipIf(!gpu || peerWhy !== '')(`cuda: another addon's memory and stream, no copies${peerWhy ? ` (skipped: ${peerWhy})` : ''}`, () => {
  it('every interop check passes', async () => {
    const peer = createRequire(import.meta.url)(PEER_PATH);
    const results = await interopChecks(peer, createCudaBackend);
    for (const r of results) console.log(`${r.pass ? 'ok  ' : 'FAIL'} ${r.name}: ${r.message}`);
    expect(results.filter((r) => !r.pass)).toEqual([]);
    expect(results.length).toBe(4);
  });
});
