/**
 * Worker-thread entry of the in-process ring (inprocess.ts): one rank with its own CPU engine
 * (on this thread, no pool), talking to its neighbours through two message ports. Each message
 * { id, pass, layout, shards, opts } runs ringForward or ringBackward and is answered
 * { id, ok, result } or { id, ok: false, error }.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { createCpuBackend } from '../cpu/engine.js';
import type { AttentionOptions } from '../problem.js';
import type { ShardLayout } from './layout.js';
import { hostShardOps } from './host-ops.js';
import { PortCommunicator, type PortLike } from './port-communicator.js';
import type { RankShards } from './ring-backend.js';
import { ringBackward, ringForward } from './ring.js';

interface Job {
  readonly id: number;
  readonly pass: 'forward' | 'backward';
  readonly layout: ShardLayout;
  readonly shards: RankShards;
  readonly opts: AttentionOptions;
}

const { rank, size, toNext, fromPrev } = workerData as { rank: number; size: number; toNext: PortLike; fromPrev: PortLike };
const comm = new PortCommunicator(rank, size, toNext, fromPrev);
const enginePromise = createCpuBackend({ threads: 0, exactRowStats: false });
const port = parentPort;

if (port) {
  port.on('message', async (job: Job) => {
    try {
      const engine = await enginePromise;
      const ctx = { engine, ops: hostShardOps, comm, layout: job.layout };
      const s = job.shards;
      const result = job.pass === 'forward' ? await ringForward(ctx, s.q, s.k, s.v, job.opts) : await ringBackward(ctx, s.q, s.k, s.v, s.out!, s.dOut!, s.lse!, job.opts);
      port.postMessage({ id: job.id, ok: true, result });
    } catch (err) {
      const e = err as { name?: string; message?: string; code?: string; stack?: string };
      port.postMessage({ id: job.id, ok: false, error: { name: e?.name ?? 'Error', message: e?.message ?? String(err), code: e?.code, stack: e?.stack } });
    }
  });
}
