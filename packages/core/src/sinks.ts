/**
 * The one gradient sinks add (DESIGN.md): a sink s_h sits in row i's denominator with
 * probability P_sink = e^(s_h − LSE_i) and no value, so its score gradient is the softmax
 * backward of a column whose dP is 0: dS_sink = P_sink·(0 − D_i) with D_i = rowsum(dO∘O), and
 *
 *     dsink_h = −Σ_{rows i of head h} e^(s_h − LSE_i) · D_i.
 *
 * Nothing else of the backward changes: P = e^(S − LSE) with the LSE that includes the sink,
 * and dS = P∘(dP − D) as always. Engines that already hold D (the CPU engine's Dvec pass) call
 * sinkGradients; the others form it from out and dOut with sinkGradientsFromOutputs (O(T·H·D),
 * beside the backward's O(T²·H·D)).
 */
import { hostValues } from './reference-util.js';
import { lseIndex, segment, type AttentionProblem } from './problem.js';
import type { HostTensor } from './tensor.js';

/** dsinks [H] from each row's lse and D = rowsum(dO∘O), both in the problem's lse layout. */
export function sinkGradients(p: AttentionProblem, lse: ArrayLike<number>, dvec: ArrayLike<number>): Float32Array {
  const ds = new Float64Array(p.h);
  const sinks = p.sinks;
  if (sinks) {
    for (let b = 0; b < p.batch; b++) {
      const tq = segment(p, b).tq;
      for (let h = 0; h < p.h; h++) {
        const s = sinks[h];
        let acc = 0;
        for (let i = 0; i < tq; i++) {
          const x = lseIndex(p, b, h, i);
          const d = dvec[x];
          if (d !== 0) acc += Math.exp(s - lse[x]) * d; // (a row that saw nothing has out 0, D 0)
        }
        ds[h] -= acc;
      }
    }
  }
  return Float32Array.from(ds);
}

/** dsinks [H] from the forward's out and lse and the incoming dOut (host tensors, [.., H, D]). */
export function sinkGradientsFromOutputs(p: AttentionProblem, out: HostTensor, dOut: HostTensor, lse: ArrayLike<number>): Float32Array {
  const O = hostValues(out);
  const G = hostValues(dOut);
  const D = p.vDim; // out's head dim (V's)
  const dvec = new Float64Array(p.h * p.totalQ);
  for (let b = 0; b < p.batch; b++) {
    const { q0, tq } = segment(p, b);
    for (let i = 0; i < tq; i++) {
      for (let h = 0; h < p.h; h++) {
        const o = ((q0 + i) * p.h + h) * D;
        let s = 0;
        for (let c = 0; c < D; c++) s += O[o + c] * G[o + c];
        dvec[lseIndex(p, b, h, i)] = s;
      }
    }
  }
  return sinkGradients(p, lse, dvec);
}
