/** Error of a result against the float64 reference. */
import { decode, type HostTensor } from '@fa/core';

export interface ErrorStats {
  /** ‖x − ref‖₂ / ‖ref‖₂ over entries finite in both (DESIGN.md's float32 policy: ≤ 1e-5). */
  rel: number;
  maxAbs: number;
  /** Entries where one is finite and the other not, or a NaN appears. */
  mismatched: number;
}

export function values(t: HostTensor): Float32Array {
  return t.dtype === 'f32' ? (t.data as Float32Array) : decode(t.dtype, t.data as Uint16Array);
}

export function compare(x: Float32Array, ref: Float64Array): ErrorStats {
  let num = 0;
  let den = 0;
  let maxAbs = 0;
  let mismatched = 0;
  for (let i = 0; i < ref.length; i++) {
    const a = x[i];
    const b = ref[i];
    if (Number.isFinite(a) && Number.isFinite(b)) {
      const d = Math.abs(a - b);
      num += d * d;
      den += b * b;
      if (d > maxAbs) maxAbs = d;
    } else if (!(a === b)) mismatched++;
  }
  return { rel: den > 0 ? Math.sqrt(num / den) : Math.sqrt(num), maxAbs, mismatched };
}
