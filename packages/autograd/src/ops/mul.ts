/** Elementwise a · b with NumPy broadcasting; b may be a number (a scale). */
import { Tensor, alloc, sizeOf, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn, type Saved } from '../node.js';
import { broadcastShapes, mapBuffers, read, reduceTo, sourceMap, type SourceMap } from './broadcast.js';
import { checkTensors, promote, dataAs } from './util.js';
import { DeviceArray, deviceZeros, engineOf, onEngine, padShape, runOnDevice, type DeviceEngine } from '../device.js';
import { FAError } from '@fa/core';
import { shapeStr } from '../tensor.js';

/** a · b on the device: the same shape, or b repeated over a's leading rows. */
function mulDevice(a: Tensor, b: Tensor, shape: number[], ma: SourceMap, mb: SourceMap): Tensor {
  const e = engineOf('mul', a.storage, b.storage)!;
  if (ma.kind !== 'same' || (mb.kind !== 'same' && mb.kind !== 'mod')) {
    if (shape.length > 8) throw new FAError('E_UNSUPPORTED', `mul on ${e.name}: broadcasting ${shapeStr(a.shape)} with ${shapeStr(b.shape)} over more than 8 axes`);
    const ap = padShape(a.shape, shape.length), bp = padShape(b.shape, shape.length);
    const xa = a.storage as DeviceArray, xb = b.storage as DeviceArray;
    const y = deviceZeros(e, sizeOf(shape), true);
    runOnDevice(e, 'broadcast', { op: 'mul', shape, aShape: ap, bShape: bp, a: xa, b: xb, y });
    const back: BackwardFn = ([gh], needs) => {
      const g = onEngine(e, gh);
      // d(a·b)/da = g·b (broadcast), summed over a's broadcast axes; the same for b
      const grad = (other: DeviceArray, otherShape: number[], to: number[]) => {
        const t = deviceZeros(e, sizeOf(shape), true);
        runOnDevice(e, 'broadcast', { op: 'mul', shape, aShape: shape, bShape: otherShape, a: g, b: other, y: t });
        const out = deviceZeros(e, to.reduce((x, z) => x * z, 1), true);
        runOnDevice(e, 'reduceTo', { shape, to, g: t, out });
        return out as unknown as Data;
      };
      return [needs[0] ? grad(xb, bp, ap) : null, needs[1] ? grad(xa, ap, bp) : null];
    };
    const saved: Saved[] = [{ what: 'a', data: xa as unknown as ArrayBufferView, leaf: a.isLeaf }, { what: 'b', data: xb as unknown as ArrayBufferView, leaf: b.isLeaf }];
    return record1('mul', [a, b], y as unknown as Data, shape, saved, back);
  }
  const n = sizeOf(shape), m = b.size;
  const out = deviceZeros(e, n, true);
  const x = a.storage as DeviceArray, y = b.storage as DeviceArray;
  runOnDevice(e, 'mul', { n, a: x, b: y, m, y: out });
  const saved: Saved[] = [{ what: 'a', data: x as unknown as ArrayBufferView, leaf: a.isLeaf }, { what: 'b', data: y as unknown as ArrayBufferView, leaf: b.isLeaf }];
  return record1('mul', [a, b], out as unknown as Data, shape, saved, mulBackwardDevice(e, x, y, n, m));
}
function mulBackwardDevice(e: DeviceEngine, x: DeviceArray, y: DeviceArray, n: number, m: number): BackwardFn {
  return ([gh], needs) => {
    const g = onEngine(e, gh);
    let ga: DeviceArray | null = null, gb: DeviceArray | null = null;
    if (needs[0]) {
      ga = deviceZeros(e, n, true);
      runOnDevice(e, 'mul', { n, a: g, b: y, m, y: ga });
    }
    if (needs[1]) {
      const t = deviceZeros(e, n, true);
      runOnDevice(e, 'mul', { n, a: g, b: x, m: n, y: t });
      if (m === n) gb = t;
      else {
        gb = deviceZeros(e, m, true);
        runOnDevice(e, 'sumRows', { rows: n / m, cols: m, x: t, out: gb });
      }
    }
    return [ga, gb] as unknown as (Data | null)[];
  };
}

/** x · s on the device (and its gradient g · s). */
function scaleDevice(a: Tensor, s: number): Tensor {
  const e = a.device!.engine;
  const out = deviceZeros(e, a.size, true);
  runOnDevice(e, 'axpy', { n: a.size, alpha: s, x: a.device, beta: 0, y: out });
  return record1('mul', [a], out as unknown as Data, a.shape, [], scaleBackwardDevice(e, a.size, s));
}
function scaleBackwardDevice(e: DeviceEngine, n: number, s: number): BackwardFn {
  return ([gh]) => {
    const ga = deviceZeros(e, n, true);
    runOnDevice(e, 'axpy', { n, alpha: s, x: onEngine(e, gh), beta: 0, y: ga });
    return [ga as unknown as Data];
  };
}

function scaleBackward(s: number): BackwardFn {
  return ([g]) => {
    const ga = alloc(g instanceof Float64Array ? 'float64' : 'float32', g.length);
    for (let i = 0; i < g.length; i++) ga[i] = g[i] * s;
    return [ga];
  };
}

function mulBackward(ma: SourceMap, mb: SourceMap, x: Data | null, y: Data | null, aSize: number, bSize: number, n: number, p: Precision): BackwardFn {
  return ([g], needs) => {
    let ga: Data | null = null;
    let gb: Data | null = null;
    if (needs[0]) {
      const t = alloc(p, n);
      for (let i = 0; i < n; i++) t[i] = g[i] * read(mb, y!, i);
      ga = reduceTo(ma, t, aSize);
    }
    if (needs[1]) {
      const t = alloc(p, n);
      for (let i = 0; i < n; i++) t[i] = g[i] * read(ma, x!, i);
      gb = reduceTo(mb, t, bSize);
    }
    return [ga, gb];
  };
}

/** a · b, broadcasting; b may be a number. Saves each factor only when the other needs a gradient. */
export function mul(a: Tensor, b: Tensor | number): Tensor {
  if (typeof b === 'number') {
    checkTensors('mul', ['a', a]);
    if (a.device) return scaleDevice(a, b);
    const out = alloc(a.precision, a.size);
    const x = a.data;
    for (let i = 0; i < out.length; i++) out[i] = x[i] * b;
    return record1('mul', [a], out, a.shape, [], scaleBackward(b));
  }
  checkTensors('mul', ['a', a], ['b', b]);
  const p = promote(a, b);
  const shape = broadcastShapes('mul', a.shape, b.shape);
  const n = sizeOf(shape);
  const ma = sourceMap(a.shape, shape);
  const mb = sourceMap(b.shape, shape);
  if (a.onDevice || b.onDevice) return mulDevice(a, b, shape, ma, mb);
  const x = dataAs(a, p);
  const y = dataAs(b, p);
  const out = alloc(p, n);
  for (let i = 0; i < n; i++) out[i] = read(ma, x, i) * read(mb, y, i);
  const keepX = b.requiresGrad ? x : null;
  const keepY = a.requiresGrad ? y : null;
  const saved: Saved[] = mapBuffers(ma, mb);
  if (keepX) saved.push({ what: 'a', data: keepX, leaf: a.isLeaf && keepX === a.data });
  if (keepY) saved.push({ what: 'b', data: keepY, leaf: b.isLeaf && keepY === b.data });
  return record1('mul', [a, b], out, shape, saved, mulBackward(ma, mb, keepX, keepY, a.size, b.size, n, p));
}

/** x · s for a number s. Saves nothing. */
export function scale(x: Tensor, s: number): Tensor {
  return mul(x, s);
}
