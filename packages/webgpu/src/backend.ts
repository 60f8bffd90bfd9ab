/// <reference types="@webgpu/types" />
/**
 * The WebGPU engine: the device and re-acquiring it after a loss, choosing the kernels'
 * specialisations, device tensors, and dispatch of the WGSL kernels. Its parts live beside it:
 * options.ts, tensor.ts, memory.ts (buffer ledger, per-call scopes), buffers.ts (creation,
 * upload, readback), dispatch.ts, pipelines.ts (the pipeline cache), errors.ts (error scopes →
 * FAError), support.ts (the adapter-limit checks).
 */
import {
  type AttentionBackend,
  type AttentionOptions,
  type DeviceIndexTensor,
  type IndexData,
  type KVCacheOptions,
  type KVCacheProblem,
  type AttentionProblem,
  type BackwardResult,
  type DType,
  type ForwardResult,
  type HostTensor,
  type Support,
  type Tensor,
  FAError,
  bytesPerElement,
  checkHostData,
  describeBackward,
  checkIndexUpload,
  checkIndexWrite,
  describeKVCacheProblem,
  describeProblem,
  optionSupport,
  isDeviceIndexTensor,
  isDeviceTensor,
  isHostTensor,
  numel,
} from '@fa/core';
import { CallGuard, errorText } from './errors.js';
import { createBuffer, metaBuffer, paramsBuffer, readBuffer, uploadInto, writableBytes } from './buffers.js';
import { DeviceConstants } from './constants.js';
import { Recycler } from './recycle.js';
import { grid1d } from './dispatch.js';
import { type Acquired, BufferUsage, acquire } from './gpu.js';
import { Ledger, type MemoryStats, Scope } from './memory.js';
import type { WebGPUBackendOptions } from './options.js';
import { PipelineCache } from './pipelines.js';
import { supportOf, unsupportedError } from './support.js';
import { encodeResize, kernelProblem, type ResizeEnv } from './head-dims.js';
import { WGIndexTensor, WGTensor } from './tensor.js';
import { type Bound, type ExportedBuffer, type WrapOptions, Recording, bindError, bufferOf, checkWrap, offsetOf } from './external.js';
import { appendHostCaches, encodeKVCache, kvSupport, type KVEnv } from './kvcache.js';
import { type KVCaps, type KVPlan, type KVTuning, planKV } from './kvplan.js';
import { type Caps, type Choice, type KernelKind, chooseSpec } from './tiles.js';
import { type KernelSpec, type Tile, encoding, specKey } from './wgsl/spec.js';
import { forwardWGSL } from './wgsl/forward.js';
import { GEMM_FLAGS, GEMM_TILE, gemmWGSL } from './wgsl/gemm.js';
import { type DeviceGemmCall, checkDeviceGemm } from './gemm.js';
import { WebGPUDeviceOps } from './model-ops.js';
import { BWD, DELTA, deltaWGSL, dkdvWGSL, dqWGSL, packWGSL, SINKS, sinkGradWGSL } from './wgsl/backward.js';
export type { WebGPUBackendOptions } from './options.js';
export type { WebGPUTensorHandle } from './tensor.js';
export type { MemoryStats } from './memory.js';

/** A call made during a recording must encode before the caller submits the encoder. */
function encodable(rec: Recording | undefined): void {
  if (rec && !rec.open) throw new FAError('E_ARG', 'this call was made during a recording whose encoder was submitted before the call encoded its work; await each call before submitting the encoder');
}


/** What the kernels compute beyond FlashAttention-2's options (core's option-support.ts). */
const OPTIONS = { sinks: true, vDim: true, dropout: true, kvSinks: true, kvBatchIdx: true, kvLeftpad: true, kvRotary: true, kvVDim: true, kvLatent: true } as const;

export class WebGPUBackend implements AttentionBackend {
  readonly name = 'webgpu';
  readonly dtypes: readonly DType[] = ['f32', 'f16', 'bf16'];
  private acq: Acquired;
  private epoch = 0;
  private lostInfo: string | undefined;
  private disposedAll = false;
  private readonly pipelines = new PipelineCache(() => this.device);
  private readonly live = new Set<WGTensor | WGIndexTensor>();
  private readonly ledger = new Ledger();
  /** Freed buffers, bind groups and layouts reused across calls (recycle.ts). */
  private readonly recycler = new Recycler();
  /** Params and metadata buffers reused across calls (constants.ts). */
  private readonly consts = new DeviceConstants();
  private readonly calls = new CallGuard({ device: () => this.acq.device, adapterName: () => this.device, lostInfo: () => this.lostInfo });
  /** Specialisations used by the most recent call (for tests and benchmarks). */
  lastSpecs: KernelSpec[] = [];
  /** The plan of the last KV-cache call (which kernel, its specialisation and split; tests, benchmarks). */
  lastKVPlan: KVPlan | undefined;
  /** The engine's kv* options, and what the KV-cache module needs of this backend (made once). */
  private readonly kvTuning: KVTuning;
  private readonly kvEnv: KVEnv;

  private constructor(
    acq: Acquired,
    private readonly opts: WebGPUBackendOptions,
  ) {
    this.acq = acq;
    this.kvTuning = { kernel: opts.kvKernel, minChunk: opts.kvMinChunk, targetWorkgroups: opts.kvTargetWorkgroups, keysPerStep: opts.kvKeysPerStep, prefetch: opts.kvPrefetch,
      chunkBytes: opts.kvChunkBytes, qShared: opts.kvQShared, lazyRescale: opts.kvLazyRescale, teamSum: opts.kvTeamSum,
      rowsAhead: opts.kvRowsAhead, threads: opts.kvThreads, rows: opts.kvRows, softmax: opts.kvSoftmax };
    this.kvEnv = this.makeKVEnv();
    this.ledger.recycler = this.recycler;
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
      this.recycler.clear(false);
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
      { storage: p.dtype, d: p.d, softcap: p.softcap > 0, alibi: p.alibi !== undefined, outF32: this.outF32(p), dynamic: this.generic, ...(f16 ? { f16 } : {}), ...(p.dropout ? { dropout: true } : {}) },
      this.caps(),
      this.opts.tiles?.[kind] ?? this.opts.tile,
      this.opts.subgroups !== false,
      this.opts.preferredTiles?.[kind],
    );
  }

  supports(p: AttentionProblem): Support {
    const opt = optionSupport(p, 'webgpu', OPTIONS);
    if (!opt.ok) return opt;
    const kp = kernelProblem(p); // (Dv ≠ D: the padded problem the kernels run, head-dims.ts)
    return supportOf(kp, this.acq.device.limits, (kind) => this.specFor(kind, kp), this.outF32(kp));
  }

  private checkSupported(p: AttentionProblem): void {
    const s = this.supports(p);
    if (!s.ok) throw unsupportedError(s);
  }

  // ---------------------------------------------------------------- tensors

  private wrap(buffer: GPUBuffer, dtype: DType, shape: readonly number[]): WGTensor {
    const t = new WGTensor(dtype, [...shape], { buffer, bytes: numel(shape) * bytesPerElement(dtype), epoch: this.epoch });
    this.live.add(t);
    return t;
  }

  /** The bytes of an input: this backend's device tensor (a range of a wrapped buffer), or an upload of a host tensor. */
  private input(scope: Scope, t: Tensor, what: string): Bound {
    if (isHostTensor(t)) return this.uploadInto(scope, t, what);
    if (isDeviceTensor(t)) {
      if (t.backend !== 'webgpu' || !(t instanceof WGTensor)) throw new FAError('E_ARG', `${what} is a device tensor of backend "${t.backend}"; read it to the host or upload it to webgpu first`);
      if (t.disposed) throw new FAError('E_ARG', `${what} is a webgpu tensor that was already disposed (or whose device was lost)`);
      if (t.handle.epoch !== this.epoch) throw new FAError('E_DEVICE', `${what} was created on a WebGPU device that has since been lost; upload it again`);
      // a range runs to the buffer's end: kernels that read whole vec4s may touch the padding
      return t.handle.offset ? { buffer: t.handle.buffer, offset: t.handle.offset } : t.handle.buffer;
    }
    throw new FAError('E_ARG', `${what} must be a tensor`);
  }

  /**
   * A caller's GPUBuffer as a webgpu tensor, without a copy (external.ts): an input of every call,
   * and a KV cache that calls write in place. The buffer must be on this backend's device, hold
   * the tensor from `offset`, and have STORAGE | COPY_SRC usage; anything else is a one-line
   * FAError here. The caller keeps ownership: disposeTensor forgets the buffer, never destroys
   * it, and the buffer must outlive the calls that use it.
   */
  async wrapBuffer(buffer: GPUBuffer, opts: WrapOptions): Promise<Tensor> {
    const dev = await this.ready();
    const { bytes, offset } = checkWrap(buffer, opts, dev.limits, this.dtypes);
    const err = await bindError(dev, buffer, offset);
    if (err !== null) throw new FAError('E_ARG', `wrapBuffer: this backend's device cannot use the buffer (made on another GPUDevice, or destroyed): ${err.split('\n')[0]}`);
    const t = new WGTensor(opts.dtype, [...opts.shape], { buffer, bytes, epoch: this.epoch, offset, external: true });
    this.live.add(t);
    return t;
  }

  #rec: Recording | undefined;

  /**
   * Encodes the engine's calls into a caller's command encoder instead of submitting our own,
   * until the caller has submitted it and called `submitted()` on the returned recording (a
   * framework batching its work into one command buffer). Meanwhile calls must be on device
   * tensors (stream-ordered: nothing comes back to the host), and read(), sync(), writeIndex()
   * and host-tensor calls are refused: their work would run before the recorded calls. Uploads
   * are fine. The buffers recorded calls use are kept until submitted(). Errors of recorded work
   * surface in the caller's error scopes when the encoder is finished or submitted.
   */
  recordInto(encoder: GPUCommandEncoder): Recording {
    if (this.#rec?.internal) throw new FAError('E_ARG', 'recordInto: calls of this turn are batched (batchCalls) and not submitted yet; await sync() first');
    if (this.#rec) throw new FAError('E_ARG', "recordInto: a recording into another command encoder is open; submit that encoder and call its recording's submitted() first");
    const e = encoder as Partial<GPUCommandEncoder> | null;
    if (typeof e !== 'object' || e === null || typeof e.beginComputePass !== 'function' || typeof e.finish !== 'function') throw new FAError('E_ARG', 'recordInto takes a GPUCommandEncoder');
    this.ledger.held = [];
    this.consts.ledger.held = [];
    const rec = new Recording(encoder, () => {
      if (this.#rec === rec) this.#rec = undefined;
      this.ledger.releaseHeld();
      this.consts.ledger.releaseHeld();
    });
    this.#rec = rec;
    return rec;
  }

  /** Batches submitted so far (options.batchCalls; tests and benchmarks). */
  batchesSubmitted = 0;

  /** The recording a call made now encodes into: a caller's, the open batch, a new batch (batchCalls), or none. */
  private current(): Recording | undefined {
    if (this.#rec) return this.#rec;
    if (!this.opts.batchCalls || this.disposedAll || this.lostInfo !== undefined) return undefined;
    const enc = this.acq.device.createCommandEncoder();
    this.ledger.held ??= [];
    this.consts.ledger.held ??= [];
    const rec: Recording = new Recording(enc, () => {
      if (this.#rec === rec) this.#rec = undefined;
      this.ledger.releaseHeld();
      this.consts.ledger.releaseHeld();
    }, true);
    this.#rec = rec;
    // the turn's calls join it; it is submitted in the calls' order once they have encoded
    const later = (globalThis as { setImmediate?: (f: () => void) => void }).setImmediate ?? ((f: () => void) => setTimeout(f, 0));
    later(() => void this.calls.exclusive(() => this.flushBatch()).catch(() => undefined));
    return rec;
  }

  /** A call's recording when it encodes: a batch submitted meanwhile is replaced by the open one. */
  private liveRec(rec: Recording | undefined): Recording | undefined {
    if (rec && !rec.open && rec.internal) return this.current();
    encodable(rec);
    return rec;
  }

  /** Submits the open batch (inside the calls' lock: no call is encoding into it). */
  private flushBatch(): void {
    const rec = this.#rec;
    if (!rec || !rec.internal || !rec.open) return;
    this.calls.submitWatched('a batch of calls', this.acq.device, rec.encoder.finish());
    this.batchesSubmitted++;
    rec.submitted();
  }

  /** Refuses work that would run before an open recording's calls. */
  private notRecording(what: string): void {
    if (this.#rec && !this.#rec.internal) throw new FAError('E_ARG', `${what} while a recording into a caller's command encoder is open: its work would run before the recorded calls; submit the encoder and call submitted() first`);
  }

  /** The open recording a call encodes into (checked again when the call encodes), or undefined. */
  private recordingFor(what: string, onDevice: boolean, rec: Recording | undefined): Recording | undefined {
    if (rec && !onDevice && !rec.internal) this.notRecording(`${what} on host tensors`);
    // (a host-tensor call submits on its own: the batch goes first, inside the calls' lock)
    return onDevice ? rec : undefined;
  }

  /**
   * The GPUBuffer under a webgpu tensor, for another program on the same device (e.g.
   * `tf.tensor({ buffer, zeroCopy: true }, shape)`), without a copy. Borrowed by default: valid
   * until the tensor is disposed. `transfer: true` hands the buffer over: the tensor is disposed,
   * the engine stops counting the buffer and the caller destroys it when done. Work the engine
   * submitted on it is ordered before anything the device's queue runs after this call.
   */
  exportBuffer(t: Tensor, opts: { transfer?: boolean } = {}): ExportedBuffer {
    if (!(t instanceof WGTensor)) throw new FAError('E_ARG', 'exportBuffer takes a webgpu device tensor');
    if (t.disposed) throw new FAError('E_ARG', 'exportBuffer: the tensor was already disposed (or its device was lost)');
    if (t.handle.epoch !== this.epoch) throw new FAError('E_DEVICE', 'exportBuffer: the tensor was created on a WebGPU device that has since been lost');
    const transfer = opts.transfer === true;
    const e: ExportedBuffer = { buffer: t.handle.buffer, offset: t.handle.offset ?? 0, bytes: t.handle.bytes, dtype: t.dtype, shape: t.shape, transferred: transfer && !t.handle.external };
    if (transfer) {
      if (t.handle.external) throw new FAError('E_ARG', 'exportBuffer: the tensor wraps a buffer the caller already owns; nothing to transfer');
      t.disposed = true;
      this.live.delete(t);
      this.ledger.forget(t.handle.buffer);
    }
    return e;
  }

  supportsKVCache(p: KVCacheProblem): Support {
    const opt = optionSupport(p, 'webgpu', OPTIONS);
    if (!opt.ok) return opt;
    return kvSupport(p, this.acq.device.limits, this.kvPlan(p));
  }

  private kvPlan(p: KVCacheProblem): KVPlan {
    return planKV(p, this.kvCaps(), this.kvTuning);
  }

  private kvCaps(): KVCaps {
    const sub = this.opts.subgroups !== false && this.acq.features.has('subgroups');
    return { subgroups: sub, subgroupMin: sub ? this.acq.subgroupMin : 0, generic: this.generic, maxShared: this.acq.device.limits.maxComputeWorkgroupStorageSize };
  }

  /** What the KV-cache module needs of this backend; each member reads the current device when called. */
  private makeKVEnv(): KVEnv {
    return {
      name: this.name,
      device: () => this.acq.device,
      createBuffer: (scope, bytes, usage, label) => this.createBuffer(scope, bytes, usage, label),
      constant: (scope, data, usage, label) => this.consts.constant(this.acq.device, scope, data, usage, label),
      input: (scope, t, what) => this.input(scope, t, what),
      pipeline: (key, code) => this.pipeline(key, code),
      bind: (pipe, buffers) => this.bind(pipe, buffers),
      readBuffer: (scope, buf, dtype, shape) => this.readBuffer(scope, buf, dtype, shape),
      wrap: (buf, dtype, shape) => this.wrap(buf, dtype, shape),
      indexBuffer: (t, what) => this.indexBuffer(t, what),
    };
  }

  private indexBuffer(t: WGIndexTensor, what: string): GPUBuffer {
    if (t.disposed) throw new FAError('E_ARG', `${what} is a webgpu index tensor that was already disposed (or whose device was lost)`);
    if (t.handle.epoch !== this.epoch) throw new FAError('E_DEVICE', `${what} was created on a WebGPU device that has since been lost; upload it again`);
    return t.handle.buffer;
  }

  async forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
    const p = describeKVCacheProblem(q, kCache, vCache, opts, this.name);
    const recAtCall = this.current(); // (the recording open when the call is made)
    await this.ready();
    const opt = optionSupport(p, 'webgpu', OPTIONS);
    if (!opt.ok) throw unsupportedError(opt);
    const plan = this.kvPlan(p);
    const s = kvSupport(p, this.acq.device.limits, plan);
    if (!s.ok) throw unsupportedError(s);
    this.lastKVPlan = plan;
    const scope = new Scope(this.ledger);
    const outs: GPUBuffer[] = [];
    const onDevice = isDeviceTensor(q);
    let rec = this.recordingFor('forwardWithKVCache', onDevice && isDeviceTensor(kCache) && isDeviceTensor(vCache), recAtCall);
    const body = () => {
      rec = this.liveRec(rec);
      if (!rec) this.flushBatch(); // (a call that submits on its own: after the batch)
      return encodeKVCache(this.kvEnv, scope, p, plan, q, kCache, vCache, opts, outs, rec?.encoder);
    };
    // stream-ordered when nothing returns to the host: device q (so device outputs) and caches
    if (onDevice && isDeviceTensor(kCache) && isDeviceTensor(vCache)) return this.calls.runDeferred('forwardWithKVCache', scope, body, () => new Set(outs));
    return this.guard(scope, body, false, () => (onDevice ? new Set(outs) : new Set()), () => appendHostCaches(p, kCache, vCache, opts));
  }

  async uploadIndex(data: IndexData, shape?: readonly number[]): Promise<DeviceIndexTensor> {
    const c = checkIndexUpload(data, shape);
    await this.ready();
    const scope = new Scope(this.ledger);
    return this.guard(scope, async () => this.newIndex(scope, c), true);
  }

  /** An index tensor holding `c`'s values (the copy queued now) and its mirror. */
  private newIndex(scope: Scope, c: ReturnType<typeof checkIndexUpload>): WGIndexTensor {
    const buf = this.createBuffer(scope, Math.max(16, c.data.byteLength), BufferUsage.STORAGE | BufferUsage.COPY_DST | BufferUsage.COPY_SRC, 'index');
    if (c.data.byteLength > 0) {
      const w = writableBytes(c.data);
      this.acq.device.queue.writeBuffer(buf, 0, w.buffer, w.offset, w.size);
    }
    const t = new WGIndexTensor(c.shape, { buffer: buf, bytes: c.data.byteLength, epoch: this.epoch }, c.data);
    this.live.add(t);
    return t;
  }

  /**
   * uploadIndex at once, without an await (model code: a step's token ids and targets, whose
   * later calls are issued before anything is awaited). The copy is queued now: calls submitted
   * after read it. A lost device is found by the next awaited call.
   */
  uploadIndexNow(data: IndexData, shape?: readonly number[]): DeviceIndexTensor {
    if (this.disposedAll) throw new FAError('E_DEVICE', 'the webgpu backend was disposed');
    return this.newIndex(new Scope(this.ledger), checkIndexUpload(data, shape));
  }

  async writeIndex(t: DeviceIndexTensor, data: IndexData, offset = 0): Promise<void> {
    this.notRecording('writeIndex');
    const d = checkIndexWrite(t, data, offset, this.name);
    await this.ready();
    // (calls issued before read the old entries: they are submitted before the write is queued)
    if (this.opts.batchCalls) await this.calls.exclusive(() => this.flushBatch());
    const buf = this.indexBuffer(t as WGIndexTensor, 'writeIndex target');
    // queue order: calls submitted before read the old entries, calls after the new ones
    if (d.length > 0) {
      const w = writableBytes(d);
      this.acq.device.queue.writeBuffer(buf, offset * 4, w.buffer, w.offset, w.size);
    }
    t.mirror.set(d, offset);
  }

  /**
   * A new webgpu tensor at once, without a host copy or an await (model code allocating its
   * activations and gradients): zero-filled by a clear on the queue (or in the open recording),
   * unless `uninitialized` (every value will be written before it is read). A lost device is
   * found by the next awaited call.
   */
  allocTensor(dtype: DType, shape: readonly number[], opts: { uninitialized?: boolean } = {}): Tensor {
    if (this.disposedAll) throw new FAError('E_DEVICE', 'the webgpu backend was disposed');
    if (!this.dtypes.includes(dtype)) throw new FAError('E_DTYPE', `allocTensor: dtype must be one of ${this.dtypes.join(', ')}, got ${String(dtype)}`);
    if (!Array.isArray(shape) || !shape.every((x) => Number.isSafeInteger(x) && x >= 0)) throw new FAError('E_SHAPE', `allocTensor: shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`);
    const bytes = numel(shape) * bytesPerElement(dtype);
    const scope = new Scope(this.ledger);
    const buf = this.createBuffer(scope, bytes, BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, 'tensor');
    if (!opts.uninitialized && bytes > 0) {
      // (a pooled buffer holds an earlier tensor's values)
      const enc = this.#rec ? this.#rec.encoder : this.acq.device.createCommandEncoder();
      enc.clearBuffer(buf);
      if (!this.#rec) this.acq.device.queue.submit([enc.finish()]);
    }
    return this.wrap(buf, dtype, shape);
  }

  /** upload at once, without an await (the copy is queued now; calls submitted after read it). */
  uploadNow(t: HostTensor): Tensor {
    if (this.disposedAll) throw new FAError('E_DEVICE', 'the webgpu backend was disposed');
    checkHostData(t.data, t.shape, t.dtype, 'uploadNow');
    const scope = new Scope(this.ledger);
    return this.wrap(this.uploadInto(scope, t, 'upload'), t.dtype, t.shape);
  }

  /**
   * Another shape over the same buffer (no copy): a view, valid while `t` is. Disposing the view
   * forgets it; the buffer stays `t`'s.
   */
  viewTensor(t: Tensor, shape: readonly number[]): Tensor {
    if (!(t instanceof WGTensor) || t.disposed) throw new FAError('E_ARG', 'viewTensor takes a live webgpu device tensor');
    if (numel(shape) !== numel(t.shape)) throw new FAError('E_SHAPE', `viewTensor: ${numel(t.shape)} values cannot be viewed as [${shape.join(', ')}]`);
    return new WGTensor(t.dtype, [...shape], { ...t.handle, external: true });
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
    this.notRecording('read');
    await this.ready();
    await this.calls.settle();
    const scope = new Scope(this.ledger);
    const b = this.input(scope, t, 'read');
    return this.guard(scope, () => {
      this.flushBatch(); // (the readback goes after the batch that computes t)
      return this.readBuffer(scope, bufferOf(b), t.dtype, t.shape, offsetOf(b));
    }, false);
  }

  disposeTensor(t: Tensor | DeviceIndexTensor): void {
    if (!(t instanceof WGTensor || t instanceof WGIndexTensor) || t.disposed) return;
    t.disposed = true;
    this.live.delete(t);
    if (t.handle.external) this.recycler.forget(t.handle.buffer);
    else if (t.handle.epoch === this.epoch) this.ledger.destroy(t.handle.buffer);
  }

  async dispose(): Promise<void> {
    if (this.disposedAll) return;
    if (this.#rec?.internal) await this.calls.exclusive(() => this.flushBatch()).catch(() => undefined);
    for (const t of this.live) this.disposeTensor(t);
    this.disposedAll = true;
    this.pipelines.clear();
    this.consts.clear();
    this.recycler.clear(true);
    if (this.acq.owned) this.acq.device.destroy();
  }

  /** GPU memory held by this backend's buffers (device tensors and in-flight temporaries). */
  memoryStats(): MemoryStats {
    return { current: this.ledger.current, peak: this.ledger.peak, constants: this.consts.ledger.current, pooled: this.recycler.pooled };
  }

  /** Starts a new peak measurement at the current level. */
  resetPeakMemory(): void {
    this.ledger.peak = this.ledger.current;
  }

  /** Waits until the GPU has finished all submitted work (benchmarks). */
  async sync(): Promise<void> {
    this.notRecording('sync');
    if (this.opts.batchCalls) await this.calls.exclusive(() => this.flushBatch());
    await this.acq.device.queue.onSubmittedWorkDone();
    // a stream-ordered call's device error surfaces here (DESIGN.md)
    await this.calls.settle();
  }

  // ---------------------------------------------------------------- on the current device
  // Each reads this.acq.device when called: the device changes when a lost one is re-acquired.

  private createBuffer(scope: Scope, bytes: number, usage: number, label: string): GPUBuffer {
    return createBuffer(this.acq.device, scope, bytes, usage, label);
  }

  private uploadInto(scope: Scope, t: HostTensor, label: string): GPUBuffer {
    return uploadInto(this.acq.device, scope, t, label);
  }

  private metaBuffer(scope: Scope, p: AttentionProblem): GPUBuffer {
    return metaBuffer(this.acq.device, scope, p, this.consts);
  }

  private paramsBuffer(scope: Scope, p: AttentionProblem, tile: Tile, diOff = 0): GPUBuffer {
    return paramsBuffer(this.acq.device, scope, p, tile, this.outF32(p), this.consts, diOff);
  }

  /** The resize passes' view of this backend (head-dims.ts), for buffers of `scope`. */
  private resizeEnv(scope: Scope): ResizeEnv {
    return {
      device: this.acq.device,
      pipeline: (key, code) => this.pipeline(key, code),
      bind: (pipe, buffers) => this.bind(pipe, buffers),
      uniform: (values) => {
        const ub = this.createBuffer(scope, values.byteLength, BufferUsage.UNIFORM | BufferUsage.COPY_DST, 'resize params');
        this.acq.device.queue.writeBuffer(ub, 0, values);
        return ub;
      },
    };
  }

  /**
   * `b` (rows of `from` elements) resized to rows of `to` in a new buffer of the scope, encoded
   * into `enc`; `b` itself when the widths agree (head-dims.ts).
   */
  private async resized(enc: GPUCommandEncoder, scope: Scope, dtype: DType, b: Bound, rows: number, from: number, to: number, what: string): Promise<Bound> {
    if (from === to) return b;
    const dst = this.createBuffer(scope, rows * to * bytesPerElement(dtype), BufferUsage.STORAGE, what);
    await encodeResize(this.resizeEnv(scope), enc, dtype, b, dst, rows, from, to);
    return dst;
  }

  private bind(pipe: GPUComputePipeline, buffers: (GPUBuffer | GPUBufferBinding | undefined)[]): GPUBindGroup {
    return this.recycler.bind(this.acq.device, pipe, buffers);
  }

  private pipeline(key: string, code: () => string): Promise<GPUComputePipeline> {
    return this.pipelines.get(this.acq.device, key, code);
  }

  private guard<T>(scope: Scope, body: () => Promise<T>, keepAll: boolean, keep?: () => ReadonlySet<GPUBuffer>, commit?: () => void): Promise<T> {
    return this.calls.run(scope, body, keepAll, keep, commit);
  }

  private readBuffer(scope: Scope, buf: GPUBuffer, dtype: DType, shape: readonly number[], offset = 0): Promise<HostTensor> {
    return readBuffer(this.acq.device, scope, buf, dtype, shape, () => this.lostInfo, offset);
  }

  // ---------------------------------------------------------------- model ops (issue 25)

  #deviceOps: (WebGPUDeviceOps & { gemm(g: DeviceGemmCall): Promise<void> }) | undefined;

  /**
   * The model ops on this engine's device tensors (model-ops.ts): core's call types with webgpu
   * f32 tensors for arrays and index tensors for targets, each stream-ordered. Not `modelOps`:
   * that name is the host engines' synchronous interface, which @fa/autograd's setModelEngine takes.
   */
  get deviceOps(): WebGPUDeviceOps & { gemm(g: DeviceGemmCall): Promise<void> } {
    if (!this.#deviceOps) {
      const ops = new WebGPUDeviceOps({
        device: () => this.acq.device,
        pipeline: (key, code) => this.pipeline(key, code),
        bind: (pipe, buffers) => this.bind(pipe, buffers),
        constant: (scope, data, usage, label) => this.consts.constant(this.acq.device, scope, data, usage, label),
        createBuffer: (scope, bytes, usage, label) => this.createBuffer(scope, bytes, usage, label),
        input: (scope, t, what) => this.input(scope, t, what),
        indexBuffer: (t, what) => this.indexBuffer(t, what),
        run: (what, body) => this.runOp(what, body),
      });
      this.#deviceOps = Object.assign(ops, { gemm: (g: DeviceGemmCall) => this.gemm(g) });
    }
    return this.#deviceOps;
  }

  /** One stream-ordered model op: `body` encodes into the call's encoder (the recording's, or one submitted after). */
  private async runOp(what: string, body: (enc: GPUCommandEncoder, scope: Scope) => Promise<void>): Promise<void> {
    let rec = this.current();
    await this.ready();
    const scope = new Scope(this.ledger);
    return this.calls.runDeferred(what, scope, async () => {
      rec = this.liveRec(rec);
      const dev = this.acq.device;
      const enc = rec ? rec.encoder : dev.createCommandEncoder();
      await body(enc, scope);
      if (!rec) dev.queue.submit([enc.finish()]);
    }, () => new Set());
  }

  /**
   * C = op(A)·op(B) (+ bias) (+ C with accumulate) on webgpu f32 tensors (core's GemmCall
   * conventions), written into c in place; stream-ordered: resolves once encoded, errors the GPU
   * finds surface at the next read or sync. The first of the model ops on this engine.
   */
  async gemm(g: DeviceGemmCall): Promise<void> {
    const t = checkDeviceGemm(g);
    const recAtCall = this.current();
    await this.ready();
    for (const [name, x] of [['a', t.a], ['b', t.b], ['c', t.c], ['bias', t.bias]] as const) {
      if (x && x.disposed) throw new FAError('E_ARG', `gemm: ${name} was already disposed (or its device was lost)`);
      if (x && x.handle.epoch !== this.epoch) throw new FAError('E_DEVICE', `gemm: ${name} was created on a WebGPU device that has since been lost`);
    }
    const scope = new Scope(this.ledger);
    let rec = recAtCall;
    const body = async () => {
      rec = this.liveRec(rec);
      if (g.M === 0 || g.N === 0 || g.batch === 0) return;
      const dev = this.acq.device;
      const pipe = await this.pipeline('gemm:f32', gemmWGSL);
      const flags = (g.transA ? GEMM_FLAGS.transA : 0) | (g.transB ? GEMM_FLAGS.transB : 0) | (g.accumulate ? GEMM_FLAGS.accumulate : 0) | (t.bias ? GEMM_FLAGS.bias : 0);
      const u = [g.M, g.N, g.K, flags, g.aOffset ?? 0, g.bOffset ?? 0, g.cOffset ?? 0, g.strideA ?? 0, g.strideB ?? 0, g.strideC ?? 0, 0, 0];
      const params = this.consts.constant(dev, scope, new Uint8Array(new Uint32Array(u).buffer), BufferUsage.UNIFORM, 'gemm params');
      const at = (x: WGTensor) => this.input(scope, x, 'gemm operand');
      const enc = rec ? rec.encoder : dev.createCommandEncoder();
      const pass = enc.beginComputePass();
      pass.setPipeline(pipe);
      pass.setBindGroup(0, this.bind(pipe, [params, at(t.a), at(t.b), at(t.c), t.bias ? at(t.bias) : at(t.a)]));
      pass.dispatchWorkgroups(Math.ceil(g.N / GEMM_TILE), Math.ceil(g.M / GEMM_TILE), g.batch ?? 1);
      pass.end();
      if (!rec) dev.queue.submit([enc.finish()]);
    };
    return this.calls.runDeferred('gemm', scope, body, () => new Set());
  }

  // ---------------------------------------------------------------- attention

  private async packPass(enc: GPUCommandEncoder, scope: Scope, storage: 'f16' | 'bf16', src: Bound, dst: Bound, n: number): Promise<void> {
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
    const recAtCall = this.current(); // (the recording open when the call is made)
    await this.ready();
    this.checkSupported(p);
    const dev = this.acq.device;
    const scope = new Scope(this.ledger);
    const onDevice = isDeviceTensor(q);
    let rec = this.recordingFor('forward', onDevice, recAtCall);
    let outBuf: GPUBuffer | undefined;
    let lseBuf: GPUBuffer | undefined;
    const body = async () => {
        rec = this.liveRec(rec);
        if (!rec) this.flushBatch();
        // Dv ≠ D: the kernels run the problem padded to one head dim (head-dims.ts)
        const kp = kernelProblem(p);
        const choice = this.specFor('fwd', kp) as Choice;
        const spec = choice.spec;
        this.lastSpecs = [spec];
        const pipe = await this.pipeline(specKey('fwd', spec), () => forwardWGSL(spec));
        const qIn = this.input(scope, q, 'q');
        const kIn = this.input(scope, k, 'k');
        const vIn = this.input(scope, v, 'v');
        const qRows = p.totalQ * p.h;
        const kRows = p.totalK * p.hkv;
        const nOut = qRows * p.vDim;
        const nWide = qRows * kp.d; // out as the kernel writes it
        const bpe = bytesPerElement(p.dtype);
        outBuf = this.createBuffer(scope, nOut * bpe, BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, 'out');
        lseBuf = this.createBuffer(scope, p.totalQ * p.h * 4, BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, 'lse');
        const wide = nWide === nOut ? outBuf : this.createBuffer(scope, nWide * bpe, BufferUsage.STORAGE, 'out padded');
        const outF32 = this.outF32(kp);
        const o32 = outF32 ? this.createBuffer(scope, nWide * 4, BufferUsage.STORAGE, 'out f32') : wide;
        const params = this.paramsBuffer(scope, kp, spec.tile);
        const meta = this.metaBuffer(scope, kp);
        const enc = rec ? rec.encoder : dev.createCommandEncoder();
        const qb = await this.resized(enc, scope, p.dtype, qIn, qRows, p.d, kp.d, 'q padded');
        const kb = await this.resized(enc, scope, p.dtype, kIn, kRows, p.d, kp.d, 'k padded');
        const vb = await this.resized(enc, scope, p.dtype, vIn, kRows, p.vDim, kp.d, 'v padded');
        const pass = enc.beginComputePass();
        pass.setPipeline(pipe);
        pass.setBindGroup(0, this.bind(pipe, [params, meta, qb, kb, vb, o32, lseBuf]));
        if (p.batch > 0 && p.tq > 0) pass.dispatchWorkgroups(Math.ceil(p.tq / spec.tile.nr), p.h, p.batch);
        pass.end();
        if (outF32) await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', o32, wide, nWide);
        if (wide !== outBuf) await encodeResize(this.resizeEnv(scope), enc, p.dtype, wide, outBuf, qRows, kp.d, p.vDim);
        if (!rec) dev.queue.submit([enc.finish()]);
        if (onDevice) return { out: this.wrap(outBuf, p.dtype, p.outShape), lse: this.wrap(lseBuf, 'f32', p.lseShape) };
        const out = await this.readBuffer(scope, outBuf, p.dtype, p.outShape);
        const lse = await this.readBuffer(scope, lseBuf, 'f32', p.lseShape);
        return { out, lse };
      };
    if (onDevice) return this.calls.runDeferred('forward', scope, body, () => new Set([outBuf!, lseBuf!]));
    return this.guard(scope, body, false, () => new Set());
  }

  async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    const recAtCall = this.current(); // (the recording open when the call is made)
    await this.ready();
    this.checkSupported(p);
    const dev = this.acq.device;
    const scope = new Scope(this.ledger);
    const onDevice = isDeviceTensor(q);
    let rec = this.recordingFor('backward', onDevice, recAtCall);
    const outs: GPUBuffer[] = [];
    const body = async () => {
        rec = this.liveRec(rec);
        if (!rec) this.flushBatch();
        // Dv ≠ D: the kernels run the problem padded to one head dim (head-dims.ts)
        const kp = kernelProblem(p);
        const sKV = (this.specFor('dkdv', kp) as Choice).spec;
        const sQ = (this.specFor('dq', kp) as Choice).spec;
        this.lastSpecs = [sKV, sQ];
        const io = encoding(sKV);
        const [pDelta, pKV, pQ, pSinks] = await Promise.all([
          this.generic ? this.pipeline(`delta:dyn:${io}`, () => deltaWGSL(io, 0, true)) : this.pipeline(`delta:${io}:${kp.d}`, () => deltaWGSL(io, kp.d)),
          this.pipeline(specKey('dkdv', sKV), () => dkdvWGSL(sKV)),
          this.pipeline(specKey('dq', sQ), () => dqWGSL(sQ)),
          p.sinks ? this.pipeline('sink-grad', () => sinkGradWGSL()) : Promise.resolve(undefined),
        ]);
        const qIn = this.input(scope, q, 'q');
        const kIn = this.input(scope, k, 'k');
        const vIn = this.input(scope, v, 'v');
        const oIn = this.input(scope, out, 'out');
        const doIn = this.input(scope, dOut, 'dOut');
        const nRows = p.totalQ * p.h;
        const kRows = p.totalK * p.hkv;
        // ld = [LSE (nRows) | Di (nRows)]
        const ld = this.createBuffer(scope, 8 * nRows, BufferUsage.STORAGE | BufferUsage.COPY_DST, 'lse+delta');
        const enc = rec ? rec.encoder : dev.createCommandEncoder();
        const qb = await this.resized(enc, scope, p.dtype, qIn, nRows, p.d, kp.d, 'q padded');
        const kb = await this.resized(enc, scope, p.dtype, kIn, kRows, p.d, kp.d, 'k padded');
        const vb = await this.resized(enc, scope, p.dtype, vIn, kRows, p.vDim, kp.d, 'v padded');
        const ob = await this.resized(enc, scope, p.dtype, oIn, nRows, p.vDim, kp.d, 'out padded');
        const dob = await this.resized(enc, scope, p.dtype, doIn, nRows, p.vDim, kp.d, 'dOut padded');
        if (isHostTensor(lse)) {
          if (nRows > 0) {
            const w = writableBytes(lse.data);
            dev.queue.writeBuffer(ld, 0, w.buffer, w.offset, nRows * 4);
          }
        } else {
          const lb = this.input(scope, lse, 'lse');
          if (nRows > 0) enc.copyBufferToBuffer(bufferOf(lb), offsetOf(lb), ld, 0, nRows * 4);
        }
        const bpe = bytesPerElement(p.dtype);
        const nQ = nRows * kp.d; // the kernels' dq, dk and dv (one head dim)
        const nK = kRows * kp.d;
        const usage = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;
        const dq = this.createBuffer(scope, nRows * p.d * bpe, usage, 'dq');
        const dk = this.createBuffer(scope, kRows * p.d * bpe, usage, 'dk');
        const dv = this.createBuffer(scope, kRows * p.vDim * bpe, usage, 'dv');
        outs.push(dq, dk, dv);
        const wideOf = (b: GPUBuffer, n: number, what: string) => (n === nK ? b : this.createBuffer(scope, nK * bpe, BufferUsage.STORAGE, what));
        const dqW = kp.d === p.d ? dq : this.createBuffer(scope, nQ * bpe, BufferUsage.STORAGE, 'dq padded');
        const dkW = wideOf(dk, kRows * p.d, 'dk padded');
        const dvW = wideOf(dv, kRows * p.vDim, 'dv padded');
        const dsinks = pSinks ? this.createBuffer(scope, 4 * p.h, usage, 'dsinks') : undefined;
        if (dsinks) outs.push(dsinks);
        const f32 = this.outF32(kp);
        const dq32 = f32 ? this.createBuffer(scope, nQ * 4, BufferUsage.STORAGE, 'dq f32') : dqW;
        const dk32 = f32 ? this.createBuffer(scope, nK * 4, BufferUsage.STORAGE, 'dk f32') : dkW;
        const dv32 = f32 ? this.createBuffer(scope, nK * 4, BufferUsage.STORAGE, 'dv f32') : dvW;
        const params = this.paramsBuffer(scope, kp, sKV.tile, nRows);
        const paramsQ = this.paramsBuffer(scope, kp, sQ.tile, nRows);
        const meta = this.metaBuffer(scope, kp);
        const maxWG = dev.limits.maxComputeWorkgroupsPerDimension;
        const pass = enc.beginComputePass();
        if (nRows > 0) {
          pass.setPipeline(pDelta);
          const g = new Array<Bound | undefined>(4);
          g[DELTA.params] = params; g[DELTA.out] = ob; g[DELTA.dout] = dob; g[DELTA.ld] = ld;
          pass.setBindGroup(0, this.bind(pDelta, g));
          const [x, y] = grid1d(Math.ceil(nRows / 64), maxWG);
          pass.dispatchWorkgroups(x, y);
        }
        if (pSinks && dsinks) {
          // dsinks from Di and the LSE (core's sinks.ts); written for every head, rows or not
          pass.setPipeline(pSinks);
          const g = new Array<Bound | undefined>(4);
          g[SINKS.params] = params; g[SINKS.meta] = meta; g[SINKS.ld] = ld; g[SINKS.dsinks] = dsinks;
          pass.setBindGroup(0, this.bind(pSinks, g));
          pass.dispatchWorkgroups(p.h);
        }
        if (p.batch > 0 && p.tk > 0) {
          pass.setPipeline(pKV);
          const g = new Array<Bound | undefined>(9);
          g[BWD.params] = params; g[BWD.meta] = meta; g[BWD.q] = qb; g[BWD.k] = kb; g[BWD.v] = vb; g[BWD.dout] = dob; g[BWD.ld] = ld; g[BWD.dk] = dk32; g[BWD.dv] = dv32;
          pass.setBindGroup(0, this.bind(pKV, g));
          pass.dispatchWorkgroups(Math.ceil(p.tk / sKV.tile.nr), p.hkv, p.batch);
        }
        if (p.batch > 0 && p.tq > 0) {
          pass.setPipeline(pQ);
          const g = new Array<Bound | undefined>(8);
          g[BWD.params] = paramsQ; g[BWD.meta] = meta; g[BWD.q] = qb; g[BWD.k] = kb; g[BWD.v] = vb; g[BWD.dout] = dob; g[BWD.ld] = ld; g[BWD.dq] = dq32;
          pass.setBindGroup(0, this.bind(pQ, g));
          pass.dispatchWorkgroups(Math.ceil(p.tq / sQ.tile.nr), p.h, p.batch);
        }
        pass.end();
        if (f32) {
          await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', dq32, dqW, nQ);
          await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', dk32, dkW, nK);
          await this.packPass(enc, scope, p.dtype as 'f16' | 'bf16', dv32, dvW, nK);
        }
        if (dqW !== dq) await encodeResize(this.resizeEnv(scope), enc, p.dtype, dqW, dq, nRows, kp.d, p.d);
        if (dkW !== dk) await encodeResize(this.resizeEnv(scope), enc, p.dtype, dkW, dk, kRows, kp.d, p.d);
        if (dvW !== dv) await encodeResize(this.resizeEnv(scope), enc, p.dtype, dvW, dv, kRows, kp.d, p.vDim);
        if (!rec) dev.queue.submit([enc.finish()]);
        if (onDevice) {
          const g = { dq: this.wrap(dq, p.dtype, p.qShape), dk: this.wrap(dk, p.dtype, p.kShape), dv: this.wrap(dv, p.dtype, p.vShape) };
          return dsinks ? { ...g, dsinks: this.wrap(dsinks, 'f32', [p.h]) } : g;
        }
        const g = {
          dq: await this.readBuffer(scope, dq, p.dtype, p.qShape),
          dk: await this.readBuffer(scope, dk, p.dtype, p.kShape),
          dv: await this.readBuffer(scope, dv, p.dtype, p.vShape),
        };
        return dsinks ? { ...g, dsinks: await this.readBuffer(scope, dsinks, 'f32', [p.h]) } : g;
      };
    if (onDevice) return this.calls.runDeferred('backward', scope, body, () => new Set(outs));
    return this.guard(scope, body, false, () => new Set());
  }
}
