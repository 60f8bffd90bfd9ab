/**
 * A small pool of worker threads for the CPU engine (Node's worker_threads).
 *
 * - Jobs run one at a time, in call order; a job goes to up to `size` workers, each of which
 *   pulls units from the job's shared counter, and the job ends when every worker answered.
 * - Workers are unref()'d while idle, so an idle pool never keeps the process alive, and
 *   ref()'d while they work, so a pending `await backend.forward(...)` does.
 * - A worker that crashes fails its job (FAError E_DEVICE) and is replaced on the next job;
 *   the pool stays usable. dispose() terminates every worker.
 */
import type { Worker as NodeWorker } from 'node:worker_threads';
import { FAError } from '../errors.js';
import type { Job } from './job.js';

type WorkerCtor = new (url: URL, opts?: { name?: string; execArgv?: string[] }) => NodeWorker;

interface Slot {
  worker: NodeWorker;
  dead: boolean;
  pending?: { id: number; resolve: () => void; reject: (e: unknown) => void };
}

let nextId = 1;

/**
 * The parent's Node flags minus those that only make sense for the main script: a worker
 * inherits process.execArgv, and `node --input-type=module -e '…'` would otherwise make every
 * worker fail to start (ERR_INPUT_TYPE_NOT_ALLOWED).
 */
export function workerExecArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-e' || a === '--eval' || a === '-p' || a === '--print') {
      i++; // and the script
      continue;
    }
    if (a.startsWith('--input-type') || a.startsWith('--eval=') || a.startsWith('--print=')) continue;
    out.push(a);
  }
  return out;
}

/** J: the job type its workers understand (the CPU engine's Job; @fa/wasm passes its own). */
export class WorkerPool<J = Job> {
  private slots: Slot[] = [];
  private tail: Promise<unknown> = Promise.resolve();
  private disposed = false;

  constructor(
    readonly size: number,
    private readonly WorkerClass: WorkerCtor,
    private readonly url: URL,
    /** The engine named in thread names and error messages. */
    private readonly label = 'cpu',
  ) {}

  /** Threads started so far (the pool starts them on first use). */
  get started(): number {
    return this.slots.filter((s) => !s.dead).length;
  }

  /** Starts every worker now (benchmarks and memory tests warm the pool before measuring). */
  warm(): void {
    this.fill(this.size);
  }

  private fill(n: number): void {
    this.slots = this.slots.filter((s) => !s.dead);
    while (this.slots.length < n) this.slots.push(this.spawn());
  }

  private spawn(): Slot {
    const execArgv = typeof process !== 'undefined' && Array.isArray(process.execArgv) ? workerExecArgv(process.execArgv) : undefined;
    const name = `fa-${this.label}-${this.slots.length}`;
    let worker: NodeWorker;
    try {
      worker = new this.WorkerClass(this.url, { name, ...(execArgv ? { execArgv } : {}) });
    } catch (e) {
      // V8 flags (`node --experimental-wasm-relaxed-simd app.js`) are process-wide and Node
      // refuses them in a worker's execArgv: start it without the flags Node names.
      if ((e as { code?: string }).code !== 'ERR_WORKER_INVALID_EXEC_ARGV' || !execArgv) throw e;
      const invalid = new Set(String((e as Error).message).replace(/^[^:]*:\s*/, '').split(/,\s*/));
      worker = new this.WorkerClass(this.url, { name, execArgv: execArgv.filter((a) => !invalid.has(a)) });
    }
    worker.unref();
    const slot: Slot = { worker, dead: false };
    const fail = (why: string, cause?: unknown) => {
      slot.dead = true;
      const p = slot.pending;
      slot.pending = undefined;
      p?.reject(new FAError('E_DEVICE', `${this.label} worker thread failed: ${why}`, { cause }));
    };
    worker.on('message', (msg: { id: number; ok: boolean; error?: { name: string; message: string; code?: string; stack?: string } }) => {
      const p = slot.pending;
      if (!p || p.id !== msg.id) return;
      slot.pending = undefined;
      if (msg.ok) p.resolve();
      else {
        const e = msg.error!;
        const err = e.name === 'FAError' && e.code ? new FAError(e.code as 'E_DEVICE', e.message) : new FAError('E_DEVICE', `${this.label} worker thread failed: ${e.message}`);
        if (e.stack) err.stack = e.stack;
        p.reject(err);
      }
    });
    worker.on('error', (err) => fail(err instanceof Error ? err.message : String(err), err));
    worker.on('exit', (code) => fail(`exited with code ${code}`));
    return slot;
  }

  /**
   * Hands `job` to up to `threads` started workers without waiting for them (their replies are
   * ignored): for a caller that runs the job's units itself too and learns of their completion
   * through shared memory (the wasm engine's threaded matrix product). Returns how many got it.
   */
  post(job: J, threads: number): number {
    if (this.disposed) return 0;
    const live = this.slots.filter((s) => !s.dead).slice(0, Math.max(0, threads));
    for (const slot of live) slot.worker.postMessage({ id: nextId++, job });
    return live.length;
  }

  /** Runs `job` on up to `threads` workers; resolves when all of them are done. */
  run(job: J, threads: number): Promise<void> {
    const result = this.tail.then(() => this.runNow(job, threads));
    this.tail = result.catch(() => undefined);
    return result;
  }

  private async runNow(job: J, threads: number): Promise<void> {
    if (this.disposed) throw new FAError('E_DEVICE', `the ${this.label} backend was disposed`);
    const n = Math.max(1, Math.min(this.size, threads));
    this.fill(n);
    const used = this.slots.slice(0, n);
    const id = nextId++;
    const done = used.map(
      (slot) =>
        new Promise<void>((resolve, reject) => {
          slot.pending = { id, resolve, reject };
          slot.worker.ref();
          slot.worker.postMessage({ id, job });
        }),
    );
    // Wait for every worker (even after a failure) so no thread still writes when we return.
    const settled = await Promise.allSettled(done);
    for (const slot of used) if (!slot.dead) slot.worker.unref();
    const bad = settled.find((s) => s.status === 'rejected') as PromiseRejectedResult | undefined;
    if (bad) throw bad.reason;
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    const slots = this.slots;
    this.slots = [];
    await Promise.all(
      slots.map(async (s) => {
        s.dead = true;
        const p = s.pending;
        s.pending = undefined;
        p?.reject(new FAError('E_DEVICE', `the ${this.label} backend was disposed while a call was running`));
        await s.worker.terminate();
      }),
    );
  }
}
