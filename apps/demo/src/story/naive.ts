/**
 * Naive attention for one head, as a textbook writes it: S = scale·QKᵀ (a T×T float32 array),
 * P = softmax(S) (another), O = PV. Used at small T to *measure* what materialising the scores
 * costs, next to the model's line: its extra memory is 2·T²·4 bytes.
 */
import type { MemoryProbe } from './run.js';

export interface NaiveRun {
  readonly out: Float32Array;
  readonly seconds: number;
  readonly peakExtra?: number;
}

/** q, k, v: [T·D] float32 values of one head. */
export function naiveAttention(q: Float32Array, k: Float32Array, v: Float32Array, T: number, D: number, causal: boolean, probe?: MemoryProbe): NaiveRun {
  const t0 = performance.now();
  probe?.begin();
  const scale = 1 / Math.sqrt(D);
  const S = new Float32Array(T * T);
  for (let i = 0; i < T; i++) {
    const qo = i * D;
    const hi = causal ? i : T - 1;
    for (let j = 0; j < T; j++) {
      if (j > hi) {
        S[i * T + j] = -Infinity;
        continue;
      }
      const ko = j * D;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[qo + d] * k[ko + d];
      S[i * T + j] = dot * scale;
    }
  }
  probe?.sample();
  const P = new Float32Array(T * T);
  for (let i = 0; i < T; i++) {
    const row = i * T;
    let m = -Infinity;
    for (let j = 0; j < T; j++) m = Math.max(m, S[row + j]);
    let sum = 0;
    for (let j = 0; j < T; j++) {
      const e = Math.exp(S[row + j] - m);
      P[row + j] = e;
      sum += e;
    }
    for (let j = 0; j < T; j++) P[row + j] /= sum;
  }
  probe?.sample();
  const out = new Float32Array(T * D);
  for (let i = 0; i < T; i++) {
    const row = i * T;
    const oo = i * D;
    for (let j = 0; j < T; j++) {
      const p = P[row + j];
      if (p === 0) continue;
      const vo = j * D;
      for (let d = 0; d < D; d++) out[oo + d] += p * v[vo + d];
    }
  }
  probe?.sample();
  const peak = probe?.end();
  // keep S and P alive until after the last sample
  if (S.length + P.length < 0) throw new Error('unreachable');
  return { out, seconds: (performance.now() - t0) / 1e3, ...(peak !== undefined ? { peakExtra: Math.max(0, peak - out.byteLength) } : {}) };
}
