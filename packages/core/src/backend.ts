/**
 * The one interface every engine implements, and the registry that picks an engine.
 * Engines are separate packages that call registerBackend() when imported; the registry creates
 * them lazily, in priority order, and remembers why one could not start.
 */
import { FAError, isFAError } from './errors.js';
import type { DType } from './dtype.js';
import type { AttentionOptions, AttentionProblem } from './problem.js';
import type { DeviceIndexTensor, IndexData, KVCacheOptions, KVCacheProblem } from './kvcache.js';
import type { HostTensor, Tensor } from './tensor.js';

export type Support = { readonly ok: true } | { readonly ok: false; readonly reason: string };

export interface ForwardResult {
  /** Same shape and dtype as q. */
  readonly out: Tensor;
  /** f32, [B, H, Tq] ([H, totalQ] for varlen): natural-log softmax denominators. */
  readonly lse: Tensor;
}

export interface BackwardResult {
  readonly dq: Tensor;
  readonly dk: Tensor;
  readonly dv: Tensor;
}

export interface AttentionBackend {
  readonly name: string;
  /** What computes: "NVIDIA H200", "SwiftShader", "CPU ×2". */
  readonly device: string;
  /** Dtypes the engine accepts. Arithmetic is float32 or wider in every engine. */
  readonly dtypes: readonly DType[];
  /** Whether this engine computes the problem, and if not, why. */
  supports(p: AttentionProblem): Support;
  /**
   * Forward attention. Inputs are host tensors or this backend's device tensors; outputs are
   * device tensors when q is one, host tensors otherwise.
   */
  forward(q: Tensor, k: Tensor, v: Tensor, opts?: AttentionOptions): Promise<ForwardResult>;
  /** Gradients by recomputation from q, k, v, out, dOut and the forward's lse. */
  backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts?: AttentionOptions): Promise<BackwardResult>;
  /** Whether this engine computes the KV-cache call, and if not, why. */
  supportsKVCache(p: KVCacheProblem): Support;
  /**
   * Attention over a KV cache (kvcache.ts; FlashAttention's flash_attn_with_kvcache): appends
   * opts.kNew/vNew into kCache/vCache in place at each sequence's length, then attends. The
   * caches are host tensors (changed in place) or this backend's device tensors (changed in
   * place on the device); lengths and block table are host arrays or this backend's index
   * tensors. A call refused with an FAError has written nothing. Outputs as in forward().
   */
  forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult>;
  /** Copies int32 data (lengths, a block table; shape [n] by default, or [rows, cols]) to the engine. */
  uploadIndex(data: IndexData, shape?: readonly number[]): Promise<DeviceIndexTensor>;
  /**
   * Overwrites entries [offset, offset + data.length) of an index tensor in place (its device
   * copy and its mirror), in order with the calls before and after it: how a decode loop
   * advances its lengths or grows a block table without reading anything back.
   */
  writeIndex(t: DeviceIndexTensor, data: IndexData, offset?: number): Promise<void>;
  /** Copies a host tensor to the engine (the CPU engine returns it as it is). */
  upload(t: HostTensor): Promise<Tensor>;
  /** Copies a tensor back to the host. */
  read(t: Tensor): Promise<HostTensor>;
  /** Frees a tensor or index tensor this backend made; a no-op for host tensors. */
  disposeTensor(t: Tensor | DeviceIndexTensor): void;
  /** Frees everything; the backend is unusable afterwards. */
  dispose(): Promise<void>;
}

export type BackendFactory = () => Promise<AttentionBackend>;

interface Entry {
  name: string;
  priority: number;
  factory: BackendFactory;
  instance?: Promise<AttentionBackend>;
  failure?: string;
}

const registry = new Map<string, Entry>();

/**
 * Registers an engine. Higher priority wins in resolveBackend(). Registering a name again
 * replaces the entry (and forgets a cached instance or failure).
 */
export function registerBackend(name: string, factory: BackendFactory, priority = 0): void {
  registry.set(name, { name, priority, factory });
}

export function unregisterBackend(name: string): void {
  registry.delete(name);
}

export function registeredBackendNames(): string[] {
  return [...registry.values()].sort((a, b) => b.priority - a.priority).map((e) => e.name);
}

/** The reason an engine gave, without a leading "unavailable:" (the registry says that itself). */
function reasonOf(e: unknown): string {
  const msg = isFAError(e) || e instanceof Error ? e.message : String(e);
  return msg.replace(/^unavailable:\s*/i, '');
}

async function instantiate(e: Entry): Promise<AttentionBackend> {
  if (e.failure !== undefined) throw new FAError('E_DEVICE', `backend ${e.name} is unavailable: ${e.failure}`);
  if (!e.instance) {
    e.instance = e.factory().catch((err: unknown) => {
      e.failure = reasonOf(err);
      e.instance = undefined;
      throw new FAError('E_DEVICE', `backend ${e.name} is unavailable: ${e.failure}`, { cause: err });
    });
  }
  return e.instance;
}

/**
 * The backend named, or (with no name, or 'auto') the highest-priority one that starts.
 * An array names candidates in order of preference. Says why each candidate failed.
 */
export async function resolveBackend(preferred?: string | readonly string[]): Promise<AttentionBackend> {
  const auto = preferred === undefined || preferred === 'auto';
  const names = auto ? registeredBackendNames() : typeof preferred === 'string' ? [preferred] : [...preferred];
  if (!auto) {
    for (const n of names) {
      if (!registry.has(n)) throw new FAError('E_ARG', `unknown backend "${n}"; registered: ${registeredBackendNames().join(', ') || 'none'}`);
    }
  }
  const reasons: string[] = [];
  for (const n of names) {
    try {
      return await instantiate(registry.get(n)!);
    } catch (err) {
      reasons.push(`${n}: ${registry.get(n)!.failure ?? reasonOf(err)}`);
    }
  }
  throw new FAError('E_DEVICE', names.length === 0 ? 'no backend is registered (import @fa/core, @fa/webgpu or @fa/cuda)' : `no backend is available (${reasons.join('; ')})`);
}

export interface BackendStatus {
  readonly name: string;
  readonly priority: number;
  readonly available: boolean;
  readonly device?: string;
  readonly reason?: string;
}

/** Every registered backend, tried (lazily, once), with its device or the reason it is unavailable. */
export async function listBackends(): Promise<BackendStatus[]> {
  const out: BackendStatus[] = [];
  for (const n of registeredBackendNames()) {
    const e = registry.get(n)!;
    try {
      const b = await instantiate(e);
      out.push({ name: n, priority: e.priority, available: true, device: b.device });
    } catch (err) {
      out.push({ name: n, priority: e.priority, available: false, reason: e.failure ?? reasonOf(err) });
    }
  }
  return out;
}

/** Disposes every instantiated backend and forgets cached failures (tests, shutdown). */
export async function resetBackends(): Promise<void> {
  for (const e of registry.values()) {
    const inst = e.instance;
    e.instance = undefined;
    e.failure = undefined;
    if (inst) await inst.then((b) => b.dispose(), () => undefined);
  }
}
