/**
 * The CPU engine (backend "cpu"): tiled FlashAttention forward and backward in plain
 * TypeScript, on every core through worker threads sharing SharedArrayBuffer memory.
 *
 * - Inputs are host tensors (f32, f16, bf16). Tiles are decoded to float64 as they are loaded;
 *   all arithmetic is float64; out/dq/dk/dv are rounded once to the inputs' dtype; lse is f32.
 * - Forward work is split into (batch, kv head, query tile) units, backward into (batch, kv
 *   head) groups, or key-tile slices of them with private dQ accumulators summed in a fixed
 *   order when there are fewer groups than threads. Results never depend on scheduling.
 * - Problems below `inlineBelowFlops` run on the calling thread, as does everything where
 *   worker threads are unavailable (a browser page): the same kernels, single-threaded.
 * - Memory beyond inputs and outputs: per-thread tiles (a few hundred KiB), per-unit row
 *   bookkeeping (O(Tq)), and in the backward Dvec and a float64 lse (16 bytes per row and
 *   head), the private dQ accumulators (one per extra slice, each the size of one group's dQ)
 *   and, for f16/bf16, a float32 dQ accumulator. Copies of the inputs in shared memory only
 *   when the caller's are not SharedArrayBuffer-backed and the problem goes to the workers.
 *   Nothing of size Tq×Tk is ever allocated.
 */
import type { AttentionBackend, BackwardResult, ForwardResult, Support } from '../backend.js';
import type { DType } from '../dtype.js';
import { encode } from '../dtype.js';
import { FAError, isFAError } from '../errors.js';
import { describeBackward, describeProblem, problemFlops, type AttentionOptions, type AttentionProblem } from '../problem.js';
import { allocFloat32, allocHost, isHostTensor, tensor, type HostData, type HostTensor, type Tensor } from '../tensor.js';
import { describeKVCacheProblem, hostIndexTensor, isDeviceIndexTensor, writeHostIndex, type DeviceIndexTensor, type HostIndexTensor, type IndexData, type KVCacheOptions, type KVCacheProblem } from '../kvcache.js';
import { appendKVCacheHost, kvCacheAsVarlen, lseToKVCache, rotateKVInputs } from '../kvcache-host.js';
import { combineKVCache, kvHeadsPerUnit, planKVCache } from './kvcache.js';
import { planBackward, reducePrivate } from './backward.js';
import { planForward } from './forward.js';
import { sinkGradients } from '../sinks.js';
import { BWD_UNIT, FWD_UNIT, KV_UNIT, Workspace, type BackwardJob, type DvecJob, type ForwardJob, type Job, type KVCacheJob } from './job.js';
import type { WorkerPool } from './pool.js';
import { runJob } from './run.js';
import { cpuModelOps } from '../ops/cpu-ops.js';
import type { HostModelOps } from '../ops/model-ops.js';
import { checkTiles, chooseTiles, DEFAULT_CPU_CACHE, paddedD, type CacheModel, type TileSizes } from './tiles.js';

export interface CpuEngineOptions {
  /**
   * Worker threads. Default: os.availableParallelism() (navigator.hardwareConcurrency in a
   * browser, where workers are not used). 0 runs everything on the calling thread.
   */
  readonly threads?: number;
  /** Tile sizes for the forward pass; default from the cache model (chooseTiles). */
  readonly tiles?: TileSizes;
  /** Tile sizes for the backward pass; default: `tiles` if given, else the cache model. */
  readonly backwardTiles?: TileSizes;
  /** Cache sizes for the tile model. */
  readonly cache?: CacheModel;
  /** Problems with fewer forward FLOPs than this run on the calling thread. Default 2^24. */
  readonly inlineBelowFlops?: number;
  /**
   * Backward: recompute each row's output (float64) and correct its float32 lse in a pre-pass
   * instead of using the given `out` and `lse` for Dvec = rowsum(dO∘O) (costs ~40% more time).
   * Default: true for f16/bf16, whose rounded `out` is too coarse where P is nearly one-hot;
   * false for f32. KERNEL_NOTES.md explains.
   */
  readonly exactRowStats?: boolean;
  /**
   * KV-cache calls: keys per chunk when a sequence's key range is split over workers
   * (flash-decoding; default KV_CHUNK = 1024). Changes summation order only.
   */
  readonly kvChunk?: number;
}

export const DEFAULT_INLINE_BELOW_FLOPS = 2 ** 24;

interface Platform {
  threads: number;
  pool?: () => Promise<WorkerPool>;
}

// Dynamic imports through a variable, so bundlers for the browser leave them alone and the
// module loads where node:* does not exist.
export const importNode = (name: string): Promise<unknown> => import(/* @vite-ignore */ /* webpackIgnore: true */ name);

async function detectPlatform(requested: number | undefined): Promise<Platform> {
  let cores = 1;
  let wt: typeof import('node:worker_threads') | undefined;
  try {
    const os = (await importNode('node:os')) as typeof import('node:os');
    cores = typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
    wt = (await importNode('node:worker_threads')) as typeof import('node:worker_threads');
  } catch {
    const nav = (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator;
    cores = nav?.hardwareConcurrency ?? 1;
  }
  const threads = requested ?? cores;
  if (!wt || typeof SharedArrayBuffer === 'undefined' || threads <= 0) return { threads: wt ? Math.max(threads, 0) : 0 };
  const WorkerClass = wt.Worker;
  const { WorkerPool } = await import('./pool.js');
  let pool: WorkerPool | undefined;
  return {
    threads,
    pool: async () => (pool ??= new WorkerPool(threads, WorkerClass, new URL('./worker.js', import.meta.url))),
  };
}

const isShared = (d: HostData): boolean => typeof SharedArrayBuffer !== 'undefined' && d.buffer instanceof SharedArrayBuffer;

function shared<T extends HostData>(d: T): T {
  if (isShared(d)) return d;
  const c = (d instanceof Float32Array ? allocFloat32(d.length) : new Uint16Array(new SharedArrayBuffer(d.length * 2))) as T;
  c.set(d);
  return c;
}

function host(t: Tensor, what: string): HostTensor {
  if (isHostTensor(t)) return t;
  throw new FAError('E_ARG', `${what} is a device tensor of backend "${t.backend}"; the cpu backend takes host tensors (read() it from its backend first)`);
}

function alloc<T>(f: () => T, what: string): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof RangeError) throw new FAError('E_OOM', `cpu backend: could not allocate ${what}: ${e.message}`, { cause: e });
    throw e;
  }
}

export class CpuBackend implements AttentionBackend {
  readonly name = 'cpu';
  readonly device: string;
  readonly dtypes: readonly DType[] = ['f32', 'f16', 'bf16'];
  readonly modelOps: HostModelOps = cpuModelOps;
  /** Worker threads used for large problems (0: everything runs on the calling thread). */
  readonly threads: number;
  private readonly ws = new Workspace();
  private readonly inlineBelow: number;
  private disposed = false;

  constructor(
    private readonly platform: Platform,
    private readonly opts: CpuEngineOptions,
  ) {
    this.threads = platform.pool ? platform.threads : 0;
    this.device = `CPU ×${Math.max(1, this.threads)}`;
    this.inlineBelow = opts.inlineBelowFlops ?? DEFAULT_INLINE_BELOW_FLOPS;
    if (opts.tiles) checkTiles(opts.tiles);
    if (opts.backwardTiles) checkTiles(opts.backwardTiles);
  }

  supports(_p: AttentionProblem): Support {
    return { ok: true };
  }

  /**
   * Whether backward() recomputes each row's out and lse from its keys (exactRowStats) instead
   * of using the given ones: exact for a whole problem, not for one block of keys, so context
   * parallelism (ring.ts) refuses an engine that does.
   */
  recomputesRowStats(dtype: DType): boolean {
    return this.opts.exactRowStats ?? dtype !== 'f32';
  }

  /** The tile sizes used for a head dimension and pass. */
  tileSizes(d: number, pass: 'forward' | 'backward'): TileSizes {
    const o = pass === 'forward' ? this.opts.tiles : (this.opts.backwardTiles ?? this.opts.tiles);
    return o ?? chooseTiles(d, pass, this.opts.cache ?? DEFAULT_CPU_CACHE);
  }

  /** Starts the worker threads now instead of on the first large call. */
  async warm(): Promise<void> {
    this.alive();
    if (this.platform.pool) (await this.platform.pool()).warm();
  }

  private alive(): void {
    if (this.disposed) throw new FAError('E_DEVICE', 'the cpu backend was disposed; resolve a new one');
  }

  /** Runs a job on the pool (its buffers are then all SharedArrayBuffer-backed) or inline. */
  private async execute(job: Job, units: number, pooled: boolean): Promise<void> {
    if (units === 0) return;
    if (!pooled || !this.platform.pool) {
      runJob(job, this.ws);
      return;
    }
    const pool = await this.platform.pool();
    try {
      await pool.run(job, Math.min(this.threads, units));
    } catch (e) {
      throw isFAError(e) ? e : new FAError('E_DEVICE', `cpu backend: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
  }

  private willUseWorkers(units: number, flops: number): boolean {
    return !!this.platform.pool && this.threads > 1 && flops >= this.inlineBelow && units > 1;
  }

  async forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): Promise<ForwardResult> {
    this.alive();
    const p = describeProblem(q, k, v, opts);
    const [qh, kh, vh] = [host(q, 'q'), host(k, 'k'), host(v, 'v')];
    const { br, bc } = this.tileSizes(Math.max(p.d, p.vDim), 'forward');
    const units = planForward(p, br);
    const nUnits = units.length / FWD_UNIT;
    const flops = problemFlops(p);
    const pooled = this.willUseWorkers(nUnits, flops);
    const out = alloc(() => allocHost(p.dtype, p.totalQ * p.h * p.vDim), 'the output');
    const lse = alloc(() => allocFloat32(p.h * p.totalQ), 'the lse');
    const job: ForwardJob = {
      kind: 'forward', p, br, bc,
      q: pooled ? alloc(() => shared(qh.data), 'a shared copy of q') : qh.data,
      k: pooled ? alloc(() => shared(kh.data), 'a shared copy of k') : kh.data,
      v: pooled ? alloc(() => shared(vh.data), 'a shared copy of v') : vh.data,
      out, lse, units,
      counter: pooled ? new Int32Array(new SharedArrayBuffer(4)) : new Int32Array(1),
    };
    await this.execute(job, nUnits, pooled);
    return { out: tensor(out, p.outShape, p.dtype), lse: tensor(lse, p.lseShape, 'f32') };
  }

  async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
    this.alive();
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    const [qh, kh, vh, oh, dOh, lh] = [host(q, 'q'), host(k, 'k'), host(v, 'v'), host(out, 'out'), host(dOut, 'dOut'), host(lse, 'lse')];
    const { br, bc } = this.tileSizes(Math.max(p.d, p.vDim), 'backward');
    const flops = 2.5 * problemFlops(p);
    const threads = this.willUseWorkers(2, flops) ? this.threads : 1;
    const plan = planBackward(p, bc, threads);
    const nUnits = plan.units.length / BWD_UNIT;
    const pooled = this.willUseWorkers(nUnits, flops);
    const nq = p.totalQ * p.h * p.d;
    const nk = p.totalK * p.hkv * p.d;
    const dq = alloc(() => allocHost(p.dtype, nq), 'dq');
    const dk = alloc(() => allocHost(p.dtype, nk), 'dk');
    const dv = alloc(() => allocHost(p.dtype, p.totalK * p.hkv * p.vDim), 'dv');
    // float32 dQ accumulator: dq itself for f32, a scratch buffer rounded into dq at the end otherwise
    const dqAcc = p.dtype === 'f32' ? (dq as Float32Array) : alloc(() => allocFloat32(nq), 'the float32 dq accumulator');
    const mk = pooled ? allocFloat32 : (n: number) => new Float32Array(n);
    const dqPrivate = alloc(() => plan.privateSizes.map((n) => mk(n)), 'the private dq accumulators');
    const sh = <T extends HostData>(d: T, what: string): T => (pooled ? alloc(() => shared(d), `a shared copy of ${what}`) : d);
    const counter = () => (pooled ? new Int32Array(new SharedArrayBuffer(4)) : new Int32Array(1));
    const [qd, kd, vd, od, dOd, ld] = [sh(qh.data, 'q'), sh(kh.data, 'k'), sh(vh.data, 'v'), sh(oh.data, 'out'), sh(dOh.data, 'dOut'), sh(lh.data as Float32Array, 'lse')];
    // phase 1: Dvec = rowsum(dO ∘ O), in the lse layout; exact O (recomputed) for f16/bf16
    const exact = this.opts.exactRowStats ?? p.dtype !== 'f32';
    const f64 = (n: number) => (pooled ? new Float64Array(new SharedArrayBuffer(n * 8)) : new Float64Array(n));
    const dvec = alloc(() => f64(p.h * p.totalQ), 'Dvec');
    const lse64 = alloc(() => f64(p.h * p.totalQ), 'the float64 lse');
    const dvecUnits = planForward(p, br);
    const dvecJob: DvecJob = { kind: 'dvec', p, br, bc, q: qd, k: kd, v: vd, out: od, dOut: dOd, lse: ld, exact, dvec, lse64, units: dvecUnits, counter: counter() };
    await this.execute(dvecJob, dvecUnits.length / FWD_UNIT, pooled);
    // phase 2: the gradients
    const job: BackwardJob = {
      kind: 'backward', p, br, bc,
      q: qd, k: kd, v: vd, out: od, dOut: dOd, lse: ld, dvec, lse64,
      dq: dqAcc, dk, dv,
      units: plan.units,
      dqPrivate,
      counter: counter(),
    };
    await this.execute(job, nUnits, pooled);
    reducePrivate(p, dqAcc, plan, dqPrivate);
    if (p.dtype !== 'f32') encode(p.dtype, dqAcc, dq as Uint16Array);
    const grads = { dq: tensor(dq, p.qShape, p.dtype), dk: tensor(dk, p.kShape, p.dtype), dv: tensor(dv, p.vShape, p.dtype) };
    return p.sinks ? { ...grads, dsinks: tensor(sinkGradients(p, lse64, dvec), [p.h], 'f32') } : grads;
  }

  supportsKVCache(_p: KVCacheProblem): Support {
    return { ok: true };
  }

  async forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
    this.alive();
    const p = describeKVCacheProblem(q, kCache, vCache, opts, this.name);
    const [q0, kc, vc] = [host(q, 'q'), host(kCache, 'kCache'), host(vCache, 'vCache')];
    const vn = opts.vNew === undefined ? undefined : host(opts.vNew, 'vNew');
    const kn = opts.kNew === undefined ? undefined : host(opts.kNew, 'kNew');
    if (p.vDim !== p.d) {
      // a head dim of v's own: the call's varlen dense equivalent (the attended rows gathered,
      // O(cache) memory; the tiled KV kernels keep one head dim), then the append
      const e = kvCacheAsVarlen(p, q0, kc, vc, kn, vn);
      const r = await this.forward(e.q, e.k, e.v, e.options);
      appendKVCacheHost(p, kc, vc, kn, vn);
      const outH = r.out as HostTensor;
      return { out: tensor(outH.data, p.outShape, p.dtype), lse: tensor(lseToKVCache(p, (r.lse as HostTensor).data as Float32Array), p.lseShape, 'f32') };
    }
    // rotary inside the call: q rotated here (a copy); the append writes the new keys rotated
    const qh = rotateKVInputs(p, q0, undefined).q;
    const plan = planKVCache(p, this.opts.kvChunk);
    const heads = kvHeadsPerUnit(p, plan);
    const nUnits = plan.units.length / KV_UNIT / heads;
    const flops = 4 * p.h * p.tq * p.totalK * p.d;
    // The cache is read in place: a cache outside shared memory (not from zeros()/allocHost)
    // runs on this thread rather than being copied for the workers on every call.
    const pooled = this.willUseWorkers(nUnits, flops) && isShared(kc.data) && isShared(vc.data);
    const out = alloc(() => allocHost(p.dtype, p.batch * p.tq * p.h * p.d), 'the output');
    const lse = alloc(() => allocFloat32(p.batch * p.h * p.tq), 'the lse');
    const f64 = (n: number) => (pooled ? new Float64Array(new SharedArrayBuffer(n * 8)) : new Float64Array(n));
    const d4 = paddedD(p.d);
    const job: KVCacheJob = {
      kind: 'kvcache', p, qt: plan.qt, rows: plan.rows, chunk: plan.chunk, units: plan.units, heads,
      q: pooled ? alloc(() => shared(qh.data), 'a shared copy of q') : qh.data,
      kCache: kc.data,
      vCache: vc.data,
      out, lse,
      pm: alloc(() => f64(plan.slots * plan.rows), 'the split-KV partial states'),
      pl: alloc(() => f64(plan.slots * plan.rows), 'the split-KV partial states'),
      pacc: alloc(() => f64(plan.slots * plan.rows * d4), 'the split-KV partial states'),
      counter: pooled ? new Int32Array(new SharedArrayBuffer(4)) : new Int32Array(1),
    };
    // Every allocation is made: an E_OOM above leaves the caches as they were.
    appendKVCacheHost(p, kc, vc, kn, vn);
    await this.execute(job, nUnits, pooled);
    if (plan.slots > 0) combineKVCache(job, this.ws);
    return { out: tensor(out, p.qShape, p.dtype), lse: tensor(lse, p.lseShape, 'f32') };
  }

  async uploadIndex(data: IndexData, shape?: readonly number[]): Promise<DeviceIndexTensor> {
    this.alive();
    return hostIndexTensor(this.name, data, shape);
  }

  async writeIndex(t: DeviceIndexTensor, data: IndexData, offset = 0): Promise<void> {
    this.alive();
    writeHostIndex(t, data, offset, this.name);
  }

  async upload(t: HostTensor): Promise<Tensor> {
    this.alive();
    return host(t, 'the tensor');
  }

  async read(t: Tensor): Promise<HostTensor> {
    return host(t, 'the tensor');
  }

  disposeTensor(t: Tensor | DeviceIndexTensor): void {
    // host tensors belong to the garbage collector; an index tensor is only marked
    if (isDeviceIndexTensor(t) && t.backend === this.name) (t as HostIndexTensor).disposed = true;
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    if (this.platform.pool) await (await this.platform.pool()).dispose();
  }
}

/** Creates a CPU engine. The registry's "cpu" entry calls this with no options. */
export async function createCpuBackend(opts: CpuEngineOptions = {}): Promise<CpuBackend> {
  if (opts.threads !== undefined && !(Number.isSafeInteger(opts.threads) && opts.threads >= 0)) {
    throw new FAError('E_ARG', `cpu engine option threads must be an integer >= 0, got ${String(opts.threads)}`);
  }
  if (opts.exactRowStats !== undefined && typeof opts.exactRowStats !== 'boolean') {
    throw new FAError('E_ARG', `cpu engine option exactRowStats must be true or false, got ${String(opts.exactRowStats)}`);
  }
  if (opts.inlineBelowFlops !== undefined && !(typeof opts.inlineBelowFlops === 'number' && opts.inlineBelowFlops >= 0)) {
    throw new FAError('E_ARG', `cpu engine option inlineBelowFlops must be a number >= 0, got ${String(opts.inlineBelowFlops)}`);
  }
  if (opts.kvChunk !== undefined && !(Number.isSafeInteger(opts.kvChunk) && opts.kvChunk >= 1)) {
    throw new FAError('E_ARG', `cpu engine option kvChunk must be an integer >= 1, got ${String(opts.kvChunk)}`);
  }
  return new CpuBackend(await detectPlatform(opts.threads), opts);
}
