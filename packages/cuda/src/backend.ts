/**
 * The CUDA engine: an AttentionBackend over the native addon. f16 and bf16 run on the tensor
 * cores with float32 accumulation; f32 runs on the tensor cores too, each operand split into two
 * f16 parts (exact to the conformance kit's f32 rule), or on plain FFMA kernels where the split
 * kernels' tiles do not fit the GPU (or when asked: `createCudaBackend({ f32: 'ffma' })`). Every
 * head dim from 1 to 256. Inputs may be host tensors (copied for you, results copied back) or
 * this backend's device tensors (results stay on the device).
 */
import {
  allocHost,
  bytesPerElement,
  isDeviceIndexTensor,
  type DeviceIndexTensor,
  type IndexData,
  type KVCacheOptions,
  type KVCacheProblem,
  checkHostData,
  describeBackward,
  optionSupport,
  describeProblem,
  FAError,
  isDeviceTensor,
  isHostTensor,
  numel,
  type AttentionBackend,
  type AttentionOptions,
  type AttentionProblem,
  type BackwardResult,
  type DeviceTensor,
  type DType,
  type FAErrorCode,
  type ForwardResult,
  type HostTensor,
  type Support,
  type Tensor,
} from '@fa/core';
import { CudaIndexTensor, cudaForwardWithKVCache, cudaUploadIndex, cudaWriteIndex, type KvEngine } from './kvcache.js';
import { CudaStream } from './stream.js';
import { loadNative, type NativeAttnSpec, type NativeBuffer, type NativeContext, type NativeF32Path, type NativeProbe } from './native.js';

const CODES = new Set<FAErrorCode>(['E_SHAPE', 'E_DTYPE', 'E_ARG', 'E_UNSUPPORTED', 'E_TOO_LARGE', 'E_OOM', 'E_DEVICE', 'E_IO']);

/** Turns an error from the addon (an Error with a `code`) into an FAError. */
export function toFAError(e: unknown): FAError {
  if (e instanceof FAError) return e;
  const code = (e as { code?: unknown } | null)?.code;
  const msg = e instanceof Error ? e.message : String(e);
  return new FAError(typeof code === 'string' && CODES.has(code as FAErrorCode) ? (code as FAErrorCode) : 'E_DEVICE', `cuda: ${msg}`, { cause: e });
}

/** A tensor in CUDA device memory, owned by one CudaBackend. */
export class CudaTensor implements DeviceTensor {
  readonly kind = 'device' as const;
  readonly backend = 'cuda';
  readonly shape: readonly number[];
  constructor(
    readonly dtype: DType,
    shape: readonly number[],
    readonly handle: NativeBuffer,
    /** @internal */ readonly owner: CudaBackend,
  ) {
    this.shape = Object.freeze([...shape]);
  }
  get disposed(): boolean {
    return this.handle.disposed;
  }
}

/** The device buffers of an attention call: inputs, out and LSE. */
export interface AttnBuffers {
  q: NativeBuffer;
  k: NativeBuffer;
  v: NativeBuffer;
  out: NativeBuffer;
  lse: NativeBuffer;
}
/** A backward's further buffers. */
export interface GradBuffers {
  dout: NativeBuffer;
  dq: NativeBuffer;
  dk: NativeBuffer;
  dv: NativeBuffer;
}

const bytesOf = (dtype: DType, shape: readonly number[]) => numel(shape) * bytesPerElement(dtype);

export interface CudaBackendOptions {
  /** CUDA device index (default 0). */
  device?: number;
  /**
   * Kernels for f32 problems: 'auto' (default) the split tensor-core kernels where their tiles fit
   * the GPU's shared memory, else FFMA; 'tensor-cores' always the split kernels (supports()
   * declines where they do not fit); 'ffma' always the plain float32 FFMA kernels. Same results
   * to the f32 rule either way; only speed differs.
   */
  f32?: NativeF32Path;
  /**
   * Run on a caller's CUDA stream (a `cudaStream_t` as a bigint, of this device; it must outlive
   * the backend, which never destroys it). Every call is then ordered with the caller's own work
   * on that stream. The handle must be a live stream: one on another device is refused, but a
   * number that is no stream at all cannot be detected (the CUDA runtime dereferences it).
   * Default: a stream of the backend's own.
   */
  stream?: bigint;
}

/** Where a CUDA tensor's bytes are, for another addon on the same device (exportPointer). */
export interface ExportedPointer {
  /** The device address: valid until the tensor is disposed. */
  readonly address: bigint;
  readonly bytes: number;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** CUDA device index. */
  readonly device: number;
  /** The stream the backend's work on it is queued on (`cudaStream_t`): wait on it before reading. */
  readonly stream: bigint;
}

/** A wrapped address must be this aligned (what cudaMalloc gives; the kernels' TMA and vector loads need 16). */
export const WRAP_ALIGNMENT = 256;

const F32_PATHS: readonly NativeF32Path[] = ['auto', 'tensor-cores', 'ffma'];

/**
 * 'auto' sends f32 problems with more keys than this to the FFMA kernels. The split
 * tensor-core kernels' error grows with the number of keys a row sums over (measured on the
 * H200, worst of 7 sampled rows against float64, D 128, Gaussian inputs: 7.0e-6 at 8K keys,
 * 1.5e-5 at 12K, 2.1e-5 at 16K, 2.4e-4 at 64K, 3.6e-4 at 100K; FFMA 1.6e-6 to 6.8e-6 at every
 * length). The kit's float32 rule allows 1e-5·‖ref‖ plus its floor u32·‖mag‖, which for such
 * rows grows as √T (1.7e-4 relative at 100K, ~6.9e-5 at 16K): the split kernels meet it with a
 * 3× margin up to 16K keys and fail it at 64K and beyond; the tensor cores' f32 accumulation is
 * the suspect. KERNEL_NOTES.md, "f32 at long rows". 'tensor-cores' still forces the split kernels.
 */
const F32_SPLIT_MAX_KEYS = 16384;

export class CudaBackend implements AttentionBackend {
  readonly name = 'cuda';
  readonly dtypes: readonly DType[] = ['f32', 'f16', 'bf16'];
  readonly device: string;
  readonly probe: NativeProbe;
  /** Which kernels compute f32 problems (CudaBackendOptions.f32). */
  readonly f32Path: NativeF32Path;
  #ctx: NativeContext;
  readonly #smemNeeds = new Map<string, ReturnType<NativeContext['smemNeeds']>>();
  #disposed = false;
  /** What kvcache.ts uses of this backend: made once, not on every decode step. */
  readonly #kv: KvEngine;

  constructor(
    ctx: NativeContext,
    probe: NativeProbe,
    options: Pick<CudaBackendOptions, 'f32'> = {},
    /** The CUDA device index the context runs on (NCCL communicators need it). */
    readonly deviceIndex = 0,
  ) {
    this.#ctx = ctx;
    this.probe = probe;
    this.device = ctx.device;
    this.f32Path = options.f32 ?? 'auto';
    this.#kv = {
      owner: this,
      ctx,
      supportsKVCache: (p) => this.supportsKVCache(p),
      dev: (t, what, temps) => this.#dev(t, what, temps),
      alloc: (bytes, keep) => this.#alloc(bytes, keep),
      wrap: (dtype, shape, buf) => new CudaTensor(dtype, shape, buf, this),
      read: (t) => this.read(t),
      fail: toFAError,
    };
  }

  #stream: CudaStream | undefined;

  /**
   * Stream-ordered calls (core's stream.ts contract): outputs at once, work queued in call order
   * on this backend's CUDA stream, only read and sync wait.
   */
  get stream(): CudaStream {
    this.#live();
    return (this.#stream ??= new CudaStream({
      ...this.#kv,
      backend: this,
      check: (p) => this.#check(p),
      spec: (p, b, g) => this.#spec(p, b, g),
      own: (t, what) => this.#own(t, what),
    }));
  }

  /** The native context (stream); for benchmarks and tests. */
  get context(): NativeContext {
    return this.#ctx;
  }

  supports(p: AttentionProblem): Support {
    const common = commonSupport(p);
    if (!common.ok) return common;
    if (p.totalQ > 2 ** 31 - 1 || p.totalK > 2 ** 31 - 1) return { ok: false, reason: 'more than 2^31-1 tokens' };
    return this.#fitsSharedMemory(p);
  }

  /**
   * A problem is supported in both directions or not at all (the problem does not say which one
   * will run), so a head dim whose forward or backward kernel needs more shared memory per block
   * than this GPU offers is declined with both numbers.
   */
  #fitsSharedMemory(p: AttentionProblem): Support {
    // (a native call that sat in every forward/backward: the needs depend only on these two here)
    const key = `${p.d}/${p.dtype}`;
    let n = this.#smemNeeds.get(key);
    if (n === undefined) this.#smemNeeds.set(key, (n = this.#ctx.smemNeeds(p.d, p.dtype, this.f32Path)));
    if (n.limit <= 0) return { ok: true };
    const bwd = p.deterministic ? n.bwdDeterministic : n.bwd;
    const kb = (x: number) => `${(x / 1024).toFixed(1)} KiB`;
    for (const [what, need] of [['forward', n.fwd], [p.deterministic ? 'deterministic backward' : 'backward', bwd]] as const) {
      if (need > n.limit) {
        return { ok: false, reason: `head dim ${p.d}: the ${what} kernel needs ${kb(need)} of shared memory per block; ${this.device} allows ${kb(n.limit)}` };
      }
    }
    return { ok: true };
  }

  #live(): void {
    if (this.#disposed) throw new FAError('E_DEVICE', 'this CUDA backend was disposed; create a new one');
  }

  #own(t: Tensor, what: string): CudaTensor {
    if (!(t instanceof CudaTensor) || t.owner !== this) {
      throw new FAError('E_ARG', `${what} is a device tensor of another backend (${(t as DeviceTensor).backend}); read it to the host first`);
    }
    if (t.disposed) throw new FAError('E_ARG', `${what} is a device tensor that was already disposed`);
    return t;
  }

  #alloc(bytes: number, keep: NativeBuffer[]): NativeBuffer {
    try {
      const b = this.#ctx.alloc(bytes);
      keep.push(b);
      return b;
    } catch (e) {
      throw toFAError(e);
    }
  }

  /** The device buffer of t, uploading a host tensor into a temporary (pushed on `temps`). */
  async #dev(t: Tensor, what: string, temps: NativeBuffer[]): Promise<NativeBuffer> {
    if (isDeviceTensor(t)) return this.#own(t, what).handle;
    const h = t as HostTensor;
    const b = this.#alloc(h.data.byteLength, temps);
    await this.#ctx.upload(b, h.data);
    return b;
  }

  /**
   * The device buffers of ts (as #dev), in order. Synchronous when every tensor is already on
   * this device: an attention call on device tensors then reaches the binding without yielding
   * to the event loop's microtasks, so its kernels are queued (binding.cc, Op::Start) before
   * anything else runs.
   */
  #devAll(ts: readonly (readonly [Tensor, string])[], temps: NativeBuffer[]): NativeBuffer[] | Promise<NativeBuffer[]> {
    if (ts.every(([t]) => isDeviceTensor(t))) return ts.map(([t, what]) => this.#own(t, what).handle);
    return (async () => {
      const r: NativeBuffer[] = [];
      for (const [t, what] of ts) r.push(await this.#dev(t, what, temps));
      return r;
    })();
  }

  // ---- KV cache (issue 12): the kernels are csrc/fa_kvcache.cuh, the call is kvcache.ts ----
  supportsKVCache(p: KVCacheProblem): Support {
    const common = commonSupport(p);
    if (!common.ok) return common;
    if (p.batch * p.tq * p.h > 2 ** 31 - 1 || p.batch * p.tnew * p.hkv > 2 ** 31 - 1) return { ok: false, reason: 'more than 2^31-1 query rows (B·Tq·H) or appended rows (B·Tnew·Hkv)' };
    if (p.capacity > 2 ** 31 - 1) return { ok: false, reason: 'a sequence capacity (maxBlocksPerSeq·blockSize) of 2^31 tokens or more' };
    const n = this.#ctx.smemNeeds(p.d, p.dtype);
    if (n.limit > 0 && n.kv > n.limit) {
      return { ok: false, reason: `head dim ${p.d}: the KV-cache kernel needs ${(n.kv / 1024).toFixed(1)} KiB of shared memory per block; ${this.device} allows ${(n.limit / 1024).toFixed(1)} KiB` };
    }
    return { ok: true };
  }


  async forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
    this.#live();
    return cudaForwardWithKVCache(this.#kv, q, kCache, vCache, opts);
  }

  async uploadIndex(data: IndexData, shape?: readonly number[]): Promise<DeviceIndexTensor> {
    this.#live();
    return cudaUploadIndex(this.#kv, data, shape);
  }

  async writeIndex(t: DeviceIndexTensor, data: IndexData, offset = 0): Promise<void> {
    this.#live();
    return cudaWriteIndex(this.#kv, t, data, offset);
  }
  // ---- end KV cache ----

  /**
   * A caller's device memory as a tensor, without a copy (another addon's buffer): an input of
   * every call, and a KV cache that calls write in place. `address` (a bigint) must be aligned to
   * WRAP_ALIGNMENT and, with the tensor's bytes, lie inside one allocation on this backend's
   * device (the binding asks the driver); anything else is a one-line FAError and nothing is
   * queued. The caller keeps ownership: disposeTensor forgets the memory, never frees it, and the
   * memory must outlive the calls that use it (they run in stream order: sync() before freeing).
   */
  wrapPointer(address: bigint, opts: { dtype: DType; shape: readonly number[] }): Tensor {
    this.#live();
    if (typeof address !== 'bigint') throw new FAError('E_ARG', `wrapPointer: address must be a bigint, got ${typeof address}`);
    if (typeof opts !== 'object' || opts === null) throw new FAError('E_ARG', 'wrapPointer: options { dtype, shape } are required');
    if (!this.dtypes.includes(opts.dtype)) throw new FAError('E_DTYPE', `wrapPointer: dtype must be one of ${this.dtypes.join(', ')}, got ${String(opts.dtype)}`);
    if (!Array.isArray(opts.shape) || !opts.shape.every((x) => Number.isSafeInteger(x) && x >= 0)) {
      throw new FAError('E_SHAPE', `wrapPointer: shape must be an array of non-negative integers, got ${JSON.stringify(opts.shape)}`);
    }
    if (address % BigInt(WRAP_ALIGNMENT) !== 0n) throw new FAError('E_ARG', `wrapPointer: address 0x${address.toString(16)} is not a multiple of ${WRAP_ALIGNMENT} bytes`);
    let b: NativeBuffer;
    try {
      b = this.#ctx.wrap(address, bytesOf(opts.dtype, opts.shape));
    } catch (e) {
      throw toFAError(e);
    }
    return new CudaTensor(opts.dtype, opts.shape, b, this);
  }

  /**
   * The device address of one of this backend's tensors (its own or a wrapped one), for another
   * addon on the same device: valid until the tensor is disposed. The backend's work runs on
   * `stream`, in issue order: another addon's work queued on that stream before one of our calls
   * is issued runs before it (no sync needed). The other way, our call is surely on the stream once
   * its promise settled (awaited calls), after `synchronize()`, or after a `read()` of one of its
   * outputs; a stream-ordered call (`backend.stream`) may still wait in the binding's queue (a
   * worker thread) when it returns, so another addon's work that reads its outputs goes after one
   * of those.
   */
  exportPointer(t: Tensor): ExportedPointer {
    this.#live();
    const c = this.#own(t, 'exportPointer: the tensor');
    return { address: c.handle.address, bytes: c.handle.bytes, dtype: c.dtype, shape: c.shape, device: this.deviceIndex, stream: this.#ctx.stream };
  }

  /** The backend's cudaStream_t as a bigint (the caller's, with the `stream` option). */
  get streamHandle(): bigint {
    this.#live();
    return this.#ctx.stream;
  }

  async upload(t: HostTensor): Promise<Tensor> {
    this.#live();
    if (!isHostTensor(t)) throw new FAError('E_ARG', 'upload() takes a host tensor');
    checkHostData(t.data, t.shape, t.dtype, 'upload');
    const keep: NativeBuffer[] = [];
    const b = this.#alloc(bytesOf(t.dtype, t.shape), keep);
    try {
      await this.#ctx.upload(b, t.data);
    } catch (e) {
      b.dispose();
      throw toFAError(e);
    }
    return new CudaTensor(t.dtype, t.shape, b, this);
  }

  async read(t: Tensor): Promise<HostTensor> {
    this.#live();
    if (isHostTensor(t)) return t;
    const c = this.#own(t, 'tensor');
    const data = allocHost(c.dtype, numel(c.shape));
    try {
      await this.#ctx.download(c.handle, data);
    } catch (e) {
      throw toFAError(e);
    }
    return { kind: 'host', dtype: c.dtype, shape: [...c.shape], data };
  }

  disposeTensor(t: Tensor | DeviceIndexTensor): void {
    if (isHostTensor(t)) return;
    if (isDeviceIndexTensor(t)) {
      if (!(t instanceof CudaIndexTensor) || t.owner !== this) throw new FAError('E_ARG', 'disposeTensor: the index tensor belongs to another backend');
      t.handle.dispose();
      return;
    }
    if (!(t instanceof CudaTensor) || t.owner !== this) throw new FAError('E_ARG', 'disposeTensor: the tensor belongs to another backend');
    t.handle.dispose();
  }

  // (one object literal with every field, no spread: a spread copy cost ~8 µs a call in the
  // binding's property reads, bench/host-cost.mjs)
  #spec(p: AttentionProblem, b: AttnBuffers, g?: GradBuffers): NativeAttnSpec {
    return {
      dtype: p.dtype,
      f32Path: this.f32Path === 'auto' && p.dtype === 'f32' && p.tk > F32_SPLIT_MAX_KEYS ? 'ffma' : this.f32Path,
      B: p.batch,
      H: p.h,
      Hkv: p.hkv,
      d: p.d,
      totalQ: p.totalQ,
      totalK: p.totalK,
      varlen: p.varlen,
      cuSeqlensQ: p.cuSeqlensQ,
      cuSeqlensK: p.cuSeqlensK,
      alibi: p.alibi ?? null,
      scale: p.scale,
      softcap: p.softcap,
      windowLeft: p.windowLeft,
      windowRight: p.windowRight,
      deterministic: p.deterministic,
      q: b.q,
      k: b.k,
      v: b.v,
      out: b.out,
      lse: b.lse,
      dout: g?.dout,
      dq: g?.dq,
      dk: g?.dk,
      dv: g?.dv,
    };
  }

  #check(p: AttentionProblem): void {
    const s = this.supports(p);
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `cuda: ${s.reason}`);
  }

  async forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): Promise<ForwardResult> {
    this.#live();
    const p = describeProblem(q, k, v, opts);
    this.#check(p);
    const onDevice = isDeviceTensor(q);
    const temps: NativeBuffer[] = [];
    const outs: NativeBuffer[] = [];
    try {
      const bufs = this.#devAll([[q, 'q'], [k, 'k'], [v, 'v']], temps);
      const [bq, bk, bv] = Array.isArray(bufs) ? bufs : await bufs;
      const out = this.#alloc(bytesOf(p.dtype, p.qShape), outs);
      const lse = this.#alloc(numel(p.lseShape) * 4, outs);
      if (p.batch > 0 && p.totalQ > 0) await this.#ctx.forward(this.#spec(p, { q: bq, k: bk, v: bv, out, lse }));
      const tOut = new CudaTensor(p.dtype, p.qShape, out, this);
      const tLse = new CudaTensor('f32', p.lseShape, lse, this);
      if (onDevice) {
        outs.length = 0;
        return { out: tOut, lse: tLse };
      }
      return { out: await this.read(tOut), lse: await this.read(tLse) };
    } catch (e) {
      throw toFAError(e);
    } finally {
      for (const b of temps) b.dispose();
      for (const b of outs) b.dispose();
    }
  }

  async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
    this.#live();
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    this.#check(p);
    const onDevice = isDeviceTensor(q);
    const temps: NativeBuffer[] = [];
    const outs: NativeBuffer[] = [];
    try {
      const bufs = this.#devAll([[q, 'q'], [k, 'k'], [v, 'v'], [out, 'out'], [dOut, 'dOut'], [lse, 'lse']], temps);
      const [bq, bk, bv, bo, bdo, bl] = Array.isArray(bufs) ? bufs : await bufs;
      const dq = this.#alloc(bytesOf(p.dtype, p.qShape), outs);
      const dk = this.#alloc(bytesOf(p.dtype, p.kShape), outs);
      const dv = this.#alloc(bytesOf(p.dtype, p.kShape), outs);
      if (p.batch > 0 && (p.totalQ > 0 || p.totalK > 0)) {
        await this.#ctx.backward(this.#spec(p, { q: bq, k: bk, v: bv, out: bo, lse: bl }, { dout: bdo, dq, dk, dv }));
      }
      const r = {
        dq: new CudaTensor(p.dtype, p.qShape, dq, this),
        dk: new CudaTensor(p.dtype, p.kShape, dk, this),
        dv: new CudaTensor(p.dtype, p.kShape, dv, this),
      };
      if (onDevice) {
        outs.length = 0;
        return r;
      }
      return { dq: await this.read(r.dq), dk: await this.read(r.dk), dv: await this.read(r.dv) };
    } catch (e) {
      throw toFAError(e);
    } finally {
      for (const b of temps) b.dispose();
      for (const b of outs) b.dispose();
    }
  }

  /** Free and total device memory in bytes (cudaMemGetInfo). */
  memInfo(): { free: number; total: number } {
    this.#live();
    return this.#ctx.memInfo();
  }

  async synchronize(): Promise<void> {
    this.#live();
    await this.#ctx.synchronize().catch((e: unknown) => {
      throw toFAError(e);
    });
  }

  async dispose(): Promise<void> {
    if (this.#disposed) return;
    await this.#ctx.synchronize().catch(() => undefined);
    this.#disposed = true;
    this.#ctx.dispose();
  }
}

const cudaVersion = (v: number) => `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`;

/**
 * Why the probe failed, in terms a person can act on: cudaGetDeviceCount says "driver version is
 * insufficient" both when no driver is installed (cudaDriverGetVersion gives 0) and when it is
 * older than the runtime the addon links statically.
 */
export function probeReason(p: NativeProbe): string {
  const why = p.reason ?? 'unknown reason';
  if (p.driver === 0) return `no NVIDIA driver found (${why})`;
  if (p.runtime > 0 && p.driver < p.runtime) {
    return `the NVIDIA driver supports CUDA ${cudaVersion(p.driver)}; this addon was built with CUDA ${cudaVersion(p.runtime)} and needs a driver for it (or build it with your CUDA toolkit: npm rebuild @fa/cuda --build-from-source) (${why})`;
  }
  return why;
}

/** The rules both supports() and supportsKVCache() apply: head dim, heads and sequences. */
function commonSupport(p: { readonly d: number; readonly vDim?: number; readonly h: number; readonly batch: number; readonly sinks?: Float32Array; readonly kind?: string }): Support {
  const opt = optionSupport(p, 'cuda', {}); // sinks and Dv: the kernels do not read them yet (issue 26)
  if (!opt.ok) return opt;
  if (p.d > 256) return { ok: false, reason: `head dim ${p.d} is not supported on CUDA (at most 256)` };
  if (p.h > 65535 || p.batch > 65535) return { ok: false, reason: 'more than 65535 heads or sequences' };
  return { ok: true };
}

/** Whether a CUDA backend can start here, and if not, why ("unavailable: ..."). */
export function cudaStatus(): { available: true; device: string; probe: NativeProbe } | { available: false; reason: string } {
  const n = loadNative();
  if (!n.ok) return { available: false, reason: n.reason };
  const probe = n.binding.probe();
  if (!probe.ok) return { available: false, reason: `unavailable: ${probeReason(probe)}` };
  return { available: true, device: probe.device ?? 'CUDA device', probe };
}

/** Creates the CUDA backend, or throws FAError(E_DEVICE) saying why it is unavailable. */
export async function createCudaBackend(options: CudaBackendOptions = {}): Promise<CudaBackend> {
  if (options.f32 !== undefined && !F32_PATHS.includes(options.f32)) {
    throw new FAError('E_ARG', `createCudaBackend: f32 must be one of ${F32_PATHS.map((x) => `'${x}'`).join(', ')}, got ${JSON.stringify(options.f32)}`);
  }
  if (options.stream !== undefined && typeof options.stream !== 'bigint') throw new FAError('E_ARG', `createCudaBackend: stream must be a bigint (a cudaStream_t), got ${typeof options.stream}`);
  const n = loadNative();
  if (!n.ok) throw new FAError('E_DEVICE', n.reason);
  const probe = n.binding.probe();
  if (!probe.ok) throw new FAError('E_DEVICE', `unavailable: ${probeReason(probe)}`);
  let ctx: NativeContext;
  try {
    ctx = new n.binding.Context(options.stream === undefined ? { device: options.device ?? 0 } : { device: options.device ?? 0, stream: options.stream });
  } catch (e) {
    throw toFAError(e);
  }
  return new CudaBackend(ctx, probe, { f32: options.f32 }, options.device ?? 0);
}
