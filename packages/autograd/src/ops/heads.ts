/**
 * Heads in the attention layout [B, T, H, D]: a projection's [B, T, C] output already has the
 * heads side by side in C = H·D, so splitting and merging heads is a free reshape (no transpose,
 * unlike the [B, H, T, D] layout). Both save nothing.
 */
import { FAError } from '@fa/core';
import { Tensor } from '../tensor.js';
import { reshape } from './reshape.js';
import { checkTensors, shapeStr } from './util.js';

/** [..., T, C] → [..., T, H, C/H]. */
export function splitHeads(x: Tensor, heads: number): Tensor {
  checkTensors('splitHeads', ['x', x]);
  const c = x.shape[x.ndim - 1];
  if (!Number.isInteger(heads) || heads < 1 || c % heads !== 0) {
    throw new FAError('E_SHAPE', `splitHeads: the last dim ${c} of ${shapeStr(x.shape)} is not divisible by ${heads} heads`);
  }
  return reshape(x, [...x.shape.slice(0, -1), heads, c / heads]);
}

/** [..., T, H, D] → [..., T, H·D]. */
export function mergeHeads(x: Tensor): Tensor {
  checkTensors('mergeHeads', ['x', x]);
  if (x.ndim < 2) throw new FAError('E_SHAPE', `mergeHeads: needs [..., H, D], got ${shapeStr(x.shape)}`);
  const [h, d] = x.shape.slice(-2);
  return reshape(x, [...x.shape.slice(0, -2), h * d]);
}
