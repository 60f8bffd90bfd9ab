/**
 * The "auto" backend that resolveBackend() returns: every started engine behind the one
 * interface, each call run on the highest-priority engine whose supports() accepts its problem
 * (choose.ts). The same program then runs on any machine: an engine that declines a problem
 * (f32 on a GPU engine without it, a head dim a GPU lacks shared memory for) hands it to the
 * next one, and says so once.
 *
 * KV-cache calls are chosen the same way by supportsKVCache() (an engine without KV-cache
 * kernels hands them to the next one).
 *
 * Device tensors and index tensors stay with the engine that made them: a call on them runs
 * there or fails with E_UNSUPPORTED saying why (moving data between engines behind the
 * caller's back would hide copies the caller chose to avoid).
 */
import { FAError } from './errors.js';
import type { AttentionBackend, BackwardResult, ForwardResult, Support } from './backend.js';
import { askSupports, chooseEngine, fallbackNote, type ChoiceProblem, type EngineCandidate, type Resolution } from './choose.js';
import { DTYPES, type DType } from './dtype.js';
import { describeKVCacheProblem, describeKVCacheProblemShapes, isDeviceIndexTensor, type DeviceIndexTensor, type IndexData, type KVCacheOptions, type KVCacheProblem } from './kvcache.js';
import { describeProblem, type AttentionOptions, type AttentionProblem } from './problem.js';
import { isDeviceTensor, type DeviceTensor, type HostTensor, type Tensor } from './tensor.js';

/** A tensor or index tensor that an engine owns. */
type Owned = DeviceTensor | DeviceIndexTensor;
const isOwned = (t: unknown): t is Owned => isDeviceTensor(t) || isDeviceIndexTensor(t);

/** Whether an engine computes KV-cache calls at all: a one-token decode step in any of its dtypes. */
function takesKVCache(b: AttentionBackend): boolean {
  return b.dtypes.some((dtype) => askSupports(b, describeKVCacheProblemShapes([1, 1, 1, 64], [1, 16, 1, 64], dtype, { cacheSeqlens: [0], newShape: [1, 1, 1, 64] })).ok);
}

export interface AutoBackendOptions {
  /**
   * Told when a call runs on an engine below one that started but declined the call's problem:
   * one line such as "cuda declines this problem (f32 is not computed natively on CUDA; use f16
   * or bf16); running it on webgpu", once per distinct line. Default: console.warn with an
   * "@fa: " prefix, once per process; null: say nothing.
   */
  onFallback?: ((note: string, resolution: Resolution) => void) | null;
}

const warned = new Set<string>();
function warnOnce(note: string): void {
  if (warned.has(note)) return;
  warned.add(note);
  console.warn(`@fa: ${note}`);
}

export class AutoBackend implements AttentionBackend {
  readonly name = 'auto';
  /** The started engines in order, e.g. "cuda: NVIDIA H200, then cpu: CPU ×2". */
  readonly device: string;
  /** Every dtype some started engine accepts. */
  readonly dtypes: readonly DType[];
  readonly #candidates: readonly EngineCandidate[];
  readonly #started: readonly AttentionBackend[];
  readonly #onFallback: ((note: string, r: Resolution) => void) | null;
  readonly #noted = new Set<string>();
  readonly #release: (name: string) => Promise<void>;
  #indexEngine: AttentionBackend | undefined;
  #disposed = false;

  /** `release(name)` lets go of a started engine (the registry owns the instances and disposes one when nothing holds it). */
  constructor(candidates: readonly EngineCandidate[], options: AutoBackendOptions, release: (name: string) => Promise<void>) {
    this.#candidates = Object.freeze([...candidates]);
    this.#started = candidates.flatMap((c) => (c.backend ? [c.backend] : []));
    if (this.#started.length === 0) throw new FAError('E_DEVICE', 'an auto backend needs at least one started engine');
    this.device = this.#started.map((b) => `${b.name}: ${b.device}`).join(', then ');
    this.dtypes = DTYPES.filter((d) => this.#started.some((b) => b.dtypes.includes(d)));
    this.#onFallback = options.onFallback === undefined ? warnOnce : options.onFallback;
    this.#release = release;
  }

  /** The engines this backend chooses from, in order: each started one, or why it did not start. */
  get engines(): readonly EngineCandidate[] {
    return this.#candidates;
  }

  /**
   * The engine a call with these host inputs would run on (a dense problem, or a KV-cache one),
   * and why the ones above it would not.
   */
  resolve(p: ChoiceProblem): Resolution {
    return chooseEngine(p, this.#candidates);
  }

  /**
   * resolve(p).backend, with the fallback note a call would give: the engine to put a call's
   * data on before making it (the KV caches of a decode loop, say; describeKVCacheProblemShapes).
   */
  engineFor(p: ChoiceProblem): AttentionBackend {
    return this.#engineFor({}, () => p);
  }

  supports(p: AttentionProblem): Support {
    return this.#supports(p);
  }

  supportsKVCache(p: KVCacheProblem): Support {
    return this.#supports(p);
  }

  async forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): Promise<ForwardResult> {
    const be = this.#engineFor({ q, k, v }, () => describeProblem(q, k, v, opts));
    return be.forward(q, k, v, opts);
  }

  async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
    const be = this.#engineFor({ q, k, v, out, dOut, lse }, () => describeProblem(q, k, v, opts));
    return be.backward(q, k, v, out, dOut, lse, opts);
  }

  /**
   * On the engine that owns a device cache or index tensor among the inputs, else on the first
   * whose supportsKVCache() accepts the call (noting a fallback).
   */
  async forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
    const o: Partial<KVCacheOptions> = typeof opts === 'object' && opts !== null ? opts : {};
    const inputs: Record<string, unknown> = { q, kCache, vCache, kNew: o.kNew, vNew: o.vNew, cacheSeqlens: o.cacheSeqlens, blockTable: o.blockTable };
    const be = this.#engineFor(inputs, () => describeKVCacheProblem(q, kCache, vCache, opts));
    return be.forwardWithKVCache(q, kCache, vCache, opts);
  }

  /**
   * To the engine that will own the caches: the first started one that computes KV-cache calls
   * (an engine without KV-cache kernels is passed over). uploadIndex knows no dtype or problem;
   * to put caches and index tensors on the engine of one problem, use engineFor(problem).
   */
  async uploadIndex(data: IndexData, shape?: readonly number[]): Promise<DeviceIndexTensor> {
    this.#live();
    this.#indexEngine ??= this.#started.find(takesKVCache) ?? this.#started[0];
    return this.#indexEngine.uploadIndex(data, shape);
  }

  async writeIndex(t: DeviceIndexTensor, data: IndexData, offset?: number): Promise<void> {
    this.#live();
    if (!isDeviceIndexTensor(t)) throw new FAError('E_ARG', 'writeIndex: the target must be an index tensor made with uploadIndex');
    return this.#owner(t, 'the index tensor').writeIndex(t, data, offset);
  }

  /** To the first engine that accepts the dtype (so its calls can run where the data is). */
  async upload(t: HostTensor): Promise<Tensor> {
    this.#live();
    const be = this.#started.find((b) => b.dtypes.includes(t.dtype)) ?? this.#started[0];
    return be.upload(t);
  }

  async read(t: Tensor): Promise<HostTensor> {
    this.#live();
    return isDeviceTensor(t) ? this.#owner(t, 'the tensor').read(t) : (t as HostTensor);
  }

  disposeTensor(t: Tensor | DeviceIndexTensor): void {
    if (isOwned(t)) this.#owner(t, isDeviceIndexTensor(t) ? 'the index tensor' : 'the tensor').disposeTensor(t);
  }

  /**
   * Lets go of the engines it started: the registry disposes each one that no other auto backend
   * holds and no caller got by name, and starts it afresh on the next resolve.
   */
  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const b of this.#started) await this.#release(b.name);
  }

  #live(): void {
    if (this.#disposed) throw new FAError('E_DEVICE', 'this auto backend was disposed; call resolveBackend() again');
  }

  #supports(p: ChoiceProblem): Support {
    try {
      this.resolve(p);
      return { ok: true };
    } catch (e) {
      return { ok: false, reason: e instanceof Error ? e.message : String(e) };
    }
  }

  #owner(t: Owned, what: string): AttentionBackend {
    const be = this.#started.find((b) => b.name === t.backend);
    if (!be) throw new FAError('E_ARG', `${what} is ${isDeviceIndexTensor(t) ? 'an index' : 'a device'} tensor of backend ${t.backend}, which this auto backend does not use (it uses ${this.#started.map((b) => b.name).join(', ')})`);
    return be;
  }

  /**
   * Where device and index inputs live, or the engine chosen for the problem (noting a
   * fallback). Inputs that are neither (host tensors and arrays, undefined) do not count.
   */
  #engineFor(inputs: Record<string, unknown>, problem: () => ChoiceProblem): AttentionBackend {
    this.#live();
    const devices = Object.entries(inputs).filter((e): e is [string, Owned] => isOwned(e[1]));
    if (devices.length > 0) {
      const owners = [...new Set(devices.map(([, t]) => t.backend))];
      if (owners.length > 1) throw new FAError('E_ARG', `the inputs live on different engines (${devices.map(([n, t]) => `${n}: ${t.backend}`).join(', ')}); read them to the host first`);
      const be = this.#owner(devices[0][1], devices[0][0]);
      const s = askSupports(be, problem());
      if (!s.ok) {
        const index = devices.some(([, t]) => isDeviceIndexTensor(t));
        const what = index ? (devices.some(([, t]) => isDeviceTensor(t)) ? 'device and index tensors' : 'index tensors') : 'device tensors';
        throw new FAError('E_UNSUPPORTED', `the inputs are ${what} of ${be.name}, which declines this problem (${s.reason}); pass host ${index ? 'tensors and arrays' : 'tensors'} so that another engine can compute it`);
      }
      return be;
    }
    const r = this.resolve(problem());
    const note = this.#onFallback ? fallbackNote(r) : undefined;
    if (note !== undefined && !this.#noted.has(note)) {
      this.#noted.add(note);
      this.#onFallback!(note, r);
    }
    return r.backend;
  }
}
