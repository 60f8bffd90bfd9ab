/**
 * The cpu engine's element-wise and per-row model ops (layer-ops.ts), in TypeScript: float64
 * arithmetic on float32 arrays, each result rounded once when stored. Plain loops, written to be
 * checked rather than to be fast; native and wasm (@fa/wasm) run SIMD kernels of the same ops.
 */
import type { AdamWCall, CrossEntropyBackwardCall, CrossEntropyCall, GeluBackwardCall, GeluCall, LayerNormBackwardCall, LayerNormCall, RmsNormBackwardCall, RmsNormCall, RotaryCall, SiluBackwardCall, SiluCall, SumRowsCall, DropoutCall } from './layer-ops.js';
import { dropoutKeepElements } from '../philox.js';
import { resolveDropout } from '../problem.js';

const SQRT1_2 = Math.SQRT1_2;
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);
const TANH_C = Math.sqrt(2 / Math.PI);

/**
 * erfc(z) for z >= 0 with relative error below 1.2e-7 everywhere (a Chebyshev fit of
 * erfc(z)·e^{z²} in t = 1/(1 + z/2), Numerical Recipes' erfcc): good to float32, one exp.
 */
export function erfcPos(z: number): number {
  const t = 1 / (1 + 0.5 * z);
  const p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  return t * Math.exp(-z * z + p);
}

/** Φ(v), the standard normal CDF, to float32 accuracy in both tails. */
export function normalCdf32(v: number): number {
  const z = v * SQRT1_2;
  return z < 0 ? 0.5 * erfcPos(-z) : 1 - 0.5 * erfcPos(z);
}

export function geluCpu(c: GeluCall): void {
  const { x, y } = c;
  if (c.approximate === 'tanh') {
    for (let i = 0; i < x.length; i++) {
      const v = x[i];
      y[i] = 0.5 * v * (1 + Math.tanh(TANH_C * (v + 0.044715 * v * v * v)));
    }
  } else {
    for (let i = 0; i < x.length; i++) {
      const v = x[i];
      y[i] = v * normalCdf32(v);
    }
  }
}

export function geluBackwardCpu(c: GeluBackwardCall): void {
  const { x, dy, dx } = c;
  const acc = c.accumulate === true;
  for (let i = 0; i < x.length; i++) {
    const v = x[i];
    let d: number;
    if (c.approximate === 'tanh') {
      const t = Math.tanh(TANH_C * (v + 0.044715 * v * v * v));
      d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * TANH_C * (1 + 3 * 0.044715 * v * v);
    } else {
      d = normalCdf32(v) + v * INV_SQRT_2PI * Math.exp(-0.5 * v * v);
    }
    dx[i] = acc ? dx[i] + dy[i] * d : dy[i] * d;
  }
}

export function layerNormCpu(c: LayerNormCall): void {
  const { rows, cols: C, x, weight: w, bias: b, y } = c;
  for (let r = 0; r < rows; r++) {
    const o = r * C;
    let s = 0;
    for (let j = 0; j < C; j++) s += x[o + j];
    const mu = s / C;
    let v = 0;
    for (let j = 0; j < C; j++) v += (x[o + j] - mu) ** 2;
    const rs = 1 / Math.sqrt(v / C + c.eps);
    c.mean[r] = mu;
    c.rstd[r] = rs;
    for (let j = 0; j < C; j++) {
      let t = (x[o + j] - mu) * rs;
      if (w) t *= w[j];
      if (b) t += b[j];
      y[o + j] = t;
    }
  }
}

export function layerNormBackwardCpu(c: LayerNormBackwardCall): void {
  const { rows, cols: C, x, mean, rstd, weight: w, dy, dx } = c;
  const gw = c.dweight ? new Float64Array(C) : null;
  const gb = c.dbias ? new Float64Array(C) : null;
  const xh = new Float64Array(C);
  const dxh = new Float64Array(C);
  for (let r = 0; r < rows; r++) {
    const o = r * C;
    const mu = mean[r], rs = rstd[r];
    let s1 = 0, s2 = 0;
    for (let j = 0; j < C; j++) {
      const h = (x[o + j] - mu) * rs;
      const g = dy[o + j];
      xh[j] = h;
      if (gw) gw[j] += g * h;
      if (gb) gb[j] += g;
      const d = w ? g * w[j] : g;
      dxh[j] = d;
      s1 += d;
      s2 += d * h;
    }
    if (dx) {
      const m1 = s1 / C, m2 = s2 / C;
      for (let j = 0; j < C; j++) dx[o + j] = rs * (dxh[j] - m1 - xh[j] * m2);
    }
  }
  if (gw) c.dweight!.set(gw);
  if (gb) c.dbias!.set(gb);
}

export function crossEntropyCpu(c: CrossEntropyCall): { loss: number; count: number } {
  const { rows, classes: V, logits: x, targets: t } = c;
  let loss = 0, count = 0;
  for (let r = 0; r < rows; r++) {
    if (t[r] === c.ignoreIndex) {
      c.lse[r] = 0;
      continue;
    }
    const o = r * V;
    let m = -Infinity;
    for (let j = 0; j < V; j++) m = Math.max(m, x[o + j]);
    let s = 0;
    for (let j = 0; j < V; j++) s += Math.exp(x[o + j] - m);
    const l = m + Math.log(s);
    c.lse[r] = l;
    loss += l - x[o + t[r]];
    count++;
  }
  return { loss, count };
}

export function crossEntropyBackwardCpu(c: CrossEntropyBackwardCall): void {
  const { rows, classes: V, logits: x, lse, targets: t, scale: s, dlogits: g } = c;
  for (let r = 0; r < rows; r++) {
    const o = r * V;
    if (t[r] === c.ignoreIndex) {
      g.fill(0, o, o + V);
      continue;
    }
    const l = lse[r];
    for (let j = 0; j < V; j++) g[o + j] = s * Math.exp(x[o + j] - l);
    g[o + t[r]] = s * (Math.exp(x[o + t[r]] - l) - 1);
  }
}

export function adamwCpu(c: AdamWCall): void {
  const { param: x, grad: g, m, v, lr, beta1: b1, beta2: b2, eps } = c;
  const decay = 1 - lr * c.weightDecay;
  const c1 = 1 - b1 ** c.step, c2 = 1 - b2 ** c.step;
  for (let j = 0; j < x.length; j++) {
    const gj = g[j];
    const mj = b1 * m[j] + (1 - b1) * gj;
    const vj = b2 * v[j] + (1 - b2) * gj * gj;
    m[j] = mj;
    v[j] = vj;
    x[j] = x[j] * decay - (lr * (mj / c1)) / (Math.sqrt(vj / c2) + eps);
  }
}

export function sumRowsCpu(c: SumRowsCall): void {
  const { rows, cols, x, out } = c;
  const acc = new Float64Array(cols);
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    for (let j = 0; j < cols; j++) acc[j] += x[o + j];
  }
  for (let j = 0; j < cols; j++) out[j] = c.accumulate ? out[j] + acc[j] : acc[j];
}

export function rmsNormCpu(c: RmsNormCall): void {
  const { rows, cols: C, x, weight: w, y } = c;
  for (let r = 0; r < rows; r++) {
    const o = r * C;
    let q = 0;
    for (let j = 0; j < C; j++) q += x[o + j] * x[o + j];
    const rs = 1 / Math.sqrt(q / C + c.eps);
    c.rstd[r] = rs;
    for (let j = 0; j < C; j++) y[o + j] = x[o + j] * rs * (w ? w[j] : 1);
  }
}

export function rmsNormBackwardCpu(c: RmsNormBackwardCall): void {
  const { rows, cols: C, x, rstd, weight: w, dy, dx } = c;
  const gw = c.dweight ? new Float64Array(C) : null;
  for (let r = 0; r < rows; r++) {
    const o = r * C, rs = rstd[r];
    let s = 0;
    for (let j = 0; j < C; j++) {
      const h = x[o + j] * rs, g = dy[o + j];
      if (gw) gw[j] += g * h;
      s += g * (w ? w[j] : 1) * h;
    }
    if (dx) {
      const m = s / C;
      for (let j = 0; j < C; j++) dx[o + j] = rs * (dy[o + j] * (w ? w[j] : 1) - x[o + j] * rs * m);
    }
  }
  if (gw) c.dweight!.set(gw);
}

const sigmoid = (v: number): number => (v >= 0 ? 1 / (1 + Math.exp(-v)) : Math.exp(v) / (1 + Math.exp(v)));

export function siluCpu(c: SiluCall): void {
  const { x, gate, y } = c;
  for (let i = 0; i < x.length; i++) {
    const v = x[i];
    y[i] = v * sigmoid(v) * (gate ? gate[i] : 1);
  }
}

export function siluBackwardCpu(c: SiluBackwardCall): void {
  const { x, gate, dy, dx, dgate } = c;
  const acc = c.accumulate === true;
  for (let i = 0; i < x.length; i++) {
    const v = x[i], s = sigmoid(v), g = gate ? gate[i] : 1;
    const d = dy[i] * g * (s + v * s * (1 - s));
    if (dgate) dgate[i] = dy[i] * v * s;
    dx[i] = acc ? dx[i] + d : d;
  }
}

export function rotaryCpu(c: RotaryCall): void {
  const { batch, seq, heads, dim: D, rotaryDim: rd, x, y, cos, sin } = c;
  const half = rd / 2, sign = c.inverse ? -1 : 1;
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < seq; t++) {
      const p = (c.positionOffset + t) * half;
      for (let h = 0; h < heads; h++) {
        const o = ((b * seq + t) * heads + h) * D;
        for (let m = 0; m < half; m++) {
          const ia = c.interleaved ? o + 2 * m : o + m, ib = c.interleaved ? ia + 1 : o + m + half;
          const co = cos[p + m], si = sign * sin[p + m];
          const xa = x[ia], xb = x[ib];
          y[ia] = xa * co - xb * si;
          y[ib] = xb * co + xa * si;
        }
        if (y !== x) for (let j = rd; j < D; j++) y[o + j] = x[o + j];
      }
    }
  }
}

/** dropout: y (+)= x·m/(1 − p), the mask a block of 4096 elements at a time. */
export function dropoutCpu(c: DropoutCall): void {
  const d = resolveDropout({ p: c.p, seed: c.seed, offset: c.offset ?? 0 });
  const n = c.x.length;
  if (!d) {
    for (let i = 0; i < n; i++) c.y[i] = c.accumulate ? c.y[i] + c.x[i] : c.x[i];
    return;
  }
  const scale = Math.fround(d.keepScale);
  const keep = new Uint8Array(Math.min(n, 4096));
  const words = new Uint32Array(4);
  for (let e0 = 0; e0 < n; e0 += keep.length) {
    const m = keep.subarray(0, Math.min(keep.length, n - e0));
    dropoutKeepElements(d, e0, m, words);
    for (let i = 0; i < m.length; i++) {
      const v = m[i] ? Math.fround(c.x[e0 + i] * scale) : 0;
      c.y[e0 + i] = c.accumulate ? c.y[e0 + i] + v : v;
    }
  }
}
