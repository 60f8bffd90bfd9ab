/**
 * The CUDA engine's stream-ordered calls (core's stream.ts contract): each call allocates its
 * outputs, hands the binding its work (which queues it in issue order on the context's one
 * stream, on the calling thread when the turn is free: binding.cc, Op::Start) and returns the
 * output tensors at once. Nothing here waits for the GPU; `read` and `sync` do.
 *
 * A call whose operation fails on the GPU side (its promise rejects) becomes the stream's
 * unreported failure: calls made after it is known are skipped, its outputs stay failed, and the
 * next read or sync rejects with it, naming the call. Operations settle in issue order, so the
 * failure a read or sync reports is the earliest one before it.
 */
import {
  checkIndexUpload,
  checkIndexWrite,
  describeBackward,
  describeKVCacheProblem,
  describeProblem,
  FAError,
  isDeviceTensor,
  isFAError,
  isHostTensor,
  numel,
  bytesPerElement,
  type AttentionOptions,
  type BackwardResult,
  type DeviceIndexTensor,
  type ForwardResult,
  type HostTensor,
  type IndexData,
  type KVCacheOptions,
  type StreamCalls,
  type Tensor,
} from '@fa/core';
import type { CudaBackend, CudaTensor } from './backend.js';
import { CudaIndexTensor, indexBuffer, kvSpec, type KvEngine } from './kvcache.js';
import type { NativeAttnSpec, NativeBuffer } from './native.js';
import type { AttnBuffers, GradBuffers } from './backend.js';

/** What the stream needs of its CudaBackend (its private parts, handed over once). */
export interface StreamEngine extends KvEngine {
  readonly backend: CudaBackend;
  /** Throws FAError E_UNSUPPORTED when the engine declines the problem. */
  check(p: ReturnType<typeof describeProblem>): void;
  /** The binding's spec of a call over these buffers (a backward's with `g`). */
  spec(p: ReturnType<typeof describeProblem>, b: AttnBuffers, g?: GradBuffers): NativeAttnSpec;
  /** The buffer of one of this backend's live device tensors, or an FAError E_ARG. */
  own(t: Tensor, what: string): CudaTensor;
}

const message = (e: unknown) => (e instanceof Error ? e.message : String(e));

/**
 * FA_CUDA_STREAM_INLINE=1: stream calls ask the binding to finish on the calling thread when
 * nothing before them is unfinished (Op::StartNow: no promise, no worker hop, no event for dense
 * calls; KV-cache calls report a bad device index at the next sync or read). 11.4 / 13-16 µs a
 * dense / KV call against 23 in a dry run on the 2-core CI machine; off by default until it has
 * been measured and checked on a GPU (KERNEL_NOTES "Host cost").
 */
const INLINE = ((globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.FA_CUDA_STREAM_INLINE ?? '') === '1';

export class CudaStream implements StreamCalls {
  #calls = 0;
  #failure: FAError | undefined;
  /** Outputs of failed or skipped calls, and why. */
  readonly #failed = new WeakMap<NativeBuffer, FAError>();

  readonly #e: StreamEngine;

  constructor(engine: StreamEngine) {
    this.#e = engine;
  }

  get backend(): CudaBackend {
    return this.#e.backend;
  }

  #name(kind: string): string {
    return `${kind} (call ${++this.#calls})`;
  }

  /** The device buffer of an input: this backend's tensor, or a host tensor uploaded now (in stream order). */
  #input(t: Tensor, what: string, temps: NativeBuffer[]): NativeBuffer {
    if (isHostTensor(t)) {
      const b = this.#e.alloc(t.data.byteLength, temps);
      this.#watch(`upload of ${what}`, this.#e.ctx.upload(b, t.data), []);
      return b;
    }
    if (!isDeviceTensor(t)) throw new FAError('E_ARG', `${what} must be a tensor`);
    return this.#e.own(t, what).handle;
  }

  /** Why a call cannot run: an unreported failure, or an input that a failed call made. */
  #blocked(what: string, inputs: readonly NativeBuffer[], names: readonly string[]): FAError | undefined {
    if (this.#failure) return new FAError(this.#failure.code, `${what} did not run: ${this.#failure.message}`, { cause: this.#failure });
    for (let i = 0; i < inputs.length; i++) {
      const f = this.#failed.get(inputs[i]);
      if (f) return new FAError(f.code, `${what} failed: ${names[i]} is an output of a call that failed: ${f.message}`, { cause: f });
    }
    return undefined;
  }

  /** Records the rejection of an issued operation as the stream's failure, and fails its outputs. */
  #watch(what: string, op: Promise<unknown>, outs: readonly NativeBuffer[]): void {
    op.catch((e: unknown) => {
      const f = this.#e.fail(e);
      const err = new FAError(isFAError(f) ? f.code : 'E_DEVICE', `${what} failed: ${message(f)}`, { cause: f });
      this.#failure ??= err;
      for (const o of outs) this.#failed.set(o, err);
    });
  }

  /** Runs `issue` unless the call is blocked; a blocked call's outputs are failed, and its failure becomes the stream's. */
  #call(what: string, inputs: readonly NativeBuffer[], names: readonly string[], outs: readonly NativeBuffer[], issue: () => Promise<unknown> | undefined): void {
    const blocked = this.#blocked(what, inputs, names);
    if (blocked) {
      this.#failure ??= blocked;
      for (const o of outs) this.#failed.set(o, blocked);
      return;
    }
    let op: Promise<unknown> | undefined;
    try {
      op = issue();
    } catch (e) {
      throw this.#e.fail(e); // (the binding validates before it queues anything: an argument error)
    }
    // undefined: the binding queued the work on this thread and needs nothing more (Op::StartNow)
    if (op) this.#watch(what, op, outs);
  }

  #freeing(temps: NativeBuffer[]): void {
    for (const b of temps) b.dispose(); // (freed once the operations holding them finish: binding.cc Buffer::Release)
  }

  forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): ForwardResult {
    const p = describeProblem(q, k, v, opts);
    this.#e.check(p);
    const temps: NativeBuffer[] = [], outs: NativeBuffer[] = [];
    try {
      const [bq, bk, bv] = [this.#input(q, 'q', temps), this.#input(k, 'k', temps), this.#input(v, 'v', temps)];
      const out = this.#e.alloc(bytesPerElement(p.dtype) * numel(p.qShape), outs), lse = this.#e.alloc(4 * numel(p.lseShape), outs);
      const what = this.#name('forward');
      if (p.batch > 0 && p.totalQ > 0) this.#call(what, [bq, bk, bv], ['q', 'k', 'v'], outs, () => this.#e.ctx.forward(this.#e.spec(p, { q: bq, k: bk, v: bv, out, lse }), INLINE || undefined));
      const r = { out: this.#e.wrap(p.dtype, p.qShape, out), lse: this.#e.wrap('f32', p.lseShape, lse) };
      outs.length = 0;
      return r;
    } finally {
      this.#freeing(temps);
      this.#freeing(outs);
    }
  }

  backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): BackwardResult {
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    this.#e.check(p);
    const temps: NativeBuffer[] = [], outs: NativeBuffer[] = [];
    try {
      const names = ['q', 'k', 'v', 'out', 'dOut', 'lse'];
      const ins = [q, k, v, out, dOut, lse].map((t, i) => this.#input(t, names[i], temps));
      const [bq, bk, bv, bo, bdo, bl] = ins;
      const nq = bytesPerElement(p.dtype) * numel(p.qShape), nk = bytesPerElement(p.dtype) * numel(p.kShape);
      const dq = this.#e.alloc(nq, outs), dk = this.#e.alloc(nk, outs), dv = this.#e.alloc(nk, outs);
      const what = this.#name('backward');
      if (p.batch > 0 && (p.totalQ > 0 || p.totalK > 0)) {
        this.#call(what, ins, names, outs, () => this.#e.ctx.backward(this.#e.spec(p, { q: bq, k: bk, v: bv, out: bo, lse: bl }, { dout: bdo, dq, dk, dv }), INLINE || undefined));
      }
      const r = { dq: this.#e.wrap(p.dtype, p.qShape, dq), dk: this.#e.wrap(p.dtype, p.kShape, dk), dv: this.#e.wrap(p.dtype, p.kShape, dv) };
      outs.length = 0;
      return r;
    } finally {
      this.#freeing(temps);
      this.#freeing(outs);
    }
  }

  forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): ForwardResult {
    const p = describeKVCacheProblem(q, kCache, vCache, opts, 'cuda');
    const sup = this.#e.supportsKVCache(p);
    if (!sup.ok) throw new FAError('E_UNSUPPORTED', `cuda: ${sup.reason}`);
    if (isHostTensor(kCache) || isHostTensor(vCache)) {
      throw new FAError('E_ARG', 'stream-ordered KV-cache calls take caches on the engine (stream.upload them once); host caches are changed in place only by the awaitable call');
    }
    const lensBuf = indexBuffer(this.#e, opts.cacheSeqlens, 'cacheSeqlens');
    const tableBuf = p.paged ? indexBuffer(this.#e, opts.blockTable, 'blockTable') : null;
    const temps: NativeBuffer[] = [], outs: NativeBuffer[] = [];
    try {
      const bq = this.#input(q, 'q', temps), bk = this.#input(kCache, 'kCache', temps), bv = this.#input(vCache, 'vCache', temps);
      const bkn = p.tnew > 0 ? this.#input(opts.kNew!, 'kNew', temps) : null, bvn = p.tnew > 0 ? this.#input(opts.vNew!, 'vNew', temps) : null;
      const out = this.#e.alloc(bytesPerElement(p.dtype) * numel(p.qShape), outs), lse = this.#e.alloc(4 * numel(p.lseShape), outs);
      const what = this.#name('forwardWithKVCache');
      const ins = [bq, bk, bv, ...(bkn && bvn ? [bkn, bvn] : [])];
      // (a failed call leaves the caches' appended rows undefined: they are failed too)
      if (p.batch > 0) this.#call(what, ins, ['q', 'kCache', 'vCache', 'kNew', 'vNew'], [...outs, bk, bv], () => this.#e.ctx.kvForward(kvSpec(p, lensBuf, tableBuf, { q: bq, kCache: bk, vCache: bv, kNew: bkn, vNew: bvn, out, lse }, what), INLINE || undefined));
      const r = { out: this.#e.wrap(p.dtype, p.qShape, out), lse: this.#e.wrap('f32', p.lseShape, lse) };
      outs.length = 0;
      return r;
    } finally {
      this.#freeing(temps);
      this.#freeing(outs);
    }
  }

  upload(t: HostTensor): Tensor {
    if (!isHostTensor(t)) throw new FAError('E_ARG', 'upload() takes a host tensor');
    const keep: NativeBuffer[] = [];
    const b = this.#input(t, 'upload', keep);
    return this.#e.wrap(t.dtype, t.shape, b);
  }

  uploadIndex(data: IndexData, shape?: readonly number[]): DeviceIndexTensor {
    const c = checkIndexUpload(data, shape);
    const keep: NativeBuffer[] = [];
    const buf = this.#e.alloc(c.data.byteLength, keep);
    this.#watch(this.#name('uploadIndex'), this.#e.ctx.upload(buf, c.data), [buf]);
    return new CudaIndexTensor(c.shape, buf, c.data.slice(), this.#e.owner);
  }

  writeIndex(t: DeviceIndexTensor, data: IndexData, offset = 0): void {
    const d = checkIndexWrite(t, data, offset, 'cuda');
    if (!(t instanceof CudaIndexTensor) || t.owner !== this.#e.owner) throw new FAError('E_ARG', 'writeIndex: the index tensor belongs to another CUDA backend (or was not made by uploadIndex)');
    const next = t.mirror.slice();
    next.set(d, offset);
    // (the binding copies `next` at the call: the mirror changes now, the device copy in stream order)
    this.#watch(this.#name('writeIndex'), this.#e.ctx.upload(t.handle, next), [t.handle]);
    t.mirror.set(d, offset);
  }

  /** Rejects with the unreported failure, clearing it (the stream runs calls again). */
  #report(): void {
    const f = this.#failure;
    if (f) {
      this.#failure = undefined;
      throw f;
    }
  }

  async read(t: Tensor): Promise<HostTensor> {
    if (isHostTensor(t)) {
      await this.sync();
      return t;
    }
    const c = this.#e.own(t, 'read');
    this.#report();
    const f = this.#failed.get(c.handle);
    if (f) throw new FAError(f.code, `read: the tensor is an output of a call that failed: ${f.message}`, { cause: f });
    const r = this.#e.read(t); // (a download: settles after every call issued before it)
    const settled = await r.then((x) => ({ ok: true as const, x }), (e: unknown) => ({ ok: false as const, e }));
    this.#report();
    if (!settled.ok) throw this.#e.fail(settled.e);
    return settled.x;
  }

  async sync(): Promise<void> {
    this.#report();
    try {
      await this.#e.ctx.synchronize();
    } catch (e) {
      this.#report();
      throw this.#e.fail(e);
    }
    this.#report();
  }

  disposeTensor(t: Tensor | DeviceIndexTensor): void {
    this.#e.backend.disposeTensor(t);
  }
}
