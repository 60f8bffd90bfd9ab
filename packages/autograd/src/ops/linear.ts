/**
 * linear(x, weight, bias?): y = x · weightᵀ + bias, PyTorch's F.linear. x is [..., in], weight
 * [out, in], bias [out]. Saves x (for weight's gradient) and weight (for x's gradient). The
 * bias rides the product's epilogue, and its gradient is the model engine's row sum (float32).
 */
import { FAError } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn, type Saved } from '../node.js';
import { gemm } from './gemm.js';
import { checkTensors, dataAs, promote, shapeError, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';
import { DeviceArray, deviceZeros, engineOf, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

const D = (d: unknown) => d as DeviceArray;

/** On the device: the products and the bias's row sum issued on the engine, nothing awaited. */
function linearBackwardDevice(e: DeviceEngine, x: DeviceArray | null, w: DeviceArray | null, M: number, I: number, O: number): BackwardFn {
  return ([gh], needs) => {
    const g = onEngine(e, gh);
    let gx: DeviceArray | null = null, gw: DeviceArray | null = null, gb: DeviceArray | null = null;
    if (needs[0]) {
      gx = deviceZeros(e, M * I, true);
      runOnDevice(e, 'gemm', { transA: false, transB: false, M, N: I, K: O, a: g, b: w!, c: gx });
    }
    if (needs[1]) {
      gw = deviceZeros(e, O * I, true);
      runOnDevice(e, 'gemm', { transA: true, transB: false, M: O, N: I, K: M, a: g, b: x!, c: gw });
    }
    if (needs[2]) {
      gb = deviceZeros(e, O, true);
      runOnDevice(e, 'sumRows', { rows: M, cols: O, x: g, out: gb });
    }
    return [gx, gw, gb] as unknown as (Data | null)[];
  };
}


function linearDevice(x: Tensor, weight: Tensor, bias: Tensor | null | undefined, M: number, I: number, O: number): Tensor {
  const e = engineOf('linear', x.storage, weight.storage, bias?.storage)!;
  const out = deviceZeros(e, M * O, true);
  runOnDevice(e, 'gemm', { transA: false, transB: true, M, N: O, K: I, a: D(x.storage), b: D(weight.storage), c: out, bias: bias ? D(bias.storage) : null });
  const keepX = weight.requiresGrad ? D(x.storage) : null;
  const keepW = x.requiresGrad ? D(weight.storage) : null;
  const saved: Saved[] = [];
  if (keepX) saved.push({ what: 'x', data: keepX as unknown as ArrayBufferView, leaf: x.isLeaf });
  if (keepW) saved.push({ what: 'weight', data: keepW as unknown as ArrayBufferView, leaf: weight.isLeaf });
  return record1('linear', [x, weight, bias], out as unknown as Data, [...x.shape.slice(0, -1), O], saved, linearBackwardDevice(e, keepX, keepW, M, I, O));
}

function linearBackward(x: Data | null, w: Data | null, M: number, I: number, O: number, p: Precision): BackwardFn {
  return ([g], needs) => {
    let gx: Data | null = null;
    let gw: Data | null = null;
    let gbias: Data | null = null;
    if (needs[0]) {
      gx = alloc(p, M * I);
      gemm({ transA: false, transB: false, M, N: I, K: O, A: g, B: w!, C: gx });
    }
    if (needs[1]) {
      gw = alloc(p, O * I);
      gemm({ transA: true, transB: false, M: O, N: I, K: M, A: g, B: x!, C: gw });
    }
    if (needs[2] && g instanceof Float32Array) {
      gbias = new Float32Array(O);
      modelEngine().sumRows({ rows: M, cols: O, x: g, out: gbias });
    } else if (needs[2]) {
      const acc = new Float64Array(O);
      for (let m = 0; m < M; m++) for (let o = 0; o < O; o++) acc[o] += g[m * O + o];
      gbias = alloc(p, O);
      gbias.set(acc);
    }
    return [gx, gw, gbias];
  };
}

export function linear(x: Tensor, weight: Tensor, bias?: Tensor | null): Tensor {
  checkTensors('linear', ['x', x], ['weight', weight]);
  if (bias != null) checkTensors('linear', ['bias', bias]);
  if (weight.ndim !== 2) throw shapeError('linear', `weight must be [out, in], got ${shapeStr(weight.shape)}`);
  const [O, I] = weight.shape;
  if (x.ndim < 1 || x.shape[x.ndim - 1] !== I) throw shapeError('linear', `x ${shapeStr(x.shape)} must end in in_features = ${I} (weight ${shapeStr(weight.shape)})`);
  if (bias != null && (bias.ndim !== 1 || bias.shape[0] !== O)) throw new FAError('E_SHAPE', `linear: bias must be [${O}], got ${shapeStr(bias.shape)}`);
  const M = x.size / I;
  if (x.onDevice || weight.onDevice || bias?.onDevice) return linearDevice(x, weight, bias, M, I, O);
  const p = promote(x, weight, bias);
  const xd = dataAs(x, p);
  const wd = dataAs(weight, p);
  const out = alloc(p, M * O);
  gemm({ transA: false, transB: true, M, N: O, K: I, A: xd, B: wd, C: out, bias: bias != null ? dataAs(bias, p) : null });
  const keepX = weight.requiresGrad ? xd : null;
  const keepW = x.requiresGrad ? wd : null;
  const saved: Saved[] = [];
  if (keepX) saved.push({ what: 'x', data: keepX, leaf: x.isLeaf && keepX === x.data });
  if (keepW) saved.push({ what: 'weight', data: keepW, leaf: weight.isLeaf && keepW === weight.data });
  return record1('linear', [x, weight, bias], out, [...x.shape.slice(0, -1), O], saved, linearBackward(keepX, keepW, M, I, O, p));
}
