/**
 * gelu(x): x·Φ(x) with the exact normal CDF (PyTorch's default), or the tanh approximation
 * with { approximate: 'tanh' } (GPT-2's). Saves x.
 */
import { FAError } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { checkTensors } from './util.js';

const SQRT1_2 = Math.SQRT1_2;
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);
const TANH_C = Math.sqrt(2 / Math.PI);

/**
 * erf to about 1e-15 relative: the everywhere-positive series
 * erf(z) = 2/√π · e^{−z²} · Σ 2ⁿ z^{2n+1} / (1·3···(2n+1)) for |z| < 3, and the continued
 * fraction of erfc (modified Lentz) beyond.
 */
const INV_ODD = Float64Array.from({ length: 200 }, (_, n) => 1 / (2 * n + 1));

export function erf(z: number): number {
  if (Number.isNaN(z)) return NaN;
  const a = Math.abs(z);
  if (a < 3) {
    let term = a;
    let sum = a;
    const z2 = a * a;
    for (let n = 1; n < 200; n++) {
      term *= 2 * z2 * INV_ODD[n];
      sum += term;
      if (term < sum * 1e-17) break;
    }
    const r = (2 / Math.sqrt(Math.PI)) * Math.exp(-z2) * sum;
    return z < 0 ? -r : r;
  }
  const r = 1 - erfcLarge(a);
  return z < 0 ? -r : r;
}

/** erfc(a) for a >= 3 by the continued fraction a + 1/2 / (a + 1 / (a + 3/2 / (a + …))). */
function erfcLarge(a: number): number {
  if (a > 27) return 0;
  const tiny = 1e-300;
  let f = a;
  let C = a;
  let D = 0;
  for (let n = 1; n < 300; n++) {
    const an = n / 2;
    D = a + an * D;
    D = D === 0 ? tiny : 1 / D;
    C = a + an / C;
    if (C === 0) C = tiny;
    const delta = C * D;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(-a * a) / Math.sqrt(Math.PI) / f;
}

/** Φ(v), the standard normal CDF, without cancellation in the far left tail. */
export function normalCdf(v: number): number {
  const z = v * SQRT1_2;
  if (z < -3) return 0.5 * erfcLarge(-z);
  return 0.5 * (1 + erf(z));
}

export type GeluApproximate = 'none' | 'tanh';

function geluBackward(x: Data, approx: GeluApproximate, p: Precision): BackwardFn {
  return ([g]) => {
    const gx = alloc(p, x.length);
    if (approx === 'tanh') {
      for (let i = 0; i < x.length; i++) {
        const v = x[i];
        const u = TANH_C * (v + 0.044715 * v * v * v);
        const t = Math.tanh(u);
        const du = TANH_C * (1 + 3 * 0.044715 * v * v);
        gx[i] = g[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du);
      }
    } else {
      for (let i = 0; i < x.length; i++) {
        const v = x[i];
        const cdf = normalCdf(v);
        const pdf = INV_SQRT_2PI * Math.exp(-0.5 * v * v);
        gx[i] = g[i] * (cdf + v * pdf);
      }
    }
    return [gx];
  };
}

export function gelu(x: Tensor, options: { approximate?: GeluApproximate } = {}): Tensor {
  checkTensors('gelu', ['x', x]);
  const approx = options.approximate ?? 'none';
  if (approx !== 'none' && approx !== 'tanh') throw new FAError('E_ARG', `gelu: approximate must be 'none' or 'tanh', got ${String(approx)}`);
  const p = x.precision;
  const xd = x.data;
  const out = alloc(p, xd.length);
  if (approx === 'tanh') {
    for (let i = 0; i < xd.length; i++) {
      const v = xd[i];
      out[i] = 0.5 * v * (1 + Math.tanh(TANH_C * (v + 0.044715 * v * v * v)));
    }
  } else {
    for (let i = 0; i < xd.length; i++) {
      const v = xd[i];
      out[i] = v * normalCdf(v);
    }
  }
  return record1('gelu', [x], out, x.shape, [{ what: 'x', data: xd, leaf: x.isLeaf }], geluBackward(xd, approx, p));
}
