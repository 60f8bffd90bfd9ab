/**
 * crossEntropy(logits, targets): mean softmax cross-entropy over rows, PyTorch's
 * F.cross_entropy. logits are [..., V] (rows = everything but the last dim); targets hold one
 * class index per row (Int32Array or numbers); rows whose target is `ignoreIndex` are skipped.
 * Saves the logits and each row's logsumexp (the probabilities are recomputed). Float32 runs
 * on the model engine (engine.ts), fused: no probabilities tensor is formed in either pass.
 */
import { FAError } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn } from '../node.js';
import { checkTensors, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';

export interface CrossEntropyOptions {
  /** Rows with this target contribute nothing (default −100, as PyTorch). */
  ignoreIndex?: number;
  /** 'mean' over counted rows (default) or 'sum'. */
  reduction?: 'mean' | 'sum';
}

function crossEntropyBackward(x: Data, lse: Data, t: Int32Array, V: number, div: number, ignore: number, p: Precision): BackwardFn {
  return ([g]) => {
    const s = g[0] / div;
    const gx = alloc(p, x.length);
    if (x instanceof Float32Array && lse instanceof Float32Array && gx instanceof Float32Array) {
      modelEngine().crossEntropyBackward({ rows: t.length, classes: V, logits: x, lse, targets: t, ignoreIndex: ignore, scale: s, dlogits: gx });
      return [gx];
    }
    for (let r = 0; r < t.length; r++) {
      if (t[r] === ignore) continue;
      const o = r * V;
      const l = lse[r];
      for (let c = 0; c < V; c++) gx[o + c] = s * Math.exp(x[o + c] - l);
      gx[o + t[r]] -= s;
    }
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
  const p: Precision = logits.precision;
  const x = logits.data;
  const lse = alloc(p, rows);
  let loss = 0;
  let count = 0;
  if (x instanceof Float32Array && lse instanceof Float32Array) {
    if (!Number.isSafeInteger(ignore)) throw new FAError('E_ARG', `crossEntropy: ignoreIndex must be an integer, got ${String(ignore)}`);
    ({ loss, count } = modelEngine().crossEntropy({ rows, classes: V, logits: x, targets: t, ignoreIndex: ignore, lse }));
  } else for (let r = 0; r < rows; r++) {
    if (t[r] === ignore) continue;
    if (!Number.isInteger(t[r]) || t[r] < 0 || t[r] >= V) throw new FAError('E_ARG', `crossEntropy: target ${t[r]} of row ${r} is not a class in [0, ${V})`);
    const o = r * V;
    let m = -Infinity;
    for (let c = 0; c < V; c++) m = Math.max(m, x[o + c]);
    let s = 0;
    for (let c = 0; c < V; c++) s += Math.exp(x[o + c] - m);
    const l = m + Math.log(s);
    lse[r] = l;
    loss += l - x[o + t[r]];
    count++;
  }
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
