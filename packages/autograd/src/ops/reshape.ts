/** reshape(x, shape): the same data under another shape (one extent may be −1). Saves nothing. */
import { FAError } from '@fa/core';
import { Tensor, type Data } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { checkTensors, shapeStr } from './util.js';

const identity: BackwardFn = ([g]) => [g];

export function inferShape(op: string, size: number, shape: readonly number[]): number[] {
  const free = shape.filter((s) => s === -1).length;
  if (free > 1 || shape.some((s) => !Number.isInteger(s) || s < -1)) throw new FAError('E_SHAPE', `${op}: bad shape ${shapeStr(shape)} (non-negative integers and at most one -1)`);
  const known = shape.reduce((a, s) => (s === -1 ? a : a * s), 1);
  const out = shape.map((s) => (s === -1 ? (known === 0 ? 0 : size / known) : s));
  const n = out.reduce((a, s) => a * s, 1);
  if (n !== size || out.some((s) => !Number.isInteger(s))) {
    throw new FAError('E_SHAPE', `${op}: cannot view ${size} elements as ${shapeStr(shape)}`);
  }
  return out;
}

export function reshape(x: Tensor, shape: readonly number[]): Tensor {
  checkTensors('reshape', ['x', x]);
  const s = inferShape('reshape', x.size, shape);
  return record1('reshape', [x], x.storage as Data, s, [], identity);
}

/** PyTorch's name for a reshape of contiguous data. */
export const view = reshape;
