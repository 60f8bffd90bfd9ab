// The TypeScript parts of context parallelism on CUDA, without a GPU: the rendezvous (rank
// variables, the NCCL id through a file), the launcher (N processes, rank variables, a failure
// stopping the others), the NCCL communicator over a fake native communicator, and the whole
// ring algorithm over a dry-run CUDA context — every device shard op and attention call goes
// through the binding's full argument validation (exact byte sizes, one context, no aliasing),
// only no kernel runs.
import { createLocalRing, FAError, ringBackward, ringForward, splitShards, zigzagLayout, type Tensor } from '@fa/core';
import { hostTensor } from '@fa/core/testing';
import { mkdtempSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  CudaBackend,
  CudaTensor,
  cudaShardOps,
  decodeNcclId,
  encodeNcclId,
  launchLocal,
  loadNative,
  NcclCommunicator,
  rankFromEnv,
  shareNcclId,
  type NativeBuffer,
  type NativeNcclComm,
} from '../src/index.js';

const native = loadNative();

describe('rendezvous', () => {
  it('reads the rank from FA_* (or torchrun\'s RANK/WORLD_SIZE/LOCAL_RANK); a single rank by default', () => {
    expect(rankFromEnv({})).toEqual({ rank: 0, size: 1, localRank: 0 });
    expect(rankFromEnv({ FA_RANK: '3', FA_WORLD_SIZE: '4', FA_LOCAL_RANK: '1' })).toEqual({ rank: 3, size: 4, localRank: 1 });
    expect(rankFromEnv({ RANK: '1', WORLD_SIZE: '2' })).toEqual({ rank: 1, size: 2, localRank: 1 });
    expect(() => rankFromEnv({ FA_RANK: '2', FA_WORLD_SIZE: '2' })).toThrow(/outside a world of 2/);
    expect(() => rankFromEnv({ FA_RANK: 'x' })).toThrow(/FA_RANK must be a non-negative integer/);
  });

  it('hex ids round-trip; malformed ones are E_ARG', () => {
    const id = Uint8Array.from({ length: 128 }, (_, i) => (i * 37) & 255);
    expect(decodeNcclId(encodeNcclId(id))).toEqual(id);
    expect(() => decodeNcclId('abc')).toThrow(/256 hex digits/);
  });

  it('rank 0 writes the id to the file, the others wait for it; without a rendezvous only one rank may start', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'fa-rdv-')), 'id');
    const id = Uint8Array.from({ length: 128 }, (_, i) => 255 - i);
    const reader = shareNcclId({ rank: 1, size: 2, makeId: () => expect.fail('rank 1 made an id') as never, idFile: file, pollMs: 5 });
    await new Promise((r) => setTimeout(r, 20));
    const written = await shareNcclId({ rank: 0, size: 2, makeId: () => id, idFile: file });
    expect(written).toEqual(id);
    expect(await reader).toEqual(id);
    expect(await shareNcclId({ rank: 0, size: 1, makeId: () => id })).toEqual(id);
    await expect(shareNcclId({ rank: 0, size: 2, makeId: () => id })).rejects.toThrow(/set FA_NCCL_ID_FILE/);
    const late = join(mkdtempSync(join(tmpdir(), 'fa-rdv-')), 'id');
    const e = await shareNcclId({ rank: 1, size: 2, makeId: () => id, idFile: late, timeoutMs: 30, pollMs: 5 }).catch((x: unknown) => x);
    expect((e as FAError).code).toBe('E_DEVICE');
    expect((e as FAError).message).toMatch(/rank 0 did not write the NCCL id/);
  });
});

describe('launcher', () => {
  it('starts N ranks with the rank variables and a shared id file; output is prefixed with the rank', async () => {
    const out: string[] = [];
    const r = await launchLocal({
      nproc: 3,
      command: process.execPath,
      args: ['-e', 'console.log([process.env.FA_RANK, process.env.FA_WORLD_SIZE, process.env.FA_LOCAL_RANK, process.env.FA_NCCL_ID_FILE].join(" "))'],
      out: (l) => out.push(l),
    });
    expect(r.code).toBe(0);
    expect(r.codes).toEqual([0, 0, 0]);
    const byRank = out.sort().map((l) => l.split(' '));
    expect(byRank.map((p) => p.slice(0, 5).join(' '))).toEqual(['[rank 0] 0 3 0', '[rank 1] 1 3 1', '[rank 2] 2 3 2']);
    const files = new Set(byRank.map((p) => p[5]));
    expect(files.size).toBe(1);
    expect(existsSync([...files][0])).toBe(false); // removed after the run
  });

  it('a failing rank stops the others and its exit code is returned', async () => {
    const t0 = Date.now();
    const r = await launchLocal({
      nproc: 3,
      command: process.execPath,
      args: ['-e', 'if (process.env.FA_RANK === "1") process.exit(7); setTimeout(() => {}, 60000)'],
      out: () => undefined,
      err: () => undefined,
      graceMs: 2000,
    });
    expect(r.code).toBe(7);
    expect(r.codes[1]).toBe(7);
    expect(r.signals[0]).toBe('SIGTERM');
    expect(Date.now() - t0).toBeLessThan(30000);
  });
});

describe.skipIf(!native.ok)('on a dry-run CUDA context (argument plumbing, no kernels)', () => {
  const mk = () => {
    if (!native.ok) throw new Error('unreachable');
    const ctx = new native.binding.Context({ dryRun: true });
    return new CudaBackend(ctx, { ok: true, driver: 0, runtime: 0, device: 'dry' }, {}, 0);
  };

  it('NcclCommunicator hands the buffers and its ring neighbours to the native communicator', async () => {
    const b = mk();
    const calls: { send: readonly NativeBuffer[]; recv: readonly NativeBuffer[]; next: number; prev: number }[] = [];
    let aborted = '';
    const fake: NativeNcclComm = {
      rank: 1,
      size: 3,
      device: 0,
      exchange: async (send, recv, next, prev) => {
        calls.push({ send, recv, next, prev });
        if (send.length === 0) throw Object.assign(new Error('peer gone'), { code: 'E_DEVICE' });
      },
      abort: (r) => {
        aborted = r ?? '';
      },
      destroy: async () => undefined,
      isAborted: () => aborted !== '',
    };
    const comm = new NcclCommunicator(fake, b);
    const a = (await b.upload(hostTensor(new Float32Array(8), [8], 'bf16'))) as CudaTensor;
    const c = (await b.upload(hostTensor(new Float32Array(8), [8], 'bf16'))) as CudaTensor;
    await comm.exchange([a], [c]);
    expect(calls[0]).toEqual({ send: [a.handle], recv: [c.handle], next: 2, prev: 0 });
    await expect(comm.exchange([hostTensor(new Float32Array(8), [8], 'f32')], [c])).rejects.toThrow(/send\[0\] must be a device tensor of the communicator's CUDA backend/);
    const e = await comm.exchange([], [c]).catch((x: unknown) => x);
    expect((e as FAError).code).toBe('E_DEVICE');
    comm.abort(new Error('rank 1 ran out of memory'));
    expect(comm.aborted).toBe(true);
    expect(aborted).toBe('rank 1 ran out of memory');
  });

  it('the ring algorithm runs over cudaShardOps for N = 1, 2, 3 (dense with batches, varlen, GQA), forward and backward', async () => {
    const b = mk();
    const ops = cudaShardOps(b);
    for (const [N, B, T, opts] of [
      [1, 1, 40, { causal: true }],
      [2, 2, 37, { causal: true }],
      [3, 1, 50, {}],
      [3, 1, 45, { cuSeqlensQ: [0, 20, 20, 45], cuSeqlensK: [0, 20, 20, 45], causal: true }],
    ] as const) {
      const varlen = 'cuSeqlensQ' in opts;
      const shape = (h: number) => (varlen ? [T, h, 16] : [B, T, h, 16]);
      const host = (h: number) => hostTensor(new Float32Array(B * T * h * 16), shape(h), 'bf16');
      const layout = zigzagLayout(N, T);
      const [qs, ks, vs] = [splitShards(host(4), layout, 'q'), splitShards(host(2), layout, 'k'), splitShards(host(2), layout, 'k')];
      const comms = createLocalRing(N, ops);
      const up = async (t: ReturnType<typeof host>) => b.upload(t);
      const res = await Promise.all(
        comms.map(async (comm, r) => {
          const [q, k, v] = [await up(qs[r]), await up(ks[r]), await up(vs[r])];
          const ctx = { engine: b, ops, comm, layout };
          const f = await ringForward(ctx, q, k, v, opts);
          const g = await ringBackward(ctx, q, k, v, f.out, q, f.lse, opts);
          return { f, g, q, k };
        }),
      );
      for (const { f, g, q, k } of res) {
        expect(f.out.shape).toEqual(q.shape);
        expect(f.lse.shape).toEqual(varlen ? [4, q.shape[0]] : [B, 4, q.shape[1]]);
        expect(g.dq.shape).toEqual(q.shape);
        expect(g.dk.shape).toEqual(k.shape);
        for (const t of [f.out, f.lse, g.dq, g.dk, g.dv] as Tensor[]) expect((t as CudaTensor).disposed).toBe(false);
      }
    }
  });

  it('device shard ops refuse foreign tensors and wrong sizes with a code', async () => {
    const b = mk();
    const other = mk();
    const ops = cudaShardOps(b);
    const acc = (await ops.alloc('f32', [4, 2], 0)) as CudaTensor;
    const x = (await ops.alloc('bf16', [8])) as CudaTensor;
    await ops.accumulate(acc, x);
    await expect(ops.accumulate(acc, await ops.alloc('bf16', [7]))).rejects.toThrow(/accumulate: bf16\[7\] into f32\[4, 2\]/);
    await expect(ops.accumulate(acc, await other.upload(hostTensor(new Float32Array(8), [8], 'bf16')))).rejects.toThrow(/device tensor of this CUDA backend/);
    await expect(ops.alloc('bf16', [2], 0)).rejects.toThrow(/only f32 tensors are filled/);
    await expect(ops.transposeLse(acc, 3, 'packed')).rejects.toMatchObject({ code: 'E_SHAPE' });
    expect(() => ops.view(acc, [3])).toThrow(/cannot be viewed/);
    const n = native.ok ? native.binding.shardOps! : undefined;
    // straight into the binding: each malformed call throws synchronously with a code
    const bad: (() => unknown)[] = [
      () => n!.merge(acc.handle, acc.handle, x.handle, 'bf16', acc.handle, 1, 2, 4),
      () => n!.convert(x.handle, 'f64' as never, acc.handle, 8),
      () => n!.copy(x.handle, 0, x.handle, 0, 16),
      () => n!.random(x.handle, 'bf16', 9, 1, 1),
      () => n!.fill(acc.handle, -1, 0),
      () => n!.transposeLse(acc.handle, acc.handle, 1, 2, 4, 'yes' as never),
    ];
    for (const f of bad) {
      let err: unknown;
      try {
        f();
      } catch (e) {
        err = e;
      }
      expect(err, String(f)).toBeInstanceOf(Error);
      expect(typeof (err as { code?: unknown }).code).toBe('string');
    }
  });
});
