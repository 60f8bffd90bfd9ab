/**
 * embedding(ids, weight): rows of weight [V, C] picked by integer ids, PyTorch's F.embedding.
 * ids is an Int32Array (or numbers) with shape `shape` (default [ids.length]); the result is
 * [...shape, C]. Saves the ids.
 */
import { FAError } from '@fa/core';
import { Tensor, alloc, type Precision } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn } from '../node.js';
import { checkTensors, shapeStr } from './util.js';
import { DeviceArray, deviceZeros, onEngine, runOnDevice, type DeviceEngine } from '../device.js';
import type { Data } from '../tensor.js';
import type { DeviceIndexTensor } from '@fa/core';

function embeddingBackwardDevice(e: DeviceEngine, ids: DeviceIndexTensor, rows: number, V: number, C: number): BackwardFn {
  return ([gh]) => {
    const gw = deviceZeros(e, V * C, true);
    runOnDevice(e, 'embeddingBackward', { rows, dim: C, vocab: V, grad: onEngine(e, gh), ids, dtable: gw });
    return [gw as unknown as Data];
  };
}

function embeddingBackward(ids: Int32Array, V: number, C: number, p: Precision): BackwardFn {
  return ([g]) => {
    const gw = alloc(p, V * C);
    for (let r = 0; r < ids.length; r++) {
      const src = r * C;
      const dst = ids[r] * C;
      for (let c = 0; c < C; c++) gw[dst + c] += g[src + c];
    }
    return [gw];
  };
}

export function embedding(ids: Int32Array | readonly number[], weight: Tensor, shape?: readonly number[]): Tensor {
  checkTensors('embedding', ['weight', weight]);
  if (weight.ndim !== 2) throw new FAError('E_SHAPE', `embedding: weight must be [num_embeddings, dim], got ${shapeStr(weight.shape)}`);
  const [V, C] = weight.shape;
  const idx = ids instanceof Int32Array ? ids.slice() : Int32Array.from(ids);
  const s = shape ?? [idx.length];
  if (s.reduce((a, x) => a * x, 1) !== idx.length) throw new FAError('E_SHAPE', `embedding: shape ${shapeStr(s)} does not hold ${idx.length} ids`);
  if (weight.device) {
    const e = weight.device.engine;
    for (let r = 0; r < idx.length; r++) {
      const id = idx[r];
      if (!Number.isInteger(id) || id < 0 || id >= V) throw new FAError('E_ARG', `embedding: id ${id} at position ${r} is outside [0, ${V})`);
    }
    const ids = e.uploadIndexNow(idx);
    const out = deviceZeros(e, idx.length * C, true);
    runOnDevice(e, 'embedding', { rows: idx.length, dim: C, vocab: V, table: weight.device as DeviceArray, ids, out });
    return record1('embedding', [weight], out as unknown as Data, [...s, C], [saveBuffer('ids', idx)], embeddingBackwardDevice(e, ids, idx.length, V, C));
  }
  const p = weight.precision;
  const w = weight.data;
  const out = alloc(p, idx.length * C);
  for (let r = 0; r < idx.length; r++) {
    const id = idx[r];
    if (!Number.isInteger(id) || id < 0 || id >= V) throw new FAError('E_ARG', `embedding: id ${id} at position ${r} is outside [0, ${V})`);
    out.set(w.subarray(id * C, id * C + C), r * C);
  }
  return record1('embedding', [weight], out, [...s, C], [saveBuffer('ids', idx)], embeddingBackward(idx, V, C, p));
}
