/** Elementwise a + b and a − b with NumPy broadcasting (a bias add is `add(x, b)`). */
import { FAError } from '@fa/core';
import { Tensor, alloc, sizeOf, shapeStr, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { broadcastShapes, mapBuffers, read, reduceTo, sourceMap, type SourceMap } from './broadcast.js';
import { checkTensors, promote, dataAs } from './util.js';
import { DeviceArray, deviceZeros, engineOf, onEngine, padShape, runOnDevice, type DeviceEngine } from '../device.js';

/** a ± b on the device: the same shape, or b repeated over a's leading rows (a position table). */
function addDevice(op: 'add' | 'sub', a: Tensor, b: Tensor, shape: number[], ma: SourceMap, mb: SourceMap, sign: number): Tensor {
  const e = engineOf(op, a.storage, b.storage)!;
  if (ma.kind !== 'same' || (mb.kind !== 'same' && mb.kind !== 'mod')) {
    if (shape.length > 8) throw new FAError('E_UNSUPPORTED', `${op} on ${e.name}: broadcasting over ${shape.length} axes (at most 8 on the device)`);
    // general NumPy broadcasting: one kernel forward, each operand's gradient summed over its broadcast axes
    const ap = padShape(a.shape, shape.length), bp = padShape(b.shape, shape.length);
    const y = deviceZeros(e, sizeOf(shape), true);
    runOnDevice(e, 'broadcast', { op, shape, aShape: ap, bShape: bp, a: a.storage, b: b.storage, y });
    const back: BackwardFn = ([gh], needs) => {
      const g = onEngine(e, gh);
      const red = (to: number[], alpha: number) => {
        const out = deviceZeros(e, to.reduce((x, z) => x * z, 1), true);
        runOnDevice(e, 'reduceTo', { shape, to, g, out, alpha });
        return out as unknown as Data;
      };
      return [needs[0] ? red(ap, 1) : null, needs[1] ? red(bp, sign) : null];
    };
    return record1(op, [a, b], y as unknown as Data, shape, [], back);
  }
  const n = sizeOf(shape), m = b.size;
  const out = deviceZeros(e, n, true);
  runOnDevice(e, 'axpy', { n, alpha: 1, x: a.storage, beta: 0, y: out });
  if (mb.kind === 'same') runOnDevice(e, 'axpy', { n, alpha: sign, x: b.storage, beta: 1, y: out });
  else if (sign > 0) runOnDevice(e, 'copy2d', { rows: n / m, cols: m, src: b.storage, srcOffset: 0, srcStride: 0, dst: out, dstOffset: 0, dstStride: m, accumulate: true });
  else throw new FAError('E_UNSUPPORTED', `sub on ${e.name}: a broadcast b has no device path yet`);
  return record1(op, [a, b], out as unknown as Data, shape, [], addBackwardDevice(e, mb.kind === 'mod', n, m, sign));
}

function addBackwardDevice(e: DeviceEngine, mod: boolean, n: number, m: number, sign: number): BackwardFn {
  return ([gh], needs) => {
    const g = onEngine(e, gh);
    let gb: DeviceArray | null = null;
    if (needs[1]) {
      gb = deviceZeros(e, mod ? m : n, true);
      if (mod) runOnDevice(e, 'sumRows', { rows: n / m, cols: m, x: g, out: gb });
      else runOnDevice(e, 'axpy', { n, alpha: sign, x: g, beta: 0, y: gb });
    }
    return [needs[0] ? (g as unknown as Data) : null, gb as unknown as Data | null];
  };
}

const passThrough: BackwardFn = (g) => [g[0]];

function addBackward(ma: SourceMap, mb: SourceMap, aSize: number, bSize: number, sign: number, p: Precision): BackwardFn {
  return ([g], needs) => {
    const ga = needs[0] ? reduceTo(ma, g, aSize) : null;
    let gb: Data | null = null;
    if (needs[1]) {
      gb = reduceTo(mb, g, bSize);
      if (sign < 0) {
        const neg = alloc(p, gb.length);
        for (let i = 0; i < neg.length; i++) neg[i] = -gb[i];
        gb = neg;
      }
    }
    return [ga, gb];
  };
}

function addSub(op: 'add' | 'sub', a: Tensor, b: Tensor | number): Tensor {
  const sign = op === 'add' ? 1 : -1;
  if (typeof b === 'number') {
    checkTensors(op, ['a', a]);
    const out = alloc(a.precision, a.size);
    const x = a.data;
    const c = sign * b;
    for (let i = 0; i < out.length; i++) out[i] = x[i] + c;
    return record1(op, [a], out, a.shape, [], passThrough);
  }
  checkTensors(op, ['a', a], ['b', b]);
  const p = promote(a, b);
  const shape = broadcastShapes(op, a.shape, b.shape);
  const n = sizeOf(shape);
  const ma = sourceMap(a.shape, shape);
  const mb = sourceMap(b.shape, shape);
  if (a.onDevice || b.onDevice) return addDevice(op, a, b, shape, ma, mb, sign);
  const x = dataAs(a, p);
  const y = dataAs(b, p);
  const out = alloc(p, n);
  if (ma.kind === 'same' && mb.kind === 'same') {
    for (let i = 0; i < n; i++) out[i] = x[i] + sign * y[i];
  } else if (ma.kind === 'same' && mb.kind === 'mod') {
    const m = mb.size;
    for (let i = 0; i < n; i += m) for (let j = 0; j < m; j++) out[i + j] = x[i + j] + sign * y[j];
  } else {
    for (let i = 0; i < n; i++) out[i] = read(ma, x, i) + sign * read(mb, y, i);
  }
  return record1(op, [a, b], out, shape, mapBuffers(ma, mb), addBackward(ma, mb, a.size, b.size, sign, p));
}

/** a + b, broadcasting; b may be a number. Saves nothing. */
export function add(a: Tensor, b: Tensor | number): Tensor {
  return addSub('add', a, b);
}

/** a − b, broadcasting; b may be a number. Saves nothing. */
export function sub(a: Tensor, b: Tensor | number): Tensor {
  return addSub('sub', a, b);
}
