/// <reference types="@webgpu/types" />
/**
 * The WebGPU engine: device tensors, the pipeline cache, dispatch of the WGSL kernels, error
 * handling (validation, out-of-memory and device loss become FAError), and re-acquiring the
 * device after a loss.
 */
import {
  type AttentionBackend,
  type AttentionOptions,
  type AttentionProblem,
  type BackwardResult,
  type DType,
  type DeviceTensor,
  type ForwardResult,
  type HostTensor,
  type Support,
  type Tensor,
  FAError,
  bytesPerElement,
  checkHostData,
  describeBackward,
  describeProblem,
  isDeviceTensor,
  isFAError,
  isHostTensor,
  numel,
} from '@fa/core';
import { type AcquireOptions, type Acquired, BufferUsage, MapModeRead, acquire } from './gpu.js';
import { type Caps, type Choice, type KernelKind, chooseSpec } from './tiles.js';
import { type KernelSpec, type Tile, PARAMS_BYTES, encoding, packParams, specKey } from './wgsl/common.js';
import { forwardWGSL } from './wgsl/forward.js';
import { BWD, DELTA, deltaWGSL, dkdvWGSL, dqWGSL, packWGSL } from './wgsl/backward.js';

export interface WebGPUBackendOptions extends AcquireOptions {
  /** Force a tile shape (tests, tuning); fields left out come from the chosen candidate. */
  readonly tile?: Partial<Tile>;
  /** Per-kernel tile overrides (benchmark tuning); win over `tile`. */
  readonly tiles?: Partial<Record<KernelKind, Partial<Tile>>>;
  /**
   * Per-kernel candidates tried first, in place of the built-in preferred tiles; unlike `tiles`,
   * a problem they do not fit (e.g. D = 256 in 48 KiB) falls back to the built-in list — exactly
   * how a default behaves, so benchmarks and the kit can try a would-be default.
   */
  readonly preferredTiles?: Partial<Record<KernelKind, readonly Tile[]>>;
  /**
   * 'specialised': one pipeline per (dtype, D, softcap, ALiBi) — fastest kernels.
   * 'generic': those read at run time — few pipelines, for CPU adapters whose compiler is slow.
   * 'auto' (default): generic on CPU adapters (llvmpipe, SwiftShader), specialised elsewhere.
   */
  readonly codegen?: 'auto' | 'specialised' | 'generic';
  /**
   * f16 tensors on an adapter with `shader-f16`: true (default) reads and writes them as WGSL
   * f16 (`enable f16;`, f16 staging in workgroup memory); false keeps the packed path (two per
   * u32, `unpack2x16float`) that adapters without `shader-f16` use. Arithmetic is f32 either way.
   */
  readonly nativeF16?: boolean;
}

/** What a webgpu DeviceTensor's handle holds. */
export interface WebGPUTensorHandle {
  readonly buffer: GPUBuffer;
  readonly bytes: number;
  readonly epoch: number;
}

class WGTensor implements DeviceTensor {
  readonly kind = 'device' as const;
  readonly backend = 'webgpu';
  disposed = false;
  constructor(
    readonly dtype: DType,
    readonly shape: readonly number[],
    readonly handle: WebGPUTensorHandle,
  ) {}
}

const align4 = (n: number) => Math.max(4, Math.ceil(n / 4) * 4);
/**
 * Smallest buffer: the swizzled kernels bind their inputs as arrays of vec4 (16 bytes), and a
 * binding must hold one element even when the tensor is empty (a varlen batch with no keys).
 */
const MIN_BUFFER_BYTES = 16;

/** Bytes of GPU memory the backend holds now, and the most it held since the last reset. */
export interface MemoryStats {
  readonly current: number;
  readonly peak: number;
}

/** Tracks the backend's buffers (for memoryStats) and destroys them. */
class Ledger {
  private readonly sizes = new Map<GPUBuffer, number>();
  current = 0;
  peak = 0;
  add(b: GPUBuffer, size: number): void {
    this.sizes.set(b, size);
    this.current += size;
    if (this.current > this.peak) this.peak = this.current;
  }
  destroy(b: GPUBuffer): void {
    const n = this.sizes.get(b);
    if (n !== undefined) {
      this.current -= n;
      this.sizes.delete(b);
    }
    b.destroy();
  }
  clear(): void {
    this.sizes.clear();
    this.current = 0;
  }
}

/** A call's allocations, freed together when the call fails (or when they were temporary). */
class Scope {
  readonly buffers: GPUBuffer[] = [];
  constructor(private readonly ledger: Ledger) {}
  add(b: GPUBuffer, size: number): GPUBuffer {
    this.buffers.push(b);
    this.ledger.add(b, size);
    return b;
  }
  release(keep: ReadonlySet<GPUBuffer> = new Set()): void {
    for (const b of this.buffers) if (!keep.has(b)) this.ledger.destroy(b);
    this.buffers.length = 0;
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

export class WebGPUBackend implements AttentionBackend {
  readonly name = 'webgpu';
  readonly dtypes: readonly DType[] = ['f32', 'f16', 'bf16'];
  private acq: Acquired;
  private epoch = 0;
  private lostInfo: string | undefined;
  private disposedAll = false;
  private readonly pipelines = new Map<string, Promise<GPUComputePipeline>>();
  private readonly live = new Set<WGTensor>();
  private readonly ledger = new Ledger();
  /** Specialisations used by the most recent call (for tests and benchmarks). */
  lastSpecs: KernelSpec[] = [];

  private constructor(
    acq: Acquired,
    private readonly opts: WebGPUBackendOptions,
  ) {
    this.acq = acq;
    this.watchLoss();
  }

  static async create(opts: WebGPUBackendOptions = {}): Promise<WebGPUBackend> {
    return new WebGPUBackend(await acquire(opts), opts);
  }

  get device(): string {
    return this.acq.adapterName;
  }
  /** The GPUDevice in use (it changes after a device loss). */
  get gpuDevice(): GPUDevice {
    return this.acq.device;
  }
  get features(): ReadonlySet<string> {
    return this.acq.features;
  }

  private watchLoss(): void {
    const acq = this.acq;
    const epoch = this.epoch;
    acq.device.lost.then(
      (info) => {
        if (this.epoch === epoch && !this.disposedAll && info.reason !== 'destroyed') this.lostInfo = info.message || 'device lost';
        else if (this.epoch === epoch && !this.disposedAll) this.lostInfo = info.message || 'device destroyed';
      },
      () => undefined,
    );
  }

  /** The device, re-acquired when the previous one was lost. */
  private async ready(): Promise<GPUDevice> {
    if (this.disposedAll) throw new FAError('E_DEVICE', 'the webgpu backend was disposed');
    if (this.lostInfo !== undefined) {
      if (!this.acq.owned) throw new FAError('E_DEVICE', `the WebGPU device given to the backend was lost (${this.lostInfo})`);
      const why = this.lostInfo;
      try {
        this.acq = await acquire(this.opts);
      } catch (e) {
        throw new FAError('E_DEVICE', `the WebGPU device was lost (${why}) and could not be re-acquired: ${errorText(e)}`, { cause: e });
      }
      this.epoch++;
      this.lostInfo = undefined;
      this.pipelines.clear();
      for (const t of this.live) t.disposed = true;
      this.live.clear();
      this.ledger.clear();
      this.watchLoss();
    }
    return this.acq.device;
  }

  /** Simulates a device loss (tests): the next call re-acquires a device. */
  loseDeviceForTesting(): void {
    this.acq.device.destroy();
    this.lostInfo = 'destroyed for testing';
  }

  private caps(): Caps {
    const l = this.acq.device.limits;
    return {
      maxShared: l.maxComputeWorkgroupStorageSize,
      maxInvocations: l.maxComputeInvocationsPerWorkgroup,
      maxWorkgroupSizeX: l.maxComputeWorkgroupSizeX,
      subgroupMin: this.acq.features.has('subgroups') ? this.acq.subgroupMin : 0,
      subgroups: this.acq.features.has('subgroups'),
    };
  }

  /** Whether f16 tensors use native f16 kernels (the option allows it and the device has `shader-f16`). */
  get nativeF16(): boolean {
    return this.opts.nativeF16 !== false && this.acq.features.has('shader-f16');
  }

  /** Whether the kernels write outputs as f32 and a pass packs them (packed dtypes with odd D). */
  private outF32(p: AttentionProblem): boolean {
    return p.dtype !== 'f32' && !(p.dtype === 'f16' && this.nativeF16) && p.d % 2 === 1;
  }

  /** Whether this backend compiles the generic kernels. */
  get generic(): boolean {
    const c = this.opts.codegen ?? 'auto';
    return c === 'generic' || (c === 'auto' && this.acq.cpu);
  }

  private specFor(kind: KernelKind, p: AttentionProblem): Choice | { reason: string } {
    const f16 = p.dtype === 'f16' && this.nativeF16;
    return chooseSpec(
      kind,
      { storage: p.dtype, d: p.d, softcap: p.softcap > 0, alibi: p.alibi !== undefined, outF32: this.outF32(p), dynamic: this.generic, ...(f16 ? { f16 } : {}) },
      this.caps(),
      this.opts.tiles?.[kind] ?? this.opts.tile,
      this.opts.subgroups !== false,
      this.opts.preferredTiles?.[kind],
    );
  }

  supports(p: AttentionProblem): Support {
    for (const kind of ['fwd', 'dkdv', 'dq'] as const) {
      const c = this.specFor(kind, p);
      if ('reason' in c) return { ok: false, reason: c.reason };
    }
    const l = this.acq.device.limits;
    const bpe = bytesPerElement(p.dtype);
    const checks: [string, number][] = [
      ['q', p.totalQ * p.h * p.d * bpe],
      ['k', p.totalK * p.hkv * p.d * bpe],
      ['lse and delta', 8 * p.totalQ * p.h],
    ];
    if (this.outF32(p)) checks.push(['the f32 staging of out', p.totalQ * p.h * p.d * 4]);
    for (const [what, bytes] of checks) {
      if (bytes > l.maxStorageBufferBindingSize) {
        return { ok: false, reason: `${what} needs ${bytes} bytes in one storage binding; this adapter's maxStorageBufferBindingSize is ${l.maxStorageBufferBindingSize}` };
      }
      if (bytes > l.maxBufferSize) return { ok: false, reason: `${what} needs a ${bytes}-byte buffer; this adapter's maxBufferSize is ${l.maxBufferSize}` };
    }
    const cfg = this.specFor('fwd', p) as Choice;
    const dims: [string, number][] = [
      ['query tiles', Math.ceil(p.tq / cfg.spec.tile.nr)],
      ['key tiles', Math.ceil(p.tk / cfg.spec.tile.nr)],
      ['heads', p.h],
      ['batch', p.batch],
    ];
    for (const [what, n] of dims) {
      if (n > l.maxComputeWorkgroupsPerDimension) return { ok: false, reason: `${what} (${n}) exceed this adapter's maxComputeWorkgroupsPerDimension (${l.maxComputeWorkgroupsPerDimension})` };
    }
    return { ok: true };
  }

  private checkSupported(p: AttentionProblem): void {
    const s = this.supports(p);
    if (!s.ok) throw new FAError(s.reason.includes('maxStorageBufferBindingSize') || s.reason.includes('maxBufferSize') || s.reason.includes('maxComputeWorkgroupsPerDimension') ? 'E_TOO_LARGE' : 'E_UNSUPPORTED', `webgpu: ${s.reason}`);
  }

  // ---------------------------------------------------------------- buffers and tensors

  private createBuffer(scope: Scope, bytes: number, usage: number, label: string): GPUBuffer {
    const dev = this.acq.device;
    const size = Math.max(MIN_BUFFER_BYTES, align4(bytes));
    const l = dev.limits;
    if (size > l.maxBufferSize) throw new FAError('E_TOO_LARGE', `${label} needs a ${size}-byte buffer; this adapter's maxBufferSize is ${l.maxBufferSize}`);
    let b: GPUBuffer;
    try {
      b = dev.createBuffer({ size, usage, label });
    } catch (e) {
      throw new FAError('E_OOM', `could not allocate ${size} bytes for ${label}: ${errorText(e)}`, { cause: e });
    }
    return scope.add(b, size);
  }

  private uploadInto(scope: Scope, t: HostTensor, label: string): GPUBuffer {
    const bytes = t.data.byteLength;
    const buf = this.createBuffer(scope, bytes, BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, label);
    if (bytes > 0) {
      if (bytes % 4 === 0) {
        this.acq.device.queue.writeBuffer(buf, 0, t.data.buffer, t.data.byteOffset, bytes);
      } else {
        const pad = new Uint8Array(align4(bytes));
        pad.set(new Uint8Array(t.data.buffer, t.data.byteOffset, bytes));
        this.acq.device.queue.writeBuffer(buf, 0, pad.buffer, 0, pad.byteLength);
      }
    }
    return buf;
  }

  private wrap(buffer: GPUBuffer, dtype: DType, shape: readonly number[]): WGTensor {
    const t = new WGTensor(dtype, [...shape], { buffer, bytes: numel(shape) * bytesPerElement(dtype), epoch: this.epoch });
    this.live.add(t);
    return t;
  }

  /** The buffer of an input: this backend's device tensor, or an upload of a host tensor. */
  private input(scope: Scope, t: Tensor, what: string): GPUBuffer {
    if (isHostTensor(t)) return this.uploadInto(scope, t, what);
    if (isDeviceTensor(t)) {
      if (t.backend !== 'webgpu' || !(t instanceof WGTensor)) throw new FAError('E_ARG', `${what} is a device tensor of backend "${t.backend}"; read it to the host or upload it to webgpu first`);
      if (t.disposed) throw new FAError('E_ARG', `${what} is a webgpu tensor that was already disposed (or whose device was lost)`);
      if (t.handle.epoch !== this.epoch) throw new FAError('E_DEVICE', `${what} was created on a WebGPU device that has since been lost; upload it again`);
      return t.handle.buffer;
    }
    throw new FAError('E_ARG', `${what} must be a tensor`);
  }

  async upload(t: HostTensor): Promise<Tensor> {
    checkHostData(t.data, t.shape, t.dtype, 'upload');
    await this.ready();
    const scope = new Scope(this.ledger);
    return this.guard(scope, async () => {
      const buf = this.uploadInto(scope, t, 'upload');
      return this.wrap(buf, t.dtype, t.shape);
    }, true);
  }

  async read(t: Tensor): Promise<HostTensor> {
    if (isHostTensor(t)) return t;
    await this.ready();
    const scope = new Scope(this.ledger);
    const buf = this.input(scope, t, 'read');
    return this.guard(scope, () => this.readBuffer(scope, buf, t.dtype, t.shape), false);
  }

  private async readBuffer(scope: Scope, buf: GPUBuffer, dtype: DType, shape: readonly number[]): Promise<HostTensor> {
    const n = numel(shape);
    const bytes = n * bytesPerElement(dtype);
    const data = dtype === 'f32' ? new Float32Array(n) : new Uint16Array(n);
    if (bytes > 0) {
      const dev = this.acq.device;
      const staging = this.createBuffer(scope, bytes, BufferUsage.MAP_READ | BufferUsage.COPY_DST, 'readback');
      const enc = dev.createCommandEncoder();
      enc.copyBufferToBuffer(buf, 0, staging, 0, align4(bytes));
      dev.queue.submit([enc.finish()]);
      try {
        await staging.mapAsync(MapModeRead);
      } catch (e) {
        throw new FAError('E_DEVICE', `reading back from the GPU failed: ${this.lostInfo ? `device lost (${this.lostInfo})` : errorText(e)}`, { cause: e });
      }
      const src = new Uint8Array(staging.getMappedRange(0, align4(bytes)), 0, bytes);
      new Uint8Array(data.buffer).set(src);
      staging.unmap();
    }
    return { kind: 'host', dtype, shape: [...shape], data };
  }

  disposeTensor(t: Tensor): void {
    if (!isDeviceTensor(t) || !(t instanceof WGTensor) || t.disposed) return;
    t.disposed = true;
    this.live.delete(t);
    if (t.handle.epoch === this.epoch) this.ledger.destroy(t.handle.buffer);
  }

  async dispose(): Promise<void> {
    if (this.disposedAll) return;
    for (const t of this.live) this.disposeTensor(t);
    this.disposedAll = true;
    this.pipelines.clear();
    if (this.acq.owned) this.acq.device.destroy();
  }

  /** GPU memory held by this backend's buffers (device tensors and in-flight temporaries). */
  memoryStats(): MemoryStats {
    return { current: this.ledger.current, peak: this.ledger.peak };
  }

  /** Starts a new peak measurement at the current level. */
  resetPeakMemory(): void {
    this.ledger.peak = this.ledger.current;
  }

  /** Waits until the GPU has finished all submitted work (benchmarks). */
  async sync(): Promise<void> {
    await this.acq.device.queue.onSubmittedWorkDone();
  }

  // ---------------------------------------------------------------- pipelines

  private pipeline(key: string, code: () => string): Promise<GPUComputePipeline> {
    let p = this.pipelines.get(key);
    if (!p) {
      const dev = this.acq.device;
      const source = code();
      const module = dev.createShaderModule({ code: source, label: key });
      p = dev.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' }, label: key }).catch(async (e: unknown) => {
        this.pipelines.delete(key);
        let detail = errorText(e);
        try {
          const info = await module.getCompilationInfo();
          const msgs = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
          if (msgs.length) detail += `; ${msgs.slice(0, 3).join('; ')}`;
        } catch {
          /* no compilation info */
        }
        throw new FAError('E_DEVICE', `webgpu: the ${key} kernel did not compile on ${this.device}: ${detail}`, { cause: e });
      });
      this.pipelines.set(key, p);
    }
    return p;
  }

  /**
   * Runs `body` inside validation and out-of-memory error scopes. On failure, frees what the
   * call allocated and throws an FAError (E_OOM, E_DEVICE). On success frees the temporaries
   * unless `keepAll`.
   */
  private async guard<T>(scope: Scope, body: () => Promise<T>, keepAll: boolean, keep?: () => ReadonlySet<GPUBuffer>): Promise<T> {
    // Error scopes are a per-device stack: calls run one at a time so that each call pops its
    // own scopes (the GPU queue is serial anyway).
    const prev = this.lock;
    let release!: () => void;
    this.lock = new Promise<void>((r) => (release = r));
    await prev;
    try {
      return await this.guarded(scope, body, keepAll, keep);
    } finally {
      release();
    }
  }

  private lock: Promise<void> = Promise.resolve();

  private async guarded<T>(scope: Scope, body: () => Promise<T>, keepAll: boolean, keep?: () => ReadonlySet<GPUBuffer>): Promise<T> {
    const dev = this.acq.device;
    dev.pushErrorScope('validation');
    dev.pushErrorScope('out-of-memory');
    let result: T;
    let thrown: unknown;
    try {
      result = await body();
    } catch (e) {
      thrown = e;
    }
    const oom = await dev.popErrorScope().catch(() => null);
    const val = await dev.popErrorScope().catch(() => null);
    if (thrown === undefined && (oom || val)) {
      thrown = oom
        ? new FAError('E_OOM', `webgpu: out of GPU memory on ${this.device}: ${oom.message}`)
        : new FAError('E_DEVICE', `webgpu: the device reported an error: ${val!.message}`);
    }
    if (thrown === undefined && this.lostInfo !== undefined) thrown = new FAError('E_DEVICE', `webgpu: the device was lost during the call (${this.lostInfo}); the next call re-acquires one`);
    if (thrown !== undefined) {
      scope.release();
      if (isFAError(thrown)) throw thrown;
      if (this.lostInfo !== undefined) throw new FAError('E_DEVICE', `webgpu: the device was lost (${this.lostInfo}): ${errorText(thrown)}`, { cause: thrown });
      throw new FAError('E_DEVICE', `webgpu: ${errorText(thrown)}`, { cause: thrown });
    }
    if (!keepAll) scope.release(keep ? keep() : undefined);
    return result!;
  }

  // ---------------------------------------------------------------- attention

  private metaBuffer(scope: Scope, p: AttentionProblem): GPUBuffer {
    const n = 2 * (p.batch + 1) + (p.alibi ? p.alibi.length : 0);
    const u = new Uint32Array(n);
    u.set(p.cuSeqlensQ, 0);
    u.set(p.cuSeqlensK, p.batch + 1);
    if (p.alibi) new Float32Array(u.buffer, 4 * 2 * (p.batch + 1)).set(p.alibi);
    const b = this.createBuffer(scope, u.byteLength, BufferUsage.STORAGE | BufferUsage.COPY_DST, 'meta');
    this.acq.device.queue.writeBuffer(b, 0, u.buffer, 0, u.byteLength);
    return b;
  }

  private paramsBuffer(scope: Scope, p: AttentionProblem, tile: Tile, diOff = 0): GPUBuffer {
    const lse = p.varlen ? { lseSh: p.totalQ, lseSb: 0, lseScu: 1 } : { lseSh: p.tq, lseSb: p.h * p.tq, lseScu: 0 };
    const data = packParams({
      h: p.h, hkv: p.hkv, batch: p.batch, totalQ: p.totalQ, totalK: p.totalK, ...lse,
      scale: p.scale, softcap: p.softcap, wl: p.windowLeft, wr: p.windowRight, diOff,
      d: p.d, dtype: p.dtype, outF32: this.outF32(p), alibi: p.alibi !== undefined,
      dp1: Math.ceil(p.d / tile.dk) * tile.dk, dp2: Math.ceil(p.d / (2 * tile.tc)) * 2 * tile.tc,
    });
    const b = this.createBuffer(scope, PARAMS_BYTES, BufferUsage.UNIFORM | BufferUsage.COPY_DST, 'params');
    this.acq.device.queue.writeBuffer(b, 0, data);
    return b;
  }

  private bind(pipe: GPUComputePipeline, buffers: (GPUBuffer | undefined)[]): GPUBindGroup {
    const entries: GPUBindGroupEntry[] = [];
    buffers.forEach((b, i) => {
      if (b) entries.push({ binding: i, resource: { buffer: b } });
    });
    return this.acq.device.createBindGroup({ layout: pipe.getBindGroupLayout(0), entries });
  }

  private async packPass(enc: GPUCommandEncoder, scope: Scope, storage: 'f16' | 'bf16', src: GPUBuffer, dst: GPUBuffer, n: number): Promise<void> {
    const pipe = await this.pipeline(`pack:${storage}`, () => packWGSL(storage));
    const ub = this.createBuffer(scope, 16, BufferUsage.UNIFORM | BufferUsage.COPY_DST, 'pack params');
    this.acq.device.queue.writeBuffer(ub, 0, new Uint32Array([n, 0, 0, 0]));
    const pass = enc.beginComputePass();
    pass.setPipeline(pipe);
    pass.setBindGroup(0, this.bind(pipe, [src, dst, ub]));
    const [x, y] = grid1d(Math.ceil(n / 2 / 64), this.acq.device.limits.maxComputeWorkgroupsPerDimension);
    pass.dispatchWorkgroups(x, y);
    pass.end();
  }

  async forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): Promise<ForwardResult> {
    const p = describeProblem(q, k, v, opts);
    await this.ready();
    this.checkSupported(p);
    const dev = this.acq.device;
    const scope = new Scope(this.ledger);
    const onDevice = isDeviceTensor(q);
    let outBuf: GPUBuffer | undefined;
    let lseBuf: GPUBuffer | undefined;
    const res = await this.guard(
      scope,
      async () => {
        const choice = this.specFor('fwd', p) as Choice;
        const spec = choice.spec;
        this.lastSpecs = [spec];
        const pipe = await this.pipeline(specKey('fwd', spec), () => forwardWGSL(spec));
        const qb = this.input(scope, q, 'q');
        const kb = this.input(scope, k, 'k');
        const vb = this.input(scope, v, 'v');
        const nOut = p.totalQ * p.h * p.d;
        const bpe = bytesPerElement(p.dtype);
        outBuf = this.createBuffer(scope, nOut * bpe, BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, 'out');
        lseBuf = this.createBuffer(scope, p.totalQ * p.h * 4, BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, 'lse');
        const outF32 = this.outF32(p);
        const o32 = outF32 ? this.createBuffer(scope, nOut * 4, BufferUsage.STORAGE, 'out f32') : outBuf;
        const params = this.paramsBuffer(scope, p, spec.tile);
        const meta = this.metaBuffer(scope, p);
        const enc = dev.createCommandEncoder();
        const pass = enc.beginComputePass();
        pass.setPipeline(pipe);
        pass.setBindGroup(0, this.bind(pipe, [params, meta, qb, kb, vb, o32, lseBuf]));
        if (p.batch > 0 && p.tq > 0) pass.dispatchWorkgroups(Math.ceil(p.tq / spec.tile.nr), p.h, p.batch);
        pass.end();
        if (outF32) await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', o32, outBuf, nOut);
        dev.queue.submit([enc.finish()]);
        if (onDevice) return { out: this.wrap(outBuf, p.dtype, p.qShape), lse: this.wrap(lseBuf, 'f32', p.lseShape) };
        const out = await this.readBuffer(scope, outBuf, p.dtype, p.qShape);
        const lse = await this.readBuffer(scope, lseBuf, 'f32', p.lseShape);
        return { out, lse };
      },
      false,
      () => (onDevice ? new Set([outBuf!, lseBuf!]) : new Set()),
    );
    return res;
  }

  async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    await this.ready();
    this.checkSupported(p);
    const dev = this.acq.device;
    const scope = new Scope(this.ledger);
    const onDevice = isDeviceTensor(q);
    const outs: GPUBuffer[] = [];
    return this.guard(
      scope,
      async () => {
        const sKV = (this.specFor('dkdv', p) as Choice).spec;
        const sQ = (this.specFor('dq', p) as Choice).spec;
        this.lastSpecs = [sKV, sQ];
        const io = encoding(sKV);
        const [pDelta, pKV, pQ] = await Promise.all([
          this.generic ? this.pipeline(`delta:dyn:${io}`, () => deltaWGSL(io, 0, true)) : this.pipeline(`delta:${io}:${p.d}`, () => deltaWGSL(io, p.d)),
          this.pipeline(specKey('dkdv', sKV), () => dkdvWGSL(sKV)),
          this.pipeline(specKey('dq', sQ), () => dqWGSL(sQ)),
        ]);
        const qb = this.input(scope, q, 'q');
        const kb = this.input(scope, k, 'k');
        const vb = this.input(scope, v, 'v');
        const ob = this.input(scope, out, 'out');
        const dob = this.input(scope, dOut, 'dOut');
        const nRows = p.totalQ * p.h;
        // ld = [LSE (nRows) | Di (nRows)]
        const ld = this.createBuffer(scope, 8 * nRows, BufferUsage.STORAGE | BufferUsage.COPY_DST, 'lse+delta');
        const enc = dev.createCommandEncoder();
        if (isHostTensor(lse)) {
          if (nRows > 0) dev.queue.writeBuffer(ld, 0, lse.data.buffer, lse.data.byteOffset, nRows * 4);
        } else {
          const lb = this.input(scope, lse, 'lse');
          if (nRows > 0) enc.copyBufferToBuffer(lb, 0, ld, 0, nRows * 4);
        }
        const bpe = bytesPerElement(p.dtype);
        const nQ = p.totalQ * p.h * p.d;
        const nK = p.totalK * p.hkv * p.d;
        const usage = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;
        const dq = this.createBuffer(scope, nQ * bpe, usage, 'dq');
        const dk = this.createBuffer(scope, nK * bpe, usage, 'dk');
        const dv = this.createBuffer(scope, nK * bpe, usage, 'dv');
        outs.push(dq, dk, dv);
        const f32 = this.outF32(p);
        const dq32 = f32 ? this.createBuffer(scope, nQ * 4, BufferUsage.STORAGE, 'dq f32') : dq;
        const dk32 = f32 ? this.createBuffer(scope, nK * 4, BufferUsage.STORAGE, 'dk f32') : dk;
        const dv32 = f32 ? this.createBuffer(scope, nK * 4, BufferUsage.STORAGE, 'dv f32') : dv;
        const params = this.paramsBuffer(scope, p, sKV.tile, nRows);
        const paramsQ = this.paramsBuffer(scope, p, sQ.tile, nRows);
        const meta = this.metaBuffer(scope, p);
        const maxWG = dev.limits.maxComputeWorkgroupsPerDimension;
        const pass = enc.beginComputePass();
        if (nRows > 0) {
          pass.setPipeline(pDelta);
          const g = new Array<GPUBuffer | undefined>(4);
          g[DELTA.params] = params; g[DELTA.out] = ob; g[DELTA.dout] = dob; g[DELTA.ld] = ld;
          pass.setBindGroup(0, this.bind(pDelta, g));
          const [x, y] = grid1d(Math.ceil(nRows / 64), maxWG);
          pass.dispatchWorkgroups(x, y);
        }
        if (p.batch > 0 && p.tk > 0) {
          pass.setPipeline(pKV);
          const g = new Array<GPUBuffer | undefined>(9);
          g[BWD.params] = params; g[BWD.meta] = meta; g[BWD.q] = qb; g[BWD.k] = kb; g[BWD.v] = vb; g[BWD.dout] = dob; g[BWD.ld] = ld; g[BWD.dk] = dk32; g[BWD.dv] = dv32;
          pass.setBindGroup(0, this.bind(pKV, g));
          pass.dispatchWorkgroups(Math.ceil(p.tk / sKV.tile.nr), p.hkv, p.batch);
        }
        if (p.batch > 0 && p.tq > 0) {
          pass.setPipeline(pQ);
          const g = new Array<GPUBuffer | undefined>(8);
          g[BWD.params] = paramsQ; g[BWD.meta] = meta; g[BWD.q] = qb; g[BWD.k] = kb; g[BWD.v] = vb; g[BWD.dout] = dob; g[BWD.ld] = ld; g[BWD.dq] = dq32;
          pass.setBindGroup(0, this.bind(pQ, g));
          pass.dispatchWorkgroups(Math.ceil(p.tq / sQ.tile.nr), p.h, p.batch);
        }
        pass.end();
        if (f32) {
          await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', dq32, dq, nQ);
          await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', dk32, dk, nK);
          await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', dv32, dv, nK);
        }
        dev.queue.submit([enc.finish()]);
        if (onDevice) {
          return { dq: this.wrap(dq, p.dtype, p.qShape), dk: this.wrap(dk, p.dtype, p.kShape), dv: this.wrap(dv, p.dtype, p.kShape) };
        }
        return {
          dq: await this.readBuffer(scope, dq, p.dtype, p.qShape),
          dk: await this.readBuffer(scope, dk, p.dtype, p.kShape),
          dv: await this.readBuffer(scope, dv, p.dtype, p.kShape),
        };
      },
      false,
      () => (onDevice ? new Set(outs) : new Set()),
    );
  }
}

/** Splits n workgroups over (x, y) so that x stays within the per-dimension limit. */
function grid1d(n: number, max: number): [number, number] {
  if (n <= max) return [n, 1];
  const y = Math.ceil(n / max);
  return [Math.ceil(n / y), y];
}
