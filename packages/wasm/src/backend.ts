/**
 * The WebAssembly engine (backend "wasm"): FlashAttention forward and backward with SIMD128
 * micro-kernels (csrc/), on every core through worker threads that share one WebAssembly.Memory.
 *
 * - A call copies its inputs into the engine's memory as float32 (f16/bf16 decoded exactly), runs
 *   core's work units (planForward / planBackward) on the kernels, and copies the results out,
 *   rounded once to the inputs' dtype. Arithmetic is float32; each row's LSE and Dvec are summed
 *   in float64. layout.ts lists the memory a call takes (all O(T)).
 * - The memory grows to the largest call and is reused by the next; calls are serialised.
 * - Problems below `inlineBelowFlops` run on the calling thread, as does everything when no
 *   worker threads exist (a page that is not cross-origin isolated).
 */
import {
  BWD_UNIT,
  describeBackward,
  describeProblem,
  FAError,
  FWD_UNIT,
  isFAError,
  isHostTensor,
  planBackward,
  planForward,
  problemFlops,
  reducePrivate,
  segment,
  tensor,
  type AttentionBackend,
  type AttentionOptions,
  type AttentionProblem,
  type BackwardResult,
  type DType,
  type ForwardResult,
  type HostTensor,
  type Support,
  type Tensor,
  type TileSizes,
} from '@fa/core';
import { binaryName, chooseIsa, enableRelaxedSimd, probeFeatures, type Features, type Isa } from './features.js';
import { copyIn, copyOut } from './io.js';
import { runJob, type Kernels, type WasmJob } from './job.js';
import { backwardBytes, forwardBytes, keyTiles, STACK_BYTES } from './layout.js';
import { binaryUrl, compileBinary } from './loader.js';
import { Arena, fmt, WASM32_MAX_BYTES } from './memory.js';
import { checkOptions, createMemory, DEFAULT_INLINE_BELOW_FLOPS, defaultThreads, type WasmBackendOptions } from './options.js';
import { PROBLEM_BYTES, writeProblem, type ProblemFields } from './params.js';
import { createPool, type WasmPool } from './threads.js';
import { chooseWasmTiles } from './tiles.js';

const MAIN_STACK_BYTES = 64 * 1024;

function host(t: Tensor, what: string): HostTensor {
  if (isHostTensor(t)) return t;
  throw new FAError('E_ARG', `${what} is a device tensor of backend "${t.backend}"; the wasm backend takes host tensors (read() it from its backend first)`);
}

export class WasmBackend implements AttentionBackend {
  readonly name = 'wasm';
  readonly device: string;
  readonly dtypes: readonly DType[] = ['f32', 'f16', 'bf16'];
  /** Why there are no worker threads, when there are none. */
  readonly threadsNote: string | undefined;
  private pool?: Promise<WasmPool>;
  private queue: Promise<unknown> = Promise.resolve();
  private disposed = false;
  private readonly inlineBelow: number;

  private constructor(
    readonly isa: Isa,
    /** Worker threads (0: everything runs on the calling thread). */
    readonly threads: number,
    threadsNote: string | undefined,
    private readonly features: Features,
    private readonly module: WebAssembly.Module,
    private readonly memory: WebAssembly.Memory,
    private readonly kernels: Kernels,
    private readonly arena: Arena,
    private readonly opts: WasmBackendOptions,
  ) {
    this.threadsNote = threadsNote;
    this.inlineBelow = opts.inlineBelowFlops ?? DEFAULT_INLINE_BELOW_FLOPS;
    const simd = isa === 'relaxed' ? 'relaxed SIMD' : 'SIMD128';
    this.device = `WebAssembly ${simd} ×${Math.max(1, threads)} thread${threads > 1 ? 's' : ''}${threadsNote ? ` (${threadsNote})` : ''}`;
  }

  static async create(opts: WasmBackendOptions = {}): Promise<WasmBackend> {
    checkOptions(opts);
    let features = probeFeatures();
    if (opts.relaxedSimd === true && !features.relaxed && (await enableRelaxedSimd())) features = probeFeatures();
    const isa = chooseIsa(features, opts.relaxedSimd ?? 'auto');
    let threads = opts.threads ?? (await defaultThreads(features));
    let note: string | undefined;
    if (threads > 0 && !features.threads) {
      if (opts.threads !== undefined) throw new FAError('E_DEVICE', `wasm engine option threads: ${threads}, but ${features.threadsWhy ?? 'threads are unavailable here'}`);
      threads = 0;
    }
    if (!features.threads) note = `one thread: ${features.threadsWhy ?? 'no worker threads'}`;
    const shared = threads > 0;
    const module = await compileBinary(binaryUrl(binaryName(isa, shared), opts.wasmPath));
    const { memory, maxBytes } = createMemory(Math.min(opts.maxMemoryBytes ?? WASM32_MAX_BYTES, WASM32_MAX_BYTES), shared);
    const instance = await WebAssembly.instantiate(module, { env: { memory } });
    const kernels = instance.exports as unknown as Kernels;
    // The main thread's stack sits just above the module's static data; calls allocate above it.
    const stackBase = Math.ceil(Number(kernels.__heap_base.value) / 16) * 16;
    const arena = new Arena(memory, stackBase + MAIN_STACK_BYTES, maxBytes);
    kernels.fa_set_stack(stackBase + MAIN_STACK_BYTES);
    return new WasmBackend(isa, threads, note, features, module, memory, kernels, arena, opts);
  }

  /** Bytes of WebAssembly memory the engine holds now (it grows to the largest call). */
  get memoryBytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** The most memory one call used (inputs, outputs, tiles) since resetCallBytesPeak(). */
  get callBytesPeak(): number {
    return this.arena.peak;
  }

  resetCallBytesPeak(): void {
    this.arena.resetPeak();
  }

  tileSizes(d: number, pass: 'forward' | 'backward'): TileSizes {
    const o = pass === 'forward' ? this.opts.tiles : (this.opts.backwardTiles ?? this.opts.tiles);
    return o ?? chooseWasmTiles(d);
  }

  supports(p: AttentionProblem): Support {
    const threads = Math.max(1, this.threads);
    const need = Math.max(forwardBytes(p, this.tileSizes(p.d, 'forward'), threads), backwardBytes(p, this.tileSizes(p.d, 'backward'), threads)) + this.arena.base;
    if (need > this.arena.maxBytes) {
      return { ok: false, reason: `needs about ${fmt(need)} of WebAssembly memory (float32 copies of the inputs and outputs); the wasm engine has ${fmt(this.arena.maxBytes)} (wasm32 addresses 4 GiB)` };
    }
    return { ok: true };
  }

  /** Starts the worker threads now instead of on the first large call. */
  async warm(): Promise<void> {
    this.alive();
    if (this.threads > 0) (await this.getPool()).warm();
  }

  private alive(): void {
    if (this.disposed) throw new FAError('E_DEVICE', 'the wasm backend was disposed; create a new one');
  }

  private getPool(): Promise<WasmPool> {
    return (this.pool ??= createPool(this.threads, { module: this.module, memory: this.memory }, this.features.host));
  }

  /** One call at a time: they share the arena. */
  private serial<T>(f: () => Promise<T>): Promise<T> {
    const r = this.queue.then(() => {
      this.alive();
      return f();
    });
    this.queue = r.catch(() => undefined);
    return r;
  }

  private willUseWorkers(units: number, flops: number): boolean {
    return this.threads > 1 && flops >= this.inlineBelow && units > 1;
  }

  /** Allocates and fills what both passes read: the problem struct, offsets, slopes. */
  private problemBlock(p: AttentionProblem, t: TileSizes): { ptr: number; fields: ProblemFields } {
    const a = this.arena;
    const ptr = a.alloc(PROBLEM_BYTES, 'the problem');
    const cuQ = a.alloc(4 * (p.batch + 1), 'cuSeqlensQ');
    a.i32(cuQ, p.batch + 1).set(p.cuSeqlensQ);
    const cuK = a.alloc(4 * (p.batch + 1), 'cuSeqlensK');
    a.i32(cuK, p.batch + 1).set(p.cuSeqlensK);
    let alibi = 0;
    if (p.alibi) {
      alibi = a.alloc(4 * p.alibi.length, 'the ALiBi slopes');
      a.f32(alibi, p.alibi.length).set(p.alibi);
    }
    const fields: ProblemFields = {
      batch: p.batch, h: p.h, hkv: p.hkv, d: p.d, tq: p.tq, tk: p.tk, totalQ: p.totalQ, totalK: p.totalK, varlen: p.varlen,
      windowLeft: p.windowLeft, windowRight: p.windowRight, br: t.br, bc: t.bc, scale: p.scale, softcap: p.softcap,
      cuQ, cuK, alibi, q: 0, k: 0, v: 0, kt: 0, vp: 0, ktFirst: 0, lse: 0, dout: 0, dvec: 0, dk: 0, dv: 0, dq: 0,
    };
    return { ptr, fields };
  }

  private input(t: HostTensor, dtype: DType, what: string): number {
    const ptr = this.arena.alloc(4 * t.data.length, what);
    copyIn(this.arena, t.data, dtype, ptr);
    return ptr;
  }

  /** q as float32, multiplied by the scale (so Q K^T needs no pass of its own). */
  private scaledQ(t: HostTensor, p: AttentionProblem): number {
    const ptr = this.input(t, p.dtype, 'q');
    this.kernels.fa_scale(ptr, t.data.length, p.scale);
    return ptr;
  }

  /** Runs a job's units: on the workers, or here. */
  private async execute(kind: WasmJob['kind'], problem: number, units: Int32Array, privates: number[], scratchBytes: number, pooled: boolean): Promise<void> {
    const unitSize = kind === 'forward' ? FWD_UNIT : BWD_UNIT;
    const n = units.length / unitSize;
    if (n === 0) return;
    const threads = pooled ? Math.min(this.threads, n) : 1;
    const slotBytes = Math.ceil(scratchBytes / 16) * 16 + (pooled ? STACK_BYTES : 0);
    const slots = this.arena.alloc(threads * slotBytes, 'the per-thread tiles');
    const counter = pooled ? new Int32Array(new SharedArrayBuffer(8)) : new Int32Array(2);
    const job: WasmJob = { kind, problem, units, unitSize, privates, counter, slots, slotBytes };
    if (!pooled) {
      try {
        runJob(job, this.kernels, false);
      } catch (e) {
        throw isFAError(e) ? e : new FAError('E_DEVICE', `wasm backend: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
      return;
    }
    await (await this.getPool()).run(job, threads);
  }

  async forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): Promise<ForwardResult> {
    this.alive();
    const p = describeProblem(q, k, v, opts);
    const [qh, kh, vh] = [host(q, 'q'), host(k, 'k'), host(v, 'v')];
    return this.serial(async () => {
      const a = this.arena;
      a.reset();
      try {
        const t = this.tileSizes(p.d, 'forward');
        const { ptr, fields } = this.problemBlock(p, t);
        const first = keyTiles(p, t.bc);
        fields.ktFirst = a.alloc(4 * first.length, 'the key tile index');
        a.i32(fields.ktFirst, first.length).set(first);
        fields.q = this.scaledQ(qh, p);
        fields.k = this.input(kh, p.dtype, 'k');
        fields.v = this.input(vh, p.dtype, 'v');
        const tileRows = p.hkv * first[p.batch] * ((t.bc + 7) & ~7);
        fields.kt = a.alloc(4 * tileRows * p.d, 'the K^T tiles');
        fields.vp = a.alloc(4 * tileRows * ((p.d + 7) & ~7), 'the V tiles');
        fields.lse = a.alloc(4 * p.h * p.totalQ, 'the lse');
        writeProblem(this.memory.buffer, ptr, fields);
        for (let b = 0; b < p.batch; b++) for (let g = 0; g < p.hkv; g++) this.kernels.fa_pack_kv(ptr, b, g);
        const units = planForward(p, t.br);
        const pooled = this.willUseWorkers(units.length / FWD_UNIT, problemFlops(p));
        await this.execute('forward', ptr, units, [], this.kernels.fa_forward_scratch_bytes(ptr), pooled);
        const out = copyOut(a, this.kernels, fields.q, p.totalQ * p.h * p.d, p.dtype);
        const lse = copyOut(a, this.kernels, fields.lse, p.h * p.totalQ, 'f32');
        return { out: tensor(out, p.qShape, p.dtype), lse: tensor(lse, p.lseShape, 'f32') };
      } finally {
        a.reset();
      }
    });
  }

  async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
    this.alive();
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    const [qh, kh, vh, oh, dOh, lh] = [host(q, 'q'), host(k, 'k'), host(v, 'v'), host(out, 'out'), host(dOut, 'dOut'), host(lse, 'lse')];
    return this.serial(async () => {
      const a = this.arena;
      a.reset();
      try {
        const t = this.tileSizes(p.d, 'backward');
        const { ptr, fields } = this.problemBlock(p, t);
        const nq = p.totalQ * p.h * p.d;
        const nk = p.totalK * p.hkv * p.d;
        const nl = p.h * p.totalQ;
        fields.q = this.scaledQ(qh, p);
        fields.k = fields.dk = this.input(kh, p.dtype, 'k');
        fields.v = fields.dv = this.input(vh, p.dtype, 'v');
        fields.dout = this.input(dOh, p.dtype, 'dOut');
        fields.lse = this.input(lh, 'f32', 'lse');
        fields.dvec = a.alloc(4 * nl, 'Dvec');
        // Dvec = rowsum(dO ∘ out), with out staged where the dQ accumulator goes next
        fields.dq = this.input(oh, p.dtype, 'out');
        writeProblem(this.memory.buffer, ptr, fields);
        this.kernels.fa_dvec(ptr, fields.dq);
        const dq = a.f32(fields.dq, nq);
        dq.fill(0);
        const flops = 2.5 * problemFlops(p);
        const plan = planBackward(p, t.bc, this.willUseWorkers(2, flops) ? this.threads : 1);
        const privates = plan.privateSizes.map((n, i) => {
          const at = a.alloc(4 * n, `private dQ accumulator ${i}`);
          a.f32(at, n).fill(0);
          return at;
        });
        const pooled = this.willUseWorkers(plan.units.length / BWD_UNIT, flops);
        await this.execute('backward', ptr, plan.units, privates, this.kernels.fa_backward_scratch_bytes(ptr), pooled);
        reducePrivate(p, a.f32(fields.dq, nq), plan, privates.map((at, i) => a.f32(at, plan.privateSizes[i])));
        this.kernels.fa_scale(fields.dq, nq, p.scale); // dQ = dS' K scale (backward.c)
        // dK, dV overwrite k, v tile by tile; keys of a sequence without queries get no unit: zero them
        for (let b = 0; b < p.batch; b++) {
          const s = segment(p, b);
          if (s.tq > 0 || s.tk === 0) continue;
          const row = p.hkv * p.d;
          a.f32(fields.dk + 4 * s.k0 * row, s.tk * row).fill(0);
          a.f32(fields.dv + 4 * s.k0 * row, s.tk * row).fill(0);
        }
        return {
          dq: tensor(copyOut(a, this.kernels, fields.dq, nq, p.dtype), p.qShape, p.dtype),
          dk: tensor(copyOut(a, this.kernels, fields.dk, nk, p.dtype), p.kShape, p.dtype),
          dv: tensor(copyOut(a, this.kernels, fields.dv, nk, p.dtype), p.kShape, p.dtype),
        };
      } finally {
        a.reset();
      }
    });
  }

  async upload(t: HostTensor): Promise<Tensor> {
    this.alive();
    return host(t, 'the tensor');
  }

  async read(t: Tensor): Promise<HostTensor> {
    return host(t, 'the tensor');
  }

  disposeTensor(_t: Tensor): void {
    // host tensors belong to the garbage collector
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    await this.queue;
    if (this.pool) await (await this.pool).dispose();
  }
}
