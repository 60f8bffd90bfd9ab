/** sum(x) and mean(x): every element to one scalar. Save nothing. */
import { Tensor, alloc, type Precision } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { checkTensors } from './util.js';
import { DeviceArray, deviceZeros, onEngine, runOnDevice, type DeviceEngine } from '../device.js';
import type { Data } from '../tensor.js';

/** Σx (× f) on the device: a parallel sum in a fixed order, then the scale. */
function totalDevice(name: 'sum' | 'mean', x: Tensor, f: number): Tensor {
  const e = x.device!.engine, n = x.size;
  const s = deviceZeros(e, 1, true);
  runOnDevice(e, 'sumAll', { n, x: x.device, out: s });
  let out = s;
  if (f !== 1) {
    out = deviceZeros(e, 1, true);
    runOnDevice(e, 'axpy', { n: 1, alpha: f, x: s, beta: 0, y: out });
  }
  return record1(name, [x], out as unknown as Data, [], [], fillBackwardDevice(e, n, f));
}

/** gx = g·f everywhere: the scaled scalar, repeated by a strided copy of stride 0. */
function fillBackwardDevice(e: DeviceEngine, n: number, f: number): BackwardFn {
  return ([gh]) => {
    const g = onEngine(e, gh);
    const sg = deviceZeros(e, 1, true);
    runOnDevice(e, 'axpy', { n: 1, alpha: f, x: g, beta: 0, y: sg });
    const gx = deviceZeros(e, n, true);
    runOnDevice(e, 'copy2d', { rows: n, cols: 1, src: sg, srcOffset: 0, srcStride: 0, dst: gx, dstOffset: 0, dstStride: 1 });
    return [gx as unknown as Data];
  };
}
void DeviceArray;

function fillBackward(n: number, f: number, p: Precision): BackwardFn {
  return ([g]) => {
    const gx = alloc(p, n);
    gx.fill(g[0] * f);
    return [gx];
  };
}

function total(x: Tensor): number {
  let s = 0;
  for (let i = 0; i < x.data.length; i++) s += x.data[i];
  return s;
}

export function sum(x: Tensor): Tensor {
  checkTensors('sum', ['x', x]);
  if (x.device) return totalDevice('sum', x, 1);
  const out = alloc(x.precision, 1);
  out[0] = total(x);
  return record1('sum', [x], out, [], [], fillBackward(x.size, 1, x.precision));
}

export function mean(x: Tensor): Tensor {
  checkTensors('mean', ['x', x]);
  if (x.device) return totalDevice('mean', x, 1 / x.size);
  const out = alloc(x.precision, 1);
  out[0] = total(x) / x.size;
  return record1('mean', [x], out, [], [], fillBackward(x.size, 1 / x.size, x.precision));
}
