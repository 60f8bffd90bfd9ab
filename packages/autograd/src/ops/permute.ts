/** permute(x, dims) and transpose(x, d0, d1): reorder axes (a copy). Saves nothing. */
import { FAError } from '@fa/core';
import { Tensor, alloc, precisionOf, type Data } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { axis, checkTensors } from './util.js';
import { deviceZeros, onEngine, runOnDevice } from '../device.js';

/** Copies `src` of shape `shape` into the axis order `dims` (out.shape[i] = shape[dims[i]]). */
export function permuteData(src: Data, shape: readonly number[], dims: readonly number[]): Data {
  const rank = shape.length;
  const out = alloc(precisionOf(src), src.length);
  const inStrides = new Array<number>(rank);
  let st = 1;
  for (let d = rank - 1; d >= 0; d--) {
    inStrides[d] = st;
    st *= shape[d];
  }
  const outShape = dims.map((d) => shape[d]);
  const strides = dims.map((d) => inStrides[d]);
  const ctr = new Array<number>(rank).fill(0);
  let srcIdx = 0;
  for (let i = 0; i < out.length; i++) {
    out[i] = src[srcIdx];
    for (let d = rank - 1; d >= 0; d--) {
      ctr[d]++;
      srcIdx += strides[d];
      if (ctr[d] < outShape[d]) break;
      srcIdx -= strides[d] * outShape[d];
      ctr[d] = 0;
    }
  }
  return out;
}

/** The permutation on the device (rank at most 8), and its gradient by the inverse one. */
function permuteDevice(x: Tensor, ds: number[], outShape: number[], inverse: number[]): Tensor {
  const e = x.device!.engine;
  if (x.ndim > 8) throw new FAError('E_UNSUPPORTED', `permute on ${e.name}: rank ${x.ndim} > 8 has no device path`);
  const y = deviceZeros(e, x.size, true);
  runOnDevice(e, 'permute', { shape: x.shape, dims: ds, x: x.device, y });
  const back: BackwardFn = ([gh]) => {
    const gx = deviceZeros(e, x.size, true);
    runOnDevice(e, 'permute', { shape: outShape, dims: inverse, x: onEngine(e, gh), y: gx });
    return [gx as unknown as Data];
  };
  return record1('permute', [x], y as unknown as Data, outShape, [], back);
}

function permuteBackward(outShape: readonly number[], inverse: readonly number[]): BackwardFn {
  return ([g]) => [permuteData(g, outShape, inverse)];
}

export function permute(x: Tensor, dims: readonly number[]): Tensor {
  checkTensors('permute', ['x', x]);
  const rank = x.ndim;
  const ds = dims.map((d) => axis('permute', d, rank));
  if (ds.length !== rank || new Set(ds).size !== rank) throw new FAError('E_ARG', `permute: dims ${JSON.stringify(dims)} must be a permutation of 0..${rank - 1}`);
  const outShape = ds.map((d) => x.shape[d]);
  const inverse = new Array<number>(rank);
  ds.forEach((d, i) => (inverse[d] = i));
  if (x.device) return permuteDevice(x, ds, outShape, inverse);
  return record1('permute', [x], permuteData(x.data, x.shape, ds), outShape, [], permuteBackward(outShape, inverse));
}

export function transpose(x: Tensor, dim0: number, dim1: number): Tensor {
  const rank = x.ndim;
  const a = axis('transpose', dim0, rank);
  const b = axis('transpose', dim1, rank);
  const dims = Array.from({ length: rank }, (_, i) => i);
  dims[a] = b;
  dims[b] = a;
  return permute(x, dims);
}
