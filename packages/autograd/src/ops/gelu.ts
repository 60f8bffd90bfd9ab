/**
 * gelu(x): x·Φ(x) with the exact normal CDF (PyTorch's default), or the tanh approximation
 * with { approximate: 'tanh' } (GPT-2's). Saves x. Float32 runs on the model engine
 * (engine.ts); float64 (gradcheck's twin) here, with the exact float64 erf.
 */
import { FAError, normalCdf } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { checkTensors } from './util.js';
import { modelEngine } from '../engine.js';
import { DeviceArray, deviceZeros, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

function geluBackwardDevice(e: DeviceEngine, x: DeviceArray, approx: GeluApproximate): BackwardFn {
  return ([gh]) => {
    const g = onEngine(e, gh);
    const gx = deviceZeros(e, x.length, true);
    runOnDevice(e, 'geluBackward', { x, dy: g, dx: gx, approximate: approx });
    return [gx as unknown as Data];
  };
}

const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);
const TANH_C = Math.sqrt(2 / Math.PI);

export type GeluApproximate = 'none' | 'tanh';

function geluBackward(x: Data, approx: GeluApproximate, p: Precision): BackwardFn {
  return ([g]) => {
    const gx = alloc(p, x.length);
    if (x instanceof Float32Array && g instanceof Float32Array && gx instanceof Float32Array) {
      modelEngine().geluBackward({ x, dy: g, dx: gx, approximate: approx });
      return [gx];
    }
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
  if (x.device) {
    const e = x.device.engine;
    const out = deviceZeros(e, x.size, true);
    runOnDevice(e, 'gelu', { x: x.device, y: out, approximate: approx });
    return record1('gelu', [x], out as unknown as Data, x.shape, [{ what: 'x', data: x.device as unknown as ArrayBufferView, leaf: x.isLeaf }], geluBackwardDevice(e, x.device, approx));
  }
  const p = x.precision;
  const xd = x.data;
  const out = alloc(p, xd.length);
  if (xd instanceof Float32Array && out instanceof Float32Array) modelEngine().gelu({ x: xd, y: out, approximate: approx });
  else if (approx === 'tanh') {
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
