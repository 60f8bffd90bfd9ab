/**
 * The in-process ring: N ranks on N worker threads, each with its own CPU engine, connected in
 * a ring of message ports (port-communicator.ts). Ranks really run concurrently and share
 * nothing but the messages, as processes on separate GPUs would; CI checks the algorithm with
 * it against single-engine attention. Node only (worker_threads).
 *
 * Passes run one at a time. A rank that fails ends the pass on every rank: all workers are
 * terminated (a rank waiting on a dead neighbour would otherwise wait forever) and started
 * again on the next pass.
 */
import type { Worker as NodeWorker } from 'node:worker_threads';
import type { AttentionBackend } from '../backend.js';
import { FAError, isFAError, type FAErrorCode } from '../errors.js';
import type { AttentionOptions } from '../problem.js';
import type { HostTensor } from '../tensor.js';
import { workerExecArgv } from '../cpu/pool.js';
import type { ShardLayout } from './layout.js';
import { createRingBackend, type LayoutKind, type RankShards, type RingRunner } from './ring-backend.js';

type Result = Record<string, HostTensor>;

const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

export class InProcessRing implements RingRunner {
  private workers?: NodeWorker[];
  private tail: Promise<unknown> = Promise.resolve();
  private nextId = 1;
  private disposed = false;

  constructor(readonly ranks: number) {
    if (!(Number.isSafeInteger(ranks) && ranks >= 1)) throw new FAError('E_ARG', `the in-process ring needs an integer number of ranks >= 1, got ${String(ranks)}`);
  }

  private async start(): Promise<NodeWorker[]> {
    if (this.workers) return this.workers;
    let wt: typeof import('node:worker_threads');
    try {
      wt = (await importNode('node:worker_threads')) as typeof import('node:worker_threads');
    } catch (e) {
      throw new FAError('E_UNSUPPORTED', 'the in-process ring needs Node worker threads', { cause: e });
    }
    const n = this.ranks;
    // channel r carries rank r → rank r+1
    const channels = Array.from({ length: n }, () => new wt.MessageChannel());
    const url = new URL('./rank-worker.js', import.meta.url);
    const execArgv = workerExecArgv(process.execArgv);
    this.workers = Array.from({ length: n }, (_, r) => {
      const toNext = channels[r].port1;
      const fromPrev = channels[(r - 1 + n) % n].port2;
      const w = new wt.Worker(url, { name: `fa-ring-${r}`, execArgv, workerData: { rank: r, size: n, toNext, fromPrev }, transferList: [toNext, fromPrev] });
      w.unref();
      return w;
    });
    return this.workers;
  }

  private async stop(): Promise<void> {
    const ws = this.workers;
    this.workers = undefined;
    if (ws) await Promise.all(ws.map((w) => w.terminate()));
  }

  private run(pass: 'forward' | 'backward', layout: ShardLayout, shards: readonly RankShards[], opts: AttentionOptions): Promise<Result[]> {
    const result = this.tail.then(() => this.runNow(pass, layout, shards, opts));
    this.tail = result.catch(() => undefined);
    return result;
  }

  private async runNow(pass: 'forward' | 'backward', layout: ShardLayout, shards: readonly RankShards[], opts: AttentionOptions): Promise<Result[]> {
    if (this.disposed) throw new FAError('E_DEVICE', 'the in-process ring was disposed');
    if (shards.length !== this.ranks) throw new FAError('E_ARG', `${shards.length} shards for a ring of ${this.ranks}`);
    const workers = await this.start();
    const id = this.nextId++;
    let failed = false;
    const answers = workers.map(
      (w, r) =>
        new Promise<Result>((resolve, reject) => {
          const cleanup = () => {
            w.off('message', onMessage);
            w.off('error', onError);
            w.off('exit', onExit);
            w.unref();
          };
          const onMessage = (m: { id: number; ok: boolean; result?: Result; error?: { name: string; message: string; code?: string; stack?: string } }) => {
            if (m.id !== id) return;
            cleanup();
            if (m.ok) resolve(m.result!);
            else {
              const e = m.error!;
              const err = e.name === 'FAError' && e.code ? new FAError(e.code as FAErrorCode, e.message) : new FAError('E_DEVICE', `ring rank ${r} failed: ${e.message}`);
              if (e.stack) err.stack = e.stack;
              reject(err);
            }
          };
          const onError = (e: unknown) => {
            cleanup();
            reject(isFAError(e) ? e : new FAError('E_DEVICE', `ring rank ${r} crashed: ${e instanceof Error ? e.message : String(e)}`, { cause: e }));
          };
          const onExit = (code: number) => {
            cleanup();
            reject(new FAError('E_DEVICE', `ring rank ${r} exited (code ${code})${failed ? ' after another rank failed' : ''}`));
          };
          w.on('message', onMessage);
          w.on('error', onError);
          w.on('exit', onExit);
          w.ref();
          w.postMessage({ id, pass, layout, shards: shards[r], opts });
        }),
    );
    try {
      // the first failure ends the pass: the other ranks may be waiting on the failed one
      return await new Promise<Result[]>((resolve, reject) => {
        let left = answers.length;
        const out: Result[] = [];
        answers.forEach((a, r) =>
          a.then(
            (x) => {
              out[r] = x;
              if (--left === 0) resolve(out);
            },
            (e) => {
              failed = true;
              reject(e);
            },
          ),
        );
      });
    } catch (e) {
      await this.stop();
      throw e;
    }
  }

  async forward(layout: ShardLayout, shards: readonly RankShards[], opts: AttentionOptions): Promise<{ out: HostTensor; lse: HostTensor }[]> {
    return (await this.run('forward', layout, shards, opts)).map((r) => ({ out: r.out, lse: r.lse }));
  }

  async backward(layout: ShardLayout, shards: readonly RankShards[], opts: AttentionOptions): Promise<{ dq: HostTensor; dk: HostTensor; dv: HostTensor; dsinks?: HostTensor }[]> {
    return (await this.run('backward', layout, shards, opts)).map((r) => ({ dq: r.dq, dk: r.dk, dv: r.dv, ...(r.dsinks ? { dsinks: r.dsinks } : {}) }));
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    await this.tail;
    await this.stop();
  }
}

export interface InProcessRingBackendOptions {
  readonly ranks: number;
  readonly layout?: LayoutKind;
}

/**
 * Ring attention on `ranks` worker threads (a CPU engine each) as one AttentionBackend over
 * whole host tensors; the conformance kit runs it like any engine.
 */
export function createInProcessRingBackend(o: InProcessRingBackendOptions): AttentionBackend {
  const runner = new InProcessRing(o.ranks);
  return createRingBackend({
    name: `ring-cpu×${o.ranks}`,
    device: `${o.ranks} worker threads (a CPU engine each)`,
    ranks: o.ranks,
    layout: o.layout,
    dtypes: ['f32', 'f16', 'bf16'],
    supportsBlock: () => ({ ok: true }),
    runner,
  });
}
