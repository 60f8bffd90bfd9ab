/**
 * Stream-ordered calls (DESIGN.md "Stream-ordered calls and other programs' memory"): a call
 * returns its output tensors at once, and the next call may name them without awaiting. Work runs
 * in the order the calls were made; only `read` and `sync` wait.
 *
 * Contract, the same on every engine:
 * - Argument errors (shapes, dtypes, options, index values, a problem the engine declines, a
 *   disposed input) throw at the call as an FAError, and nothing is queued.
 * - A call that fails while it runs (an engine error, a device fault, running out of memory)
 *   fails its outputs, and every call queued after it is skipped until the failure is reported:
 *   the next `read` or `sync` rejects with an FAError naming the failed call ("forward (call 7)"),
 *   and from then on the stream runs calls again. An output of a failed or skipped call stays
 *   failed: a later call that names it fails too, saying which call it came from.
 * - Host tensors given as inputs are copied at the call (changing them afterwards changes
 *   nothing); host KV caches are the exception, written in place when the call runs, as the
 *   awaitable call does.
 * - Index tensors of stream calls come from `stream.uploadIndex` and change through
 *   `stream.writeIndex`; their mirror changes at the call, so each later call is validated against
 *   the values it will read, while the engine's copy changes in stream order.
 *
 * `streamOf(backend)` returns the engine's own stream-ordered calls where it has them
 * (`backend.stream`) and otherwise this file's queue over its awaitable calls: one promise chain
 * a backend, which is how the CPU engines (which compute as the call runs) keep the contract.
 */
import type { AttentionBackend, BackwardResult, ForwardResult } from './backend.js';
import type { DType } from './dtype.js';
import { FAError, isFAError } from './errors.js';
import { checkIndexUpload, checkIndexWrite, describeKVCacheProblem, isDeviceIndexTensor, type DeviceIndexTensor, type IndexData, type IndexInput, type KVCacheOptions } from './kvcache.js';
import { describeBackward, describeProblem, type AttentionOptions } from './problem.js';
import { allocHost, checkHostData, isDeviceTensor, isHostTensor, type DeviceTensor, type HostTensor, type Tensor } from './tensor.js';

/** The stream-ordered calls of one engine. */
export interface StreamCalls {
  /** The engine the calls run on. */
  readonly backend: AttentionBackend;
  forward(q: Tensor, k: Tensor, v: Tensor, opts?: AttentionOptions): ForwardResult;
  backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts?: AttentionOptions): BackwardResult;
  forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): ForwardResult;
  /** The host tensor's data, copied at the call, on the engine. */
  upload(t: HostTensor): Tensor;
  uploadIndex(data: IndexData, shape?: readonly number[]): DeviceIndexTensor;
  /** Overwrites entries of an index tensor of this stream in stream order (its mirror at once). */
  writeIndex(t: DeviceIndexTensor, data: IndexData, offset?: number): void;
  /** The tensor's contents once every call before it has run; rejects with an unreported failure first. */
  read(t: Tensor): Promise<HostTensor>;
  /** Waits for every call made so far; rejects with the first failure not yet reported. */
  sync(): Promise<void>;
  /** Frees a tensor or index tensor once the calls before this one have used it. */
  disposeTensor(t: Tensor | DeviceIndexTensor): void;
}

/** The stream-ordered calls of a backend: its own, or a queue over its awaitable calls. */
export function streamOf(backend: AttentionBackend): StreamCalls {
  if (backend.stream) return backend.stream;
  let s = queues.get(backend);
  if (!s) queues.set(backend, (s = new QueuedStream(backend)));
  return s;
}
const queues = new WeakMap<AttentionBackend, StreamCalls>();

type Settled = { readonly ok: true; readonly value: Tensor } | { readonly ok: false; readonly error: FAError };

/** An output of a queued call: shape and dtype at once, contents when its call has run. */
export class StreamTensor implements DeviceTensor {
  readonly kind = 'device' as const;
  readonly backend: string;
  readonly shape: readonly number[];
  readonly handle: unknown = this;
  #state: Settled | undefined;
  #disposed = false;
  constructor(
    readonly dtype: DType,
    shape: readonly number[],
    /** The call that makes it, for messages: "forward (call 3)". */
    readonly madeBy: string,
    /** @internal */ readonly owner: QueuedStream,
  ) {
    this.backend = `${owner.backend.name} (stream)`;
    this.shape = Object.freeze([...shape]);
  }
  get disposed(): boolean {
    return this.#disposed;
  }
  /** @internal */ markDisposed(): void {
    this.#disposed = true;
  }
  /** @internal */ settle(s: Settled): void {
    this.#state = s;
  }
  /** @internal The engine's tensor, once the call that makes it has run; throws if that call failed. */
  value(what: string): Tensor {
    const s = this.#state;
    if (s === undefined) throw new FAError('E_DEVICE', `${what} (from ${this.madeBy}) was used before its call ran (a stream-order bug)`);
    if (!s.ok) throw new FAError(s.error.code, `${what} is an output of ${this.madeBy}, which failed: ${s.error.message}`, { cause: s.error });
    return s.value;
  }
}

/** An index tensor of a queued stream: the mirror at call time, the engine's copy in stream order. */
class StreamIndexTensor implements DeviceIndexTensor {
  readonly kind = 'index' as const;
  readonly backend: string;
  readonly handle: unknown = this;
  disposed = false;
  real: DeviceIndexTensor | FAError | undefined;
  constructor(
    readonly shape: readonly number[],
    readonly mirror: Int32Array,
    readonly owner: QueuedStream,
  ) {
    this.backend = `${owner.backend.name} (stream)`;
  }
}

const message = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** The engine's awaitable calls behind one promise chain. */
class QueuedStream implements StreamCalls {
  #tail: Promise<void> = Promise.resolve();
  #calls = 0;
  /** The first failure since the last read or sync reported one. */
  #failure: FAError | undefined;

  constructor(readonly backend: AttentionBackend) {}

  /** Runs `body` after every call before it, unless an unreported failure skips it. */
  #queue(what: string, outs: readonly StreamTensor[], body: () => Promise<readonly Tensor[]>): void {
    this.#tail = this.#tail.then(async () => {
      if (this.#failure) {
        const e = new FAError(this.#failure.code, `${what} did not run: ${this.#failure.message}`, { cause: this.#failure });
        for (const o of outs) o.settle({ ok: false, error: e });
        return;
      }
      try {
        const r = await body();
        outs.forEach((o, i) => o.settle({ ok: true, value: r[i] }));
      } catch (e) {
        const err = new FAError(isFAError(e) ? e.code : 'E_DEVICE', `${what} failed: ${message(e)}`, { cause: e });
        this.#failure = err;
        for (const o of outs) o.settle({ ok: false, error: err });
      }
    });
  }

  /** A waiting call (read, sync): settles with the unreported failure first, then with `body`. */
  #wait<T>(body: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#tail = this.#tail.then(async () => {
        const f = this.#failure;
        if (f) {
          this.#failure = undefined;
          reject(f);
          return;
        }
        try {
          resolve(await body());
        } catch (e) {
          reject(isFAError(e) ? e : new FAError('E_DEVICE', message(e), { cause: e }));
        }
      });
    });
  }

  #name(kind: string): string {
    return `${kind} (call ${++this.#calls})`;
  }

  /** Checks an input at the call; returns how to get the engine's tensor when the call runs. */
  #input(t: Tensor, what: string): () => Tensor {
    if (t instanceof StreamTensor) {
      if (t.owner !== this) throw new FAError('E_ARG', `${what} is a stream tensor of another backend (${t.backend}); read it to the host first`);
      if (t.disposed) throw new FAError('E_ARG', `${what} is a stream tensor that was already disposed`);
      return () => t.value(what);
    }
    if (isHostTensor(t)) {
      checkHostData(t.data, t.shape, t.dtype, what);
      const copy = allocHost(t.dtype, t.data.length);
      copy.set(t.data);
      const h: HostTensor = { kind: 'host', dtype: t.dtype, shape: [...t.shape], data: copy };
      return () => h;
    }
    if (isDeviceTensor(t) && t.disposed) throw new FAError('E_ARG', `${what} is a device tensor that was already disposed`);
    return () => t; // the engine's own device tensor (the engine checks it is its own)
  }

  #index(x: IndexInput | undefined, what: string): () => IndexInput | undefined {
    if (x === undefined) return () => undefined;
    if (isDeviceIndexTensor(x)) {
      if (!(x instanceof StreamIndexTensor) || x.owner !== this) {
        throw new FAError('E_ARG', `${what}: stream calls take index tensors made by this stream's uploadIndex (so that their mirror follows stream order)`);
      }
      if (x.disposed) throw new FAError('E_ARG', `${what} is an index tensor that was already disposed`);
      return () => realIndex(x, what);
    }
    const copy = ArrayBuffer.isView(x) ? Int32Array.from(x as Int32Array) : (x as readonly (number | readonly number[])[]).map((r) => (Array.isArray(r) ? [...r] : r));
    return () => copy as IndexInput;
  }

  #out(dtype: DType, shape: readonly number[], what: string): StreamTensor {
    return new StreamTensor(dtype, shape, what, this);
  }

  #declined(s: { ok: boolean; reason?: string }): void {
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `${this.backend.name}: ${s.reason}`);
  }

  forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): ForwardResult {
    const p = describeProblem(q, k, v, opts);
    this.#declined(this.backend.supports(p));
    const ins = [this.#input(q, 'q'), this.#input(k, 'k'), this.#input(v, 'v')];
    const what = this.#name('forward');
    opts = frozenOptions(opts); // (the call runs later: the caller may change its arrays meanwhile)
    const out = this.#out(p.dtype, p.outShape, what), lse = this.#out('f32', p.lseShape, what);
    this.#queue(what, [out, lse], async () => {
      const [a, b, c] = ins.map((f) => f());
      const r = await this.backend.forward(a, b, c, opts);
      return [r.out, r.lse];
    });
    return { out, lse };
  }

  backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): BackwardResult {
    const p = describeBackward(q, k, v, out, dOut, lse, opts);
    this.#declined(this.backend.supports(p));
    const names = ['q', 'k', 'v', 'out', 'dOut', 'lse'];
    const ins = [q, k, v, out, dOut, lse].map((t, i) => this.#input(t, names[i]));
    const what = this.#name('backward');
    const dq = this.#out(p.dtype, p.qShape, what), dk = this.#out(p.dtype, p.kShape, what), dv = this.#out(p.dtype, p.vShape, what);
    opts = frozenOptions(opts);
    const dsinks = p.sinks ? this.#out('f32', [p.h], what) : undefined;
    this.#queue(what, dsinks ? [dq, dk, dv, dsinks] : [dq, dk, dv], async () => {
      const [a, b, c, d, e, f] = ins.map((g) => g());
      const r = await this.backend.backward(a, b, c, d, e, f, opts);
      if (dsinks && !r.dsinks) throw new FAError('E_DEVICE', `${this.backend.name}: backward returned no dsinks for a call with sinks`);
      return dsinks ? [r.dq, r.dk, r.dv, r.dsinks!] : [r.dq, r.dk, r.dv];
    });
    return dsinks ? { dq, dk, dv, dsinks } : { dq, dk, dv };
  }

  forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): ForwardResult {
    // (validated against the stream's mirrors: the values the call will read when it runs)
    const p = describeKVCacheProblem(q, kCache, vCache, opts);
    this.#declined(this.backend.supportsKVCache(p));
    const iq = this.#input(q, 'q');
    const cache = (t: Tensor, what: string) => (isHostTensor(t) ? () => t : this.#input(t, what)); // host caches: in place
    const ik = cache(kCache, 'kCache'), iv = cache(vCache, 'vCache');
    const ikn = opts.kNew ? this.#input(opts.kNew, 'kNew') : undefined, ivn = opts.vNew ? this.#input(opts.vNew, 'vNew') : undefined;
    const lens = this.#index(opts.cacheSeqlens, 'cacheSeqlens'), table = this.#index(opts.blockTable, 'blockTable');
    const frozen = frozenOptions(opts); // (the call runs later: the caller may change its arrays meanwhile)
    const what = this.#name('forwardWithKVCache');
    const out = this.#out(p.dtype, p.qShape, what), lse = this.#out('f32', p.lseShape, what);
    this.#queue(what, [out, lse], async () => {
      const o: KVCacheOptions = { ...frozen, cacheSeqlens: lens()!, blockTable: table(), kNew: ikn?.(), vNew: ivn?.() };
      const r = await this.backend.forwardWithKVCache(iq(), ik(), iv(), o);
      return [r.out, r.lse];
    });
    return { out, lse };
  }

  upload(t: HostTensor): Tensor {
    if (!isHostTensor(t)) throw new FAError('E_ARG', 'upload() takes a host tensor');
    const src = this.#input(t, 'upload');
    const what = this.#name('upload');
    const out = this.#out(t.dtype, t.shape, what);
    this.#queue(what, [out], async () => [await this.backend.upload(src() as HostTensor)]);
    return out;
  }

  uploadIndex(data: IndexData, shape?: readonly number[]): DeviceIndexTensor {
    const c = checkIndexUpload(data, shape);
    const t = new StreamIndexTensor(c.shape, c.data.slice(), this);
    const what = this.#name('uploadIndex');
    this.#queue(what, [], async () => {
      try {
        t.real = await this.backend.uploadIndex(c.data, c.shape);
      } catch (e) {
        t.real = new FAError(isFAError(e) ? e.code : 'E_DEVICE', `${what} failed: ${message(e)}`);
        throw e;
      }
      return [];
    });
    return t;
  }

  writeIndex(t: DeviceIndexTensor, data: IndexData, offset = 0): void {
    if (!(t instanceof StreamIndexTensor) || t.owner !== this) throw new FAError('E_ARG', 'writeIndex: the target must be an index tensor made by this stream\'s uploadIndex');
    const d = checkIndexWrite(t, data, offset, t.backend).slice();
    t.mirror.set(d, offset);
    const what = this.#name('writeIndex');
    this.#queue(what, [], async () => {
      await this.backend.writeIndex(realIndex(t, 'writeIndex target'), d, offset);
      return [];
    });
  }

  read(t: Tensor): Promise<HostTensor> {
    const src = t instanceof StreamTensor || isDeviceTensor(t) ? this.#input(t, 'read') : () => t;
    return this.#wait(() => this.backend.read(src()));
  }

  async sync(): Promise<void> {
    const b = this.backend as AttentionBackend & { synchronize?: () => Promise<void>; sync?: () => Promise<void> };
    return this.#wait(async () => {
      if (typeof b.synchronize === 'function') await b.synchronize();
      else if (typeof b.sync === 'function') await b.sync();
    });
  }

  disposeTensor(t: Tensor | DeviceIndexTensor): void {
    if (isHostTensor(t)) return;
    if (t instanceof StreamIndexTensor && t.owner === this) {
      if (t.disposed) return;
      t.disposed = true;
      const real = () => t.real;
      this.#later(() => {
        const r = real();
        if (r && !(r instanceof FAError)) this.backend.disposeTensor(r);
      });
      return;
    }
    if (t instanceof StreamTensor && t.owner === this) {
      if (t.disposed) return;
      t.markDisposed();
      this.#later(() => this.backend.disposeTensor(t.value('tensor')));
      return;
    }
    this.#later(() => this.backend.disposeTensor(t));
  }

  /** Frees in stream order; a tensor that holds nothing (an output of a failed call) frees nothing. */
  #later(free: () => void): void {
    this.#tail = this.#tail.then(() => {
      try {
        free();
      } catch {
        /* nothing to free */
      }
    });
  }
}

function realIndex(t: StreamIndexTensor, what: string): DeviceIndexTensor {
  if (t.real === undefined) throw new FAError('E_DEVICE', `${what}: the index tensor was used before its upload ran (a stream-order bug)`);
  if (t.real instanceof FAError) throw new FAError(t.real.code, `${what}: its upload failed: ${t.real.message}`);
  return t.real;
}

/** A host tensor with its data copied (a queued call's rotary tables). */
function copyHost(t: HostTensor): HostTensor {
  return { ...t, shape: [...t.shape], data: t.data.slice() as HostTensor['data'] };
}

/**
 * A call's options with their arrays copied, for a call that runs after the caller's code moves
 * on (and may change its arrays meanwhile): dense and KV-cache options alike.
 */
function frozenOptions<O extends AttentionOptions | KVCacheOptions>(o: O): O {
  const a = o as AttentionOptions & KVCacheOptions;
  const host = (t: Tensor | undefined) => (t && isHostTensor(t) ? copyHost(t) : t);
  return {
    ...o,
    ...(a.sinks ? { sinks: Float32Array.from(a.sinks) } : {}),
    ...(a.alibiSlopes ? { alibiSlopes: Float32Array.from(a.alibiSlopes) } : {}),
    ...(a.dropout ? { dropout: { ...a.dropout } } : {}),
    ...(a.cuSeqlensQ ? { cuSeqlensQ: Int32Array.from(a.cuSeqlensQ) } : {}),
    ...(a.cuSeqlensK ? { cuSeqlensK: Int32Array.from(a.cuSeqlensK) } : {}),
    ...(a.cacheLeftpad ? { cacheLeftpad: Int32Array.from(a.cacheLeftpad) } : {}),
    ...(a.cacheBatchIdx ? { cacheBatchIdx: Int32Array.from(a.cacheBatchIdx) } : {}),
    ...(a.rotaryCos ? { rotaryCos: host(a.rotaryCos), rotarySin: host(a.rotarySin) } : {}),
  };
}
