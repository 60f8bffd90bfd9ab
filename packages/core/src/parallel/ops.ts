/**
 * The tensor operations the ring needs besides attention itself, on the engine's own tensors:
 * views, accumulators, the online-softmax merge of partial results, rounding, and the LSE
 * layout change. `hostShardOps` implements them for host tensors (the CPU engine, or any engine
 * fed host tensors); GPU engines implement them on the device (@fa/cuda: cudaShardOps).
 *
 * Row layout: the ring works on packed views — q-like [rows, H, D], LSE [H, rows] (the varlen
 * layout). Accumulators are float32.
 */
import type { DType } from '../dtype.js';
import type { Tensor } from '../tensor.js';

export interface ShardOps {
  /** The same memory under another shape with as many elements; never copies. */
  view(t: Tensor, shape: readonly number[]): Tensor;
  /**
   * A new tensor of `dtype`. With `fill` (f32 only: 0 for accumulators, −Infinity for an empty
   * LSE) every element is set; without it the contents are unspecified (receive buffers).
   */
  alloc(dtype: DType, shape: readonly number[], fill?: number): Promise<Tensor>;
  /** dst ← src (same dtype and element count). */
  copy(dst: Tensor, src: Tensor): Promise<void>;
  /** acc ← acc + x elementwise; acc is f32, x f32 or the problem's dtype. */
  accumulate(acc: Tensor, x: Tensor): Promise<void>;
  /**
   * Merges a partial result over some keys into the running result over others, row by row:
   * out [rows, H, D] f32 and lse [H, rows] f32 become the result over the union of the keys
   * (online-softmax.ts, mergeStates: m = max, weights e^(lse − m), out the weighted mean,
   * lse = m + log Σ weights). A part with lse −∞ (no key) changes nothing; NaN propagates.
   * partOut has the problem's dtype, partLse is f32.
   */
  mergeForward(out: Tensor, lse: Tensor, partOut: Tensor, partLse: Tensor): Promise<void>;
  /** A new tensor: `t` (f32) rounded to `dtype` (round to nearest even). */
  convert(t: Tensor, dtype: DType): Promise<Tensor>;
  /**
   * A new f32 tensor with the LSE in the other layout: [B, H, T] ('packed' → [H, B·T]) or
   * [H, B·T] ('batched' → [B, H, T]). (With B = 1 the layouts coincide; the ring then uses a view.)
   */
  transposeLse(t: Tensor, batch: number, to: 'packed' | 'batched'): Promise<Tensor>;
  /** Frees a tensor the ops or the engine made (never a view of a caller's tensor). */
  dispose(t: Tensor): void;
}
