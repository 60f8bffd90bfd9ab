/** sum(x) and mean(x): every element to one scalar. Save nothing. */
import { Tensor, alloc, type Precision } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { checkTensors } from './util.js';

function fillBackward(n: number, f: number, p: Precision): BackwardFn {
  return ([g]) => {
    const gx = alloc(p, n);
    gx.fill(g[0] * f);
    return [gx];
  };
}

function total(x: Tensor): number {
  let s = 0;
  for (let i = 0; i < x.data.length; i++) s += x.data[i];
  return s;
}

export function sum(x: Tensor): Tensor {
  checkTensors('sum', ['x', x]);
  const out = alloc(x.precision, 1);
  out[0] = total(x);
  return record1('sum', [x], out, [], [], fillBackward(x.size, 1, x.precision));
}

export function mean(x: Tensor): Tensor {
  checkTensors('mean', ['x', x]);
  const out = alloc(x.precision, 1);
  out[0] = total(x) / x.size;
  return record1('mean', [x], out, [], [], fillBackward(x.size, 1 / x.size, x.precision));
}
