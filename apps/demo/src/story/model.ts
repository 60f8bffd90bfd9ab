/**
 * What naive attention needs against what the tiled schedule needs, per head: memory
 * (bytes beyond inputs and outputs) and slow-memory traffic (from @fa/core's IO model).
 */
import { bytesPerElement, ioModel, type DType } from '@fa/core';

/** Memory naive attention materialises for one head of T queries and T keys. */
export interface NaiveMemory {
  readonly T: number;
  /** T² scores S = QKᵀ. */
  readonly entries: number;
  /** Bytes of S in each dtype (P is the same again). */
  readonly scores: { readonly bf16: number; readonly f16: number; readonly f32: number };
  /** Forward extra memory: S and P in `dtype`. */
  readonly forward: number;
  /** Backward extra memory: P kept from the forward, dP and dS, in `dtype`. */
  readonly backward: number;
  /** What storing P for the backward costs (T² elements of `dtype`). */
  readonly storedP: number;
}

export function naiveMemory(T: number, dtype: DType): NaiveMemory {
  const entries = T * T;
  const e = bytesPerElement(dtype);
  return {
    T,
    entries,
    scores: { bf16: 2 * entries, f16: 2 * entries, f32: 4 * entries },
    forward: 2 * entries * e,
    backward: 3 * entries * e,
    storedP: entries * e,
  };
}

/**
 * Extra memory of the tiled schedule for one head, beyond inputs and outputs, as modelled:
 * the per-row statistics the forward keeps (running max m and sum l, float32: 8 bytes a row)
 * plus the tiles (`tileBytes`: on-chip on a GPU, a few hundred kB per thread on a CPU). The
 * backward keeps the LSE (an output of the forward, 4 bytes a row) instead of P, and one
 * float32 δ = rowsum(dO∘O) per row: again O(T).
 */
export function flashExtraModel(T: number, tileBytes = 0): { forward: number; backward: number } {
  return { forward: 8 * T + tileBytes, backward: 8 * T + tileBytes };
}

/** The recompute backward's saved state: the LSE, float32, one per row. */
export function lseBytes(T: number): number {
  return 4 * T;
}

export interface IoPoint {
  readonly T: number;
  readonly naiveBytes: number;
  readonly flashBytes: number;
  readonly naiveIntensity: number;
  readonly flashIntensity: number;
}

/** HBM traffic and arithmetic intensity of naive and tiled (FlashAttention-2 loop order) at each T (one head). */
export function ioSeries(Ts: readonly number[], D: number, dtype: DType, pass: 'forward' | 'backward' = 'forward'): IoPoint[] {
  return Ts.map((T) => {
    const m = ioModel({ batch: 1, heads: 1, tq: T, d: D }, { dtype, schedule: 'fa2' })[pass];
    return { T, naiveBytes: m.naive.traffic.bytes, flashBytes: m.flash.traffic.bytes, naiveIntensity: m.naive.intensity, flashIntensity: m.flash.intensity };
  });
}

/** Powers of two (and the end points) from lo to hi: the x grid of the charts. */
export function tokenGrid(lo: number, hi: number): number[] {
  const out = new Set<number>([lo]);
  for (let t = 2 ** Math.ceil(Math.log2(lo)); t < hi; t *= 2) out.add(t);
  out.add(hi);
  return [...out].sort((a, b) => a - b);
}
