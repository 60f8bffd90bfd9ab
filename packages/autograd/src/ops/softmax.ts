/**
 * softmax(x, dim = −1). Saves its output (the probabilities). Composing attention from
 * matmul + softmax records exactly the T×T probabilities the attention op avoids; the memory
 * test uses that to show the difference.
 */
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn } from '../node.js';
import { axis, checkTensors } from './util.js';
import { DeviceArray, deviceZeros, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

function softmaxBackwardDevice(e: DeviceEngine, y: DeviceArray, outer: number, n: number, inner: number): BackwardFn {
  return ([gh]) => {
    const gx = deviceZeros(e, y.length, true);
    runOnDevice(e, 'softmaxBackward', { outer, n, inner, y, dy: onEngine(e, gh), dx: gx });
    return [gx as unknown as Data];
  };
}

function softmaxBackward(y: Data, outer: number, n: number, inner: number, p: Precision): BackwardFn {
  return ([g]) => {
    const gx = alloc(p, y.length);
    for (let o = 0; o < outer; o++) {
      for (let i = 0; i < inner; i++) {
        const base = o * n * inner + i;
        let dot = 0;
        for (let j = 0; j < n; j++) dot += g[base + j * inner] * y[base + j * inner];
        for (let j = 0; j < n; j++) {
          const k = base + j * inner;
          gx[k] = y[k] * (g[k] - dot);
        }
      }
    }
    return [gx];
  };
}

export function softmax(x: Tensor, dim = -1): Tensor {
  checkTensors('softmax', ['x', x]);
  const d = axis('softmax', dim, x.ndim);
  const n = x.shape[d];
  const inner = x.shape.slice(d + 1).reduce((a, s) => a * s, 1);
  const outer = x.shape.slice(0, d).reduce((a, s) => a * s, 1);
  if (x.device) {
    const e = x.device.engine;
    const y = deviceZeros(e, x.size, true);
    runOnDevice(e, 'softmax', { outer, n, inner, x: x.device, y });
    return record1('softmax', [x], y as unknown as Data, x.shape, [saveBuffer('probs', y as unknown as ArrayBufferView)], softmaxBackwardDevice(e, y, outer, n, inner));
  }
  const p = x.precision;
  const xd = x.data;
  const y = alloc(p, xd.length);
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < inner; i++) {
      const base = o * n * inner + i;
      let m = -Infinity;
      for (let j = 0; j < n; j++) m = Math.max(m, xd[base + j * inner]);
      let s = 0;
      for (let j = 0; j < n; j++) s += Math.exp(xd[base + j * inner] - m);
      for (let j = 0; j < n; j++) y[base + j * inner] = Math.exp(xd[base + j * inner] - m) / s;
    }
  }
  return record1('softmax', [x], y, x.shape, [saveBuffer('probs', y)], softmaxBackward(y, outer, n, inner, p));
}
