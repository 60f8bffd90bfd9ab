// A complete fake NCCL (fixtures/fake-nccl.c, built with cc) through the real loader and
// binding: found through FA_NCCL_LIB, version and path reported, ncclGetUniqueId passed
// through, and ncclCommInitRank reached only on a CUDA device — without one (here, CI) the
// communicator fails with the CUDA driver's reason, as FAError E_DEVICE. Its own process,
// because a loaded NCCL stays loaded.
import { FAError } from '@fa/core';
import { describe, expect, it } from 'vitest';
import { CudaBackend, createNcclCommunicator, cudaStatus, loadNative, ncclStatus } from '../src/index.js';
import { buildFakeNccl } from './helpers/fake-nccl.js';

const native = loadNative();
const fake = native.ok ? buildFakeNccl(22803) : { reason: native.reason };

describe.skipIf(!native.ok || 'reason' in fake)(`a fake NCCL 2.28.3${'reason' in fake ? ` (skipped: ${fake.reason})` : ''}`, () => {
  it('is loaded from FA_NCCL_LIB, with its version and path', () => {
    if ('reason' in fake) return;
    const s = ncclStatus({ FA_NCCL_LIB: fake.path });
    expect(s).toEqual({ available: true, version: '2.28.3', path: fake.path });
  });

  it('gives its unique id; the communicator reaches CUDA (and fails cleanly without a device)', async () => {
    if ('reason' in fake || !native.ok) return;
    const id = native.binding.nccl!.uniqueId();
    expect(Array.from(id.slice(0, 4))).toEqual([0, 1, 2, 3]);
    expect(id.length).toBe(128);
    const ctx = new native.binding.Context({ dryRun: true });
    const backend = new CudaBackend(ctx, { ok: true, driver: 0, runtime: 0, device: 'dry' }, {}, 0);
    const r = await createNcclCommunicator(backend, { rank: 0, size: 1, env: { FA_NCCL_LIB: fake.path } }).catch((x: unknown) => x);
    if (cudaStatus().available) {
      // a real GPU: the fake NCCL "initialises" and the communicator can be destroyed
      expect((r as { rank: number }).rank).toBe(0);
      await (r as { destroy(): Promise<void> }).destroy();
    } else {
      expect(r).toBeInstanceOf(FAError);
      expect((r as FAError).code).toBe('E_DEVICE');
      expect((r as FAError).message).toMatch(/CUDA error setting up CUDA device 0: cuda\w+/);
    }
  });

  it('refuses malformed init arguments before touching NCCL', async () => {
    if (!native.ok) return;
    const nccl = native.binding.nccl!;
    expect(() => nccl.init({ device: 0, rank: 2, size: 2, id: new Uint8Array(128) })).toThrow(/rank must be an integer in \[0, 1\]/);
    expect(() => nccl.init({ device: 0, rank: 0, size: 1, id: new Uint8Array(12) })).toThrow(/128-byte Uint8Array/);
    expect(() => nccl.init({ device: -1, rank: 0, size: 1, id: new Uint8Array(128) })).toThrow(/device must be an integer/);
  });
});
