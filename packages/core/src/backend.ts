/**
 * The one interface every engine implements. The registry that starts engines and picks one is
 * registry.ts; choosing by problem is choose.ts.
 */
import type { DType } from './dtype.js';
import type { AttentionOptions, AttentionProblem } from './problem.js';
import type { DeviceIndexTensor, IndexData, KVCacheOptions, KVCacheProblem } from './kvcache.js';
import type { HostTensor, Tensor } from './tensor.js';
import type { StreamCalls } from './stream.js';
import type { HostModelOps } from './ops/model-ops.js';

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
  /** With sinks: dsink_h = −Σ_rows e^(s_h − LSE)·rowsum(dO∘O), f32 [H] (a device tensor when q is one). */
  readonly dsinks?: Tensor;
}

export interface AttentionBackend {
  readonly name: string;
  /** What computes: "NVIDIA H200", "SwiftShader", "CPU ×2". */
  readonly device: string;
  /** Dtypes the engine accepts. Arithmetic is float32 or wider in every engine. */
  readonly dtypes: readonly DType[];
  /**
   * The model ops this engine runs (ops/model-ops.ts; so far the matrix product, on host memory):
   * what @fa/autograd computes a model's products with when the model names this engine.
   * Absent: the engine runs attention only.
   */
  readonly modelOps?: HostModelOps;
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
  /**
   * The engine's own stream-ordered calls (stream.ts), where it has them; `streamOf(backend)`
   * gives every engine's, a queue over the calls above where this is absent.
   */
  readonly stream?: StreamCalls;
}
