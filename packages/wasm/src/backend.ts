/**
 * The WebAssembly engine (backend "wasm"): FlashAttention forward and backward with SIMD128
 * micro-kernels (csrc/), on every core through worker threads that share one WebAssembly.Memory,
 * and attention over a KV cache (kvcall.ts).
 *
 * - A call copies its inputs into the engine's memory as float32 (f16/bf16 decoded exactly), runs
 *   core's work units (planForward / planBackward) on the kernels, and copies the results out,
 *   rounded once to the inputs' dtype. Arithmetic is float32; each row's LSE and Dvec are summed
 *   in float64. layout.ts lists the memory a call takes (all O(T)).
 * - Device tensors (upload(), and the outputs of a call whose q is one) live in the memory's heap
 *   (tensors.ts, memory.ts): a KV cache uploaded once is read and appended in place.
 * - The memory grows to the largest call and is reused by the next; calls, uploads, reads and
 *   frees are serialised.
 * - Problems below `inlineBelowFlops` run on the calling thread, as does everything when no
 *   worker threads exist (a page that is not cross-origin isolated).
 * - `modelOps` (model-ops.ts): the matrix product and the element-wise and per-row ops of model
 *   code, synchronous (native: in place, the product on every thread; wasm: through scratch).
 */
import {
  BWD_UNIT,
  bytesPerElement,
  checkHostData,
  describeBackward,
  describeKVCacheProblem,
  describeProblem,
  describeProblemShapes,
  kvAttended,
  FAError,
  FWD_UNIT,
  hostIndexTensor,
  isDeviceIndexTensor,
  isDeviceTensor,
  isFAError,
  isHostTensor,
  numel,
  planBackward,
  planForward,
  planKVCache,
  problemFlops,
  reducePrivate,
  optionSupport,
  rotateKVInputs,
  appendKVCacheHost,
  kvCacheAsVarlen,
  lseToKVCache,
  segment,
  sinkGradients,
  tensor,
  writeHostIndex,
  type AttentionBackend,
  type AttentionOptions,
  type AttentionProblem,
  type BackwardResult,
  type DeviceIndexTensor,
  type DType,
  type ForwardResult,
  type HostIndexTensor,
  type HostModelOps,
  type HostTensor,
  type IndexData,
  type KVCacheOptions,
  type KVCacheProblem,
  type Support,
  type Tensor,
  type TileSizes,
} from '@fa/core';
import { binaryName, chooseIsa, enableRelaxedSimd, probeFeatures, type Features, type Isa } from './features.js';
import { createModelOps, gemmKernelName } from './model-ops.js';
import { copyIn, copyOut, copyOutTo } from './io.js';
import { COPY_RING_BYTES, runJob, type Kernels, type WasmJob } from './job.js';
import { copyUnits, hostCacheBytes, kvCallBytes, KV_GROUP_UNIT, kvScratchBound, runKVCall, type KVEngine, type ThreadTiles } from './kvcall.js';
import { backwardBytes, forwardBytes, keyTiles, STACK_BYTES } from './layout.js';
import { binaryUrl, compileBinary } from './loader.js';
import { Arena, fmt, Heap, WASM32_MAX_BYTES } from './memory.js';
import { checkOptions, createMemory, DEFAULT_INLINE_BELOW_FLOPS, defaultThreads, type WasmBackendOptions } from './options.js';
import { PROBLEM_BYTES, writeProblem, type ProblemFields } from './params.js';
import { addonUrl, loadAddon, nativeKernels, nativeTarget, type NativeLevel } from './native.js';
import { createPool, type WasmPool } from './threads.js';
import { checkOwn, dataOf, hostView, regionData, WasmTensor } from './tensors.js';
import { chooseNativeTiles, chooseWasmTiles } from './tiles.js';

const MAIN_STACK_BYTES = 64 * 1024;
const UNIT_SIZE: Record<WasmJob['kind'], number> = { forward: FWD_UNIT, backward: BWD_UNIT, kvcache: KV_GROUP_UNIT, copy: 2, gemm: 14 };

/** What the kernels compute beyond FlashAttention-2's options (core's option-support.ts). */
const OPTIONS = { sinks: true, vDim: true, kvVDim: true, kvLatent: true, kvSinks: true, dropout: true, kvBatchIdx: true, kvRotary: true, kvLeftpad: true } as const;

/** Copy-loop methods of copyLoop(): a SIMD128 load/store loop, or memory.copy (csrc/copy.c). */
export type CopyMethod = 'simd' | 'memcpy';

export class WasmBackend implements AttentionBackend {
  readonly device: string;
  readonly dtypes: readonly DType[] = ['f32', 'f16', 'bf16'];
  /** Why there are no worker threads, when there are none. */
  readonly threadsNote: string | undefined;
  /** The model ops (model-ops.ts), synchronous. */
  readonly modelOps: HostModelOps;
  private pool?: Promise<WasmPool>;
  private poolNow?: WasmPool;
  private queue: Promise<unknown> = Promise.resolve();
  private disposed = false;
  private readonly inlineBelow: number;
  private readonly arena: Arena;
  /** What kvcall.ts's runKVCall uses of the engine. */
  private readonly kvEngine: KVEngine;

  private constructor(
    /** "wasm", or "native" for the x86-64 build of the same kernels (native.ts). */
    readonly name: 'wasm' | 'native',
    /** The binary that runs: a WebAssembly instruction set, or the native build's level. */
    readonly isa: Isa | NativeLevel,
    /** Worker threads (0: everything runs on the calling thread). */
    readonly threads: number,
    threadsNote: string | undefined,
    private readonly features: Features,
    /** What each worker loads: the compiled .wasm, or the native addon's URL. */
    private readonly binary: { module?: WebAssembly.Module; native?: string },
    private readonly memory: WebAssembly.Memory,
    private readonly kernels: Kernels,
    private readonly heap: Heap,
    private readonly opts: WasmBackendOptions,
  ) {
    this.threadsNote = threadsNote;
    this.inlineBelow = opts.inlineBelowFlops ?? DEFAULT_INLINE_BELOW_FLOPS;
    this.arena = new Arena(memory, heap, heap.maxBytes);
    this.kvEngine = {
      memory,
      arena: this.arena,
      scaledInput: (t, dtype, scale, what) => this.scaledInput(t, dtype, scale, what),
      tiles: (units, scratchBytes, pooled) => this.tiles(units, scratchBytes, pooled),
      execute: (kind, problem, units, tiles, pooled) => this.execute(kind, problem, units, [], 0, pooled, tiles),
      willUseWorkers: (units, flops) => this.willUseWorkers(units, flops),
      threads: Math.max(1, threads),
      kvScratchBytes: (problem) => kernels.fa_kv_scratch_bytes(problem),
      combine: (problem, scratch, b, kvh, t, slot0, chunks) => kernels.fa_kv_combine(problem, scratch, b, kvh, t, slot0, chunks),
    };
    const opThreads = Math.max(1, threads);
    this.modelOps = createModelOps(
      { name, memory, arena: this.arena, kernels, direct: kernels.direct, threads: opThreads, pool: () => this.poolForModelOps(), alive: () => this.alive() },
      gemmKernelName(isa, opThreads),
    );
    const kind = isa === 'relaxed' ? 'WebAssembly relaxed SIMD' : isa === 'simd128' ? 'WebAssembly SIMD128' : `native ${isa} (${isa === 'x86-64-v4' ? 'AVX-512' : 'AVX2'})`;
    this.device = `${kind} ×${Math.max(1, threads)} thread${threads > 1 ? 's' : ''}${threadsNote ? ` (${threadsNote})` : ''}`;
  }

  /** The native build (options.native): the same engine over the x86-64 addon (native.ts). */
  private static async createNative(opts: WasmBackendOptions, features: Features, threads: number): Promise<WasmBackend> {
    const target = await nativeTarget(opts.nativeLevel);
    if (!target.level) throw new FAError('E_DEVICE', `native engine unavailable: ${target.why ?? 'unknown reason'}`);
    // the addon needs a shared memory (its address never moves), which Node always has
    if (!features.threads) throw new FAError('E_DEVICE', `native engine unavailable: ${features.threadsWhy ?? 'no shared memory'}`);
    const url = addonUrl(target.level, opts.nativePath);
    const addon = await loadAddon(url);
    // a file of the other level would run instructions this CPU may lack (the process would die)
    if (addon.level !== (target.level === 'x86-64-v4' ? 4 : 3)) throw new FAError('E_DEVICE', `native engine unavailable: ${url.href} is built for x86-64-v${addon.level}, not ${target.level}`);
    const { memory, maxBytes } = createMemory(Math.min(opts.maxMemoryBytes ?? WASM32_MAX_BYTES, WASM32_MAX_BYTES), true);
    const kernels = nativeKernels(addon, memory);
    // no static data or wasm stack: the heap starts one stack's worth in, keeping address 0 (null) unused
    return new WasmBackend('native', target.level, threads, undefined, features, { native: url.href }, memory, kernels, new Heap(memory, MAIN_STACK_BYTES, maxBytes), opts);
  }

  static async create(opts: WasmBackendOptions = {}): Promise<WasmBackend> {
    checkOptions(opts);
    let features = probeFeatures();
    // the native build runs no WebAssembly: relaxedSimd does not apply (and leaves V8's flags alone)
    if (opts.native === true) return WasmBackend.createNative(opts, features, opts.threads ?? (await defaultThreads(features)));
    if (opts.relaxedSimd === true && !features.relaxed && (await enableRelaxedSimd())) features = probeFeatures();
    let threads = opts.threads ?? (await defaultThreads(features));
    const isa = chooseIsa(features, opts.relaxedSimd ?? 'auto');
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
    // The main thread's stack sits just above the module's static data; the heap above it.
    const stackBase = Math.ceil(Number(kernels.__heap_base.value) / 16) * 16;
    kernels.fa_set_stack(stackBase + MAIN_STACK_BYTES);
    return new WasmBackend('wasm', isa, threads, note, features, { module }, memory, kernels, new Heap(memory, stackBase + MAIN_STACK_BYTES, maxBytes), opts);
  }

  /** Bytes of WebAssembly memory the engine holds now (it grows to the largest call). */
  get memoryBytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** Bytes its device tensors hold (uploads and device outputs not yet disposed). */
  get tensorBytes(): number {
    return this.heap.bytes;
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
    return o ?? (this.name === 'native' ? chooseNativeTiles(d) : chooseWasmTiles(d));
  }

  private tooLarge(need: number, what: string): Support {
    return { ok: false, reason: `needs about ${fmt(need)} of WebAssembly memory (${what}); the wasm engine has ${fmt(this.heap.maxBytes)} (wasm32 addresses 4 GiB)` };
  }

  supports(p: AttentionProblem): Support {
    const opt = optionSupport(p, this.name, OPTIONS);
    if (!opt.ok) return opt;
    const threads = Math.max(1, this.threads);
    const need = Math.max(forwardBytes(p, this.tileSizes(p.d, 'forward'), threads), backwardBytes(p, this.tileSizes(p.d, 'backward'), threads)) + this.heap.top;
    return need > this.heap.maxBytes ? this.tooLarge(need, 'float32 copies of the inputs and outputs') : { ok: true };
  }

  /**
   * Every KV-cache call whose memory fits, counted as if the caches were host tensors (whose
   * blocks a call copies in; uploaded caches are read in place and need none of it).
   */
  supportsKVCache(p: KVCacheProblem): Support {
    const opt = optionSupport(p, this.name, OPTIONS);
    if (!opt.ok) return opt;
    if (p.vDim !== p.d) {
      // kvAsDense: the dense varlen call over the gathered rows (they live in the JS heap)
      const cuQ = Int32Array.from({ length: p.batch + 1 }, (_, b) => b * p.tq);
      const cuK = new Int32Array(p.batch + 1);
      for (let b = 0; b < p.batch; b++) cuK[b + 1] = cuK[b] + kvAttended(p, b);
      return this.supports(describeProblemShapes([p.batch * p.tq, p.h, p.d], [p.totalK, p.hkv, p.d], p.dtype, { cuSeqlensQ: cuQ, cuSeqlensK: cuK }, [p.totalK, p.hkv, p.vDim]));
    }
    const plan = planKVCache(p, this.opts.kvChunk);
    const threads = Math.max(1, this.threads);
    const need = kvCallBytes(p, plan, threads, kvScratchBound(plan, p.hkv, p.d, STACK_BYTES)) + hostCacheBytes(p) + this.heap.top;
    return need > this.heap.maxBytes ? this.tooLarge(need, 'the used blocks of host caches, q, out and the split-KV states') : { ok: true };
  }

  /** Starts the worker threads now instead of on the first large call. */
  async warm(): Promise<void> {
    this.alive();
    if (this.threads > 0) (await this.getPool()).warm();
  }

  private alive(): void {
    if (this.disposed) throw new FAError('E_DEVICE', `the ${this.name} backend was disposed; create a new one`);
  }

  private getPool(): Promise<WasmPool> {
    if (!this.pool) {
      this.pool = createPool(this.threads, { ...this.binary, memory: this.memory }, this.features.host, this.name);
      // the model ops' threaded product needs the pool synchronously once it exists
      this.pool.then((p) => (this.poolNow = p), () => undefined);
    }
    return this.pool;
  }

  /** The started pool, for the wasm model ops' threaded product (model-ops.ts); starts one the first time. */
  private poolForModelOps(): WasmPool | undefined {
    if (this.threads === 0 || this.disposed) return undefined;
    if (!this.pool) void this.getPool().then((p) => p.warm(), () => undefined);
    return this.poolNow;
  }

  /** One thing at a time: calls share the arena, which starts where the heap ends. */
  private serial<T>(f: () => T | Promise<T>): Promise<T> {
    const r = this.queue.then(() => {
      this.alive();
      return f();
    });
    this.queue = r.catch(() => undefined);
    return r;
  }

  /**
   * A call: device tensors for its outputs first (when `outputs` is given: q was a device
   * tensor), then `body` over a fresh arena; a failed call frees what it allocated.
   */
  private call<R>(outputs: readonly { dtype: DType; shape: readonly number[] }[] | undefined, body: (dev: WasmTensor[] | undefined) => Promise<R>): Promise<R> {
    return this.serial(async () => {
      const dev: WasmTensor[] = [];
      try {
        for (const o of outputs ?? []) dev.push(this.newTensor(o.dtype, o.shape, 'an output'));
        this.arena.reset();
        return await body(outputs ? dev : undefined);
      } catch (e) {
        for (const t of dev) this.heap.free(t.handle.ptr);
        throw e;
      } finally {
        this.arena.reset();
      }
    });
  }

  private newTensor(dtype: DType, shape: readonly number[], what: string): WasmTensor {
    const length = numel(shape);
    const ptr = this.heap.alloc(length * bytesPerElement(dtype), what);
    return new WasmTensor(this.name, dtype, [...shape], { ptr, length, owner: this });
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
    let sinks = 0;
    if (p.sinks) {
      sinks = a.alloc(4 * p.h, 'the sinks');
      a.f32(sinks, p.h).set(p.sinks);
    }
    const drop = p.dropout;
    const fields: ProblemFields = {
      batch: p.batch, h: p.h, hkv: p.hkv, d: p.d, tq: p.tq, tk: p.tk, totalQ: p.totalQ, totalK: p.totalK, varlen: p.varlen,
      windowLeft: p.windowLeft, windowRight: p.windowRight, br: t.br, bc: t.bc, scale: p.scale, softcap: p.softcap,
      cuQ, cuK, alibi, q: 0, k: 0, v: 0, kt: 0, vp: 0, ktFirst: 0, lse: 0, dout: 0, dvec: 0, dk: 0, dv: 0, dq: 0, sinks, dvDim: p.vDim, o: 0,
      ...(drop ? { dropoutThreshold: drop.threshold, dropoutK0: drop.k0, dropoutK1: drop.k1, dropoutOffset: drop.offset, dropoutScale: drop.keepScale } : {}),
    };
    return { ptr, fields };
  }

  /** A float32 copy of a host tensor or of a device tensor's region, in the arena. */
  private input(t: Tensor, dtype: DType, what: string): number {
    const ptr = this.arena.alloc(4 * numel(t.shape), what);
    copyIn(this.arena, dataOf(this.memory, t), dtype, ptr);
    return ptr;
  }

  /** q as float32, multiplied by the scale (so Q K^T needs no pass of its own). */
  private scaledInput(t: Tensor, dtype: DType, scale: number, what: string): number {
    const ptr = this.input(t, dtype, what);
    this.kernels.fa_scale(ptr, numel(t.shape), scale);
    return ptr;
  }

  /** A float32 result in the arena as the call's output: a host tensor, or into device tensor `dev`. */
  private output(ptr: number, shape: readonly number[], dtype: DType, dev: WasmTensor | undefined): Tensor {
    const n = numel(shape);
    if (dev) {
      copyOutTo(this.arena, this.kernels, ptr, n, dtype, dev.handle);
      return dev;
    }
    return tensor(copyOut(this.arena, this.kernels, ptr, n, dtype), shape, dtype);
  }

  /** Refuses, before anything is allocated, an option these kernels do not compute (supports() says the same). */
  private checkOptions(p: AttentionProblem | KVCacheProblem): void {
    const s = optionSupport(p, this.name, OPTIONS);
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `${this.name}: ${s.reason}`);
  }

  /** A float32 result computed on the host, as a host tensor or in the output tensor made for it. */
  private outputOf(data: Float32Array, shape: readonly number[], dev: WasmTensor | undefined): Tensor {
    if (!dev) return tensor(data, shape, 'f32');
    new Float32Array(this.memory.buffer, dev.handle.ptr, data.length).set(data);
    return dev;
  }

  /** The per-thread tiles of a job of `units` units (execute() allocates them unless given). */
  private tiles(units: number, scratchBytes: number, pooled: boolean): ThreadTiles {
    const threads = pooled ? Math.max(1, Math.min(this.threads, units)) : 1;
    const slotBytes = Math.ceil(scratchBytes / 16) * 16 + (pooled ? STACK_BYTES : 0);
    return { threads, slotBytes, slots: this.arena.alloc(threads * slotBytes, 'the per-thread tiles') };
  }

  /** Runs a job's units: on the workers, or here. `tiles`: made before (tiles()), for a call that must not fail for memory past a point. */
  private async execute(kind: WasmJob['kind'], problem: number, units: Int32Array, privates: number[], scratchBytes: number, pooled: boolean, tiles?: ThreadTiles, pre?: Int32Array): Promise<void> {
    const unitSize = UNIT_SIZE[kind];
    const n = units.length / unitSize;
    if (n === 0 && !pre?.length) return;
    const { threads, slotBytes, slots } = tiles ?? this.tiles(n, scratchBytes, pooled);
    const counter = pooled ? new Int32Array(new SharedArrayBuffer(16)) : new Int32Array(4);
    const job: WasmJob = { kind, problem, units, unitSize, privates, counter, slots, slotBytes, ...(pre?.length ? { pre } : {}) };
    if (!pooled) {
      try {
        runJob(job, this.kernels, false);
      } catch (e) {
        throw isFAError(e) ? e : new FAError('E_DEVICE', `${this.name} backend: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
      return;
    }
    await (await this.getPool()).run(job, threads);
  }

  private checkInputs(inputs: readonly (readonly [Tensor | undefined, string])[]): void {
    for (const [t, what] of inputs) if (t !== undefined) checkOwn(t, what, this);
  }

  private outputsFor(q: Tensor, shapes: readonly { dtype: DType; shape: readonly number[] }[]) {
    return isDeviceTensor(q) ? shapes : undefined;
  }

  async forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): Promise<ForwardResult> {
    this.alive();
    const p = describeProblem(q, k, v, opts);
    this.checkOptions(p);
    this.checkInputs([[q, 'q'], [k, 'k'], [v, 'v']]);
    const outs = this.outputsFor(q, [{ dtype: p.dtype, shape: p.outShape }, { dtype: 'f32', shape: p.lseShape }]);
    return this.call(outs, async (dev) => {
      const a = this.arena;
      const t = this.tileSizes(Math.max(p.d, p.vDim), 'forward');
      const { ptr, fields } = this.problemBlock(p, t);
      const first = keyTiles(p, t.bc);
      fields.ktFirst = a.alloc(4 * first.length, 'the key tile index');
      a.i32(fields.ktFirst, first.length).set(first);
      fields.q = this.scaledInput(q, p.dtype, p.scale, 'q');
      fields.k = this.input(k, p.dtype, 'k');
      fields.v = this.input(v, p.dtype, 'v');
      const tileRows = p.hkv * first[p.batch] * ((t.bc + 7) & ~7);
      fields.kt = a.alloc(4 * tileRows * p.d, 'the K^T tiles');
      fields.vp = a.alloc(4 * tileRows * ((p.vDim + 7) & ~7), 'the V tiles');
      // out overwrites q row by row when it has q's head dim (forward.c); else a buffer of its own
      fields.o = p.vDim === p.d ? fields.q : a.alloc(4 * p.totalQ * p.h * p.vDim, 'the output');
      fields.lse = a.alloc(4 * p.h * p.totalQ, 'the lse');
      writeProblem(this.memory.buffer, ptr, fields);
      const units = planForward(p, t.br);
      const pooled = this.willUseWorkers(units.length / FWD_UNIT, problemFlops(p));
      const tiles = this.tiles(units.length / FWD_UNIT, this.kernels.fa_forward_scratch_bytes(ptr), pooled);
      // the key tiles of every (batch, kv head) are packed once, on the threads too (with many
      // cores the calling thread's serial work is what limits the speed-up), then the units run:
      // one job (WasmJob.pre), so that the threads are woken once
      const packs = new Int32Array(2 * p.batch * p.hkv);
      for (let b = 0, i = 0; b < p.batch; b++) for (let g = 0; g < p.hkv; g++, i += 2) (packs[i] = b), (packs[i + 1] = g);
      await this.execute('forward', ptr, units, [], 0, pooled, tiles, packs);
      return { out: this.output(fields.o, p.outShape, p.dtype, dev?.[0]), lse: this.output(fields.lse, p.lseShape, 'f32', dev?.[1]) };
    });
  }

  async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
    this.alive();
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    this.checkOptions(p);
    this.checkInputs([[q, 'q'], [k, 'k'], [v, 'v'], [out, 'out'], [dOut, 'dOut'], [lse, 'lse']]);
    const outs = this.outputsFor(q, [
      { dtype: p.dtype, shape: p.qShape }, { dtype: p.dtype, shape: p.kShape }, { dtype: p.dtype, shape: p.vShape },
      ...(p.sinks ? [{ dtype: 'f32' as const, shape: [p.h] }] : []),
    ]);
    return this.call(outs, async (dev) => {
      const a = this.arena;
      const t = this.tileSizes(Math.max(p.d, p.vDim), 'backward');
      const { ptr, fields } = this.problemBlock(p, t);
      const nq = p.totalQ * p.h * p.d;
      const no = p.totalQ * p.h * p.vDim;
      const nl = p.h * p.totalQ;
      fields.q = this.scaledInput(q, p.dtype, p.scale, 'q');
      fields.k = fields.dk = this.input(k, p.dtype, 'k');
      fields.v = fields.dv = this.input(v, p.dtype, 'v');
      fields.dout = this.input(dOut, p.dtype, 'dOut');
      fields.lse = this.input(lse, 'f32', 'lse');
      fields.dvec = a.alloc(4 * nl, 'Dvec');
      // Dvec = rowsum(dO ∘ out), with out staged where the dQ accumulator goes next
      fields.dq = a.alloc(4 * Math.max(nq, no), 'the dQ accumulator');
      copyIn(a, dataOf(this.memory, out), p.dtype, fields.dq);
      writeProblem(this.memory.buffer, ptr, fields);
      this.kernels.fa_dvec(ptr, fields.dq);
      // dsinks from Dvec and the lse (core's sinks.ts): nothing else of the backward changes
      const dsinks = p.sinks ? sinkGradients(p, a.f32(fields.lse, nl), a.f32(fields.dvec, nl)) : undefined;
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
        const vrow = p.hkv * p.vDim;
        a.f32(fields.dk + 4 * s.k0 * row, s.tk * row).fill(0);
        a.f32(fields.dv + 4 * s.k0 * vrow, s.tk * vrow).fill(0);
      }
      return {
        dq: this.output(fields.dq, p.qShape, p.dtype, dev?.[0]),
        dk: this.output(fields.dk, p.kShape, p.dtype, dev?.[1]),
        dv: this.output(fields.dv, p.vShape, p.dtype, dev?.[2]),
        ...(dsinks ? { dsinks: this.outputOf(dsinks, [p.h], dev?.[3]) } : {}),
      };
    });
  }

  async forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
    this.alive();
    const p = describeKVCacheProblem(q, kCache, vCache, opts, this.name);
    this.checkOptions(p);
    this.checkInputs([[q, 'q'], [kCache, 'kCache'], [vCache, 'vCache'], [opts.kNew, 'kNew'], [opts.vNew, 'vNew']]);
    if (p.vDim !== p.d) return this.kvAsDense(p, q, kCache, vCache, opts);
    const outs = this.outputsFor(q, [{ dtype: p.dtype, shape: p.qShape }, { dtype: 'f32', shape: p.lseShape }]);
    return this.call(outs, async (dev) => {
      // rotary inside the call: q rotated on the way in (core's rotateKVInputs); the append writes the
      // new keys rotated; cacheBatchIdx is the contiguous cache's block table, which the kernels read
      const qr = p.rotary ? rotateKVInputs(p, hostView(this.memory, q), undefined).q : q;
      const r = await runKVCall(this.kvEngine, p, qr, kCache, vCache, opts, this.opts.kvChunk);
      return { out: this.output(r.out, p.qShape, p.dtype, dev?.[0]), lse: this.output(r.lse, p.lseShape, 'f32', dev?.[1]) };
    });
  }

  /**
   * A KV-cache call whose v has a head dim of its own: its varlen dense equivalent (core's
   * kvCacheAsVarlen gathers the attended rows, O(cache) memory; the KV kernels keep one head dim),
   * then the append, in place in host or engine memory. Views of engine memory are taken after
   * the dense call (which may grow the memory) and copies before it.
   */
  private async kvAsDense(p: KVCacheProblem, q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
    const copy = (t: Tensor | undefined): HostTensor | undefined => {
      if (!t) return undefined;
      const v = hostView(this.memory, t);
      return { ...v, data: v.data.slice() as typeof v.data };
    };
    const [qc, kn, vn] = await this.serial(() => [copy(q)!, copy(opts.kNew), copy(opts.vNew)] as const);
    const e = await this.serial(() => kvCacheAsVarlen(p, qc, hostView(this.memory, kCache), hostView(this.memory, vCache), kn, vn));
    const r = await this.forward(e.q, e.k, e.v, e.options);
    await this.serial(() => appendKVCacheHost(p, hostView(this.memory, kCache), hostView(this.memory, vCache), kn, vn));
    const out = tensor((r.out as HostTensor).data, p.outShape, p.dtype);
    const lse = tensor(lseToKVCache(p, (r.lse as HostTensor).data as Float32Array), p.lseShape, 'f32');
    return isDeviceTensor(q) ? { out: await this.upload(out), lse: await this.upload(lse) } : { out, lse };
  }

  /**
   * The yardstick of a decode step (bench/decode.mjs, `fa demo` part 7): reads every byte of the
   * given device tensors (a KV cache) on the engine's threads, copying them piece by piece into a
   * small per-thread buffer with a SIMD128 load/store loop or memory.copy (csrc/copy.c).
   * Returns the wall time of the copy and the bytes read.
   */
  async copyLoop(tensors: readonly Tensor[], method: CopyMethod = 'simd'): Promise<{ seconds: number; bytes: number }> {
    this.alive();
    for (const t of tensors) {
      checkOwn(t, 'copyLoop tensor', this);
      if (!(t instanceof WasmTensor)) throw new FAError('E_ARG', 'copyLoop reads tensors the engine holds: upload() them first');
    }
    const units = copyUnits(tensors as readonly WasmTensor[], 1 << 20);
    let bytes = 0;
    for (let o = 1; o < units.length; o += 2) bytes += units[o];
    return this.call(undefined, async () => {
      const t0 = performance.now();
      await this.execute('copy', method === 'memcpy' ? 1 : 0, units, [], COPY_RING_BYTES, this.threads > 1 && units.length > 2);
      return { seconds: (performance.now() - t0) / 1e3, bytes };
    });
  }

  async uploadIndex(data: IndexData, shape?: readonly number[]): Promise<DeviceIndexTensor> {
    this.alive();
    return hostIndexTensor(this.name, data, shape);
  }

  async writeIndex(t: DeviceIndexTensor, data: IndexData, offset = 0): Promise<void> {
    this.alive();
    writeHostIndex(t, data, offset, this.name);
  }

  /** Copies a host tensor into the engine's memory: a device tensor its kernels read in place. */
  async upload(t: HostTensor): Promise<Tensor> {
    this.alive();
    if (!isHostTensor(t)) throw new FAError('E_ARG', 'upload takes a host tensor (tensor(data, shape, dtype))');
    checkHostData(t.data, t.shape, t.dtype, 'upload');
    return this.serial(() => {
      const dev = this.newTensor(t.dtype, t.shape, 'an uploaded tensor');
      regionData(this.memory, t.dtype, dev.handle).set(t.data as never);
      return dev;
    });
  }

  /** A host copy of a device tensor (in order after the calls before it); a host tensor as it is. */
  async read(t: Tensor): Promise<HostTensor> {
    this.alive();
    if (isHostTensor(t)) return t;
    checkOwn(t, 'the tensor', this);
    return this.serial(() => {
      const data = regionData(this.memory, t.dtype, (t as WasmTensor).handle);
      const copy = data instanceof Float32Array ? new Float32Array(data) : new Uint16Array(data);
      return tensor(copy, t.shape, t.dtype);
    });
  }

  /** Frees a device tensor (after the calls queued before it) or marks an index tensor disposed. */
  disposeTensor(t: Tensor | DeviceIndexTensor): void {
    if (isDeviceIndexTensor(t)) {
      if (t.backend === this.name) (t as HostIndexTensor).disposed = true;
      return;
    }
    if (!(t instanceof WasmTensor) || t.handle.owner !== this || t.disposed) return;
    t.disposed = true;
    this.queue = this.queue.then(() => this.heap.free(t.handle.ptr));
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    await this.queue;
    if (this.pool) await (await this.pool).dispose();
  }
}
