/**
 * crossEntropy(logits, targets): mean softmax cross-entropy over rows, PyTorch's
 * F.cross_entropy. logits are [..., V] (rows = everything but the last dim); targets hold one
 * class index per row (Int32Array or numbers); rows whose target is `ignoreIndex` are skipped.
 * Saves the logits and each row's logsumexp (the probabilities are recomputed). Float32 runs
 * on the model engine (engine.ts), fused: no probabilities tensor is formed in either pass;
 * float64 (gradcheck's twin) on core's cpu kernels in float64 arrays.
 */
import { crossEntropyBackwardCpu, crossEntropyCpu, FAError } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn } from '../node.js';
import { checkTensors, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';
import { DeviceArray, deviceZeros, runOnDevice, type DeviceEngine } from '../device.js';

/** On the device: the gradient's scale needs the upstream gradient's value (the seed 1 is on the host; another is read). */
function crossEntropyBackwardDevice(e: DeviceEngine, x: DeviceArray, lse: DeviceArray, ids: unknown, rows: number, V: number, div: number, ignore: number): BackwardFn {
  return async ([g]) => {
    const gv = (g as unknown) instanceof DeviceArray ? ((await e.read((g as unknown as DeviceArray).t)).data as Float32Array)[0] : g[0];
    const gx = deviceZeros(e, x.length, true);
    runOnDevice(e, 'crossEntropyBackward', { rows, classes: V, logits: x, lse, targets: ids, ignoreIndex: ignore, scale: gv / div, dlogits: gx });
    return [gx as unknown as Data];
  };
}

type F = Float32Array;

export interface CrossEntropyOptions {
  /** Rows with this target contribute nothing (default −100, as PyTorch). */
  ignoreIndex?: number;
  /** 'mean' over counted rows (default) or 'sum'. */
  reduction?: 'mean' | 'sum';
}

function crossEntropyBackward(x: Data, lse: Data, t: Int32Array, V: number, div: number, ignore: number, p: Precision): BackwardFn {
  return ([g]) => {
    const gx = alloc(p, x.length);
    const call = { rows: t.length, classes: V, logits: x as F, lse: lse as F, targets: t, ignoreIndex: ignore, scale: g[0] / div, dlogits: gx as F };
    if (p === 'float32') modelEngine().crossEntropyBackward(call);
    else crossEntropyBackwardCpu(call);
    return [gx];
  };
}

export function crossEntropy(logits: Tensor, targets: Int32Array | readonly number[], options: CrossEntropyOptions = {}): Tensor {
  checkTensors('crossEntropy', ['logits', logits]);
  const ignore = options.ignoreIndex ?? -100;
  const reduction = options.reduction ?? 'mean';
  const V = logits.shape[logits.ndim - 1];
  const rows = logits.size / V;
  const t = targets instanceof Int32Array ? targets : Int32Array.from(targets);
  if (t.length !== rows) throw new FAError('E_SHAPE', `crossEntropy: logits ${shapeStr(logits.shape)} have ${rows} rows but there are ${t.length} targets`);
  if (logits.device) {
    const e = logits.device.engine;
    for (let i = 0; i < rows; i++) {
      if (t[i] !== ignore && (!Number.isInteger(t[i]) || t[i] < 0 || t[i] >= V)) throw new FAError('E_ARG', `crossEntropy: target ${t[i]} of row ${i} is not a class in [0, ${V})`);
    }
    // the targets are the host's: their count is known here, and they go up once, at once
    const ids = e.uploadIndexNow(Int32Array.from(t)); // (a copy: the caller may reuse its array)
    let count = 0;
    for (let i = 0; i < rows; i++) if (t[i] !== ignore) count++;
    const div = reduction === 'mean' ? Math.max(count, 1) : 1;
    const lse = deviceZeros(e, rows, true), pair = deviceZeros(e, 2, true), out = deviceZeros(e, 1, true);
    runOnDevice(e, 'crossEntropy', { rows, classes: V, logits: logits.device, targets: ids, ignoreIndex: ignore, lse, loss: pair });
    runOnDevice(e, 'axpy', { n: 1, alpha: 1 / div, x: pair, beta: 0, y: out });
    return record1('crossEntropy', [logits], out as unknown as Data, [], [{ what: 'logits', data: logits.device as unknown as ArrayBufferView, leaf: logits.isLeaf }, saveBuffer('lse', lse as unknown as ArrayBufferView)],
      crossEntropyBackwardDevice(e, logits.device, lse, ids, rows, V, div, ignore));
  }
  const p: Precision = logits.precision;
  const x = logits.data;
  const lse = alloc(p, rows);
  const call = { rows, classes: V, logits: x as F, targets: t, ignoreIndex: ignore, lse: lse as F };
  let r: { loss: number; count: number };
  if (p === 'float32') r = modelEngine().crossEntropy(call); // the engine checks the targets
  else {
    for (let i = 0; i < rows; i++) {
      if (t[i] !== ignore && (!Number.isInteger(t[i]) || t[i] < 0 || t[i] >= V)) throw new FAError('E_ARG', `crossEntropy: target ${t[i]} of row ${i} is not a class in [0, ${V})`);
    }
    r = crossEntropyCpu(call);
  }
  const { loss, count } = r;
  const div = reduction === 'mean' ? Math.max(count, 1) : 1;
  const out = alloc(p, 1);
  out[0] = loss / div;
  const tk = targets instanceof Int32Array ? t.slice() : t;
  return record1(
    'crossEntropy',
    [logits],
    out,
    [],
    [{ what: 'logits', data: x, leaf: logits.isLeaf }, saveBuffer('lse', lse), saveBuffer('targets', tk)],
    crossEntropyBackward(x, lse, tk, V, div, ignore, p),
  );
}
