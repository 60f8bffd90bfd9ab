/**
 * The one interface every engine implements. The registry that starts engines and picks one is
 * registry.ts; choosing by problem is choose.ts.
 */
import type { DType } from './dtype.js';
import type { AttentionOptions, AttentionProblem } from './problem.js';
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
  /** Copies a host tensor to the engine (the CPU engine returns it as it is). */
  upload(t: HostTensor): Promise<Tensor>;
  /** Copies a tensor back to the host. */
  read(t: Tensor): Promise<HostTensor>;
  /** Frees a tensor this backend made; a no-op for host tensors. */
  disposeTensor(t: Tensor): void;
  /** Frees everything; the backend is unusable afterwards. */
  dispose(): Promise<void>;
}
