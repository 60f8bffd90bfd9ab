/** Small helpers shared by the ops: precision promotion and argument checks. */
import { FAError } from '@fa/core';
import { Tensor, castData, checkTensor, shapeStr, type Data, type Precision } from '../tensor.js';

/** float64 when any input is float64 (gradcheck's twin), float32 otherwise. */
export function promote(...ts: readonly (Tensor | null | undefined)[]): Precision {
  return ts.some((t) => t != null && t.precision === 'float64') ? 'float64' : 'float32';
}

/** The tensor's data in precision p (no copy when it already is). */
export function dataAs(t: Tensor, p: Precision): Data {
  return castData(t.data, p);
}

export function checkTensors(op: string, ...named: readonly [string, unknown][]): void {
  for (const [what, t] of named) checkTensor(t, `${op}: ${what}`);
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((s, i) => s === b[i]);
}

export function shapeError(op: string, msg: string): FAError {
  return new FAError('E_SHAPE', `${op}: ${msg}`);
}

/** Normalises a possibly negative axis against a rank. */
export function axis(op: string, dim: number, rank: number): number {
  const d = dim < 0 ? dim + rank : dim;
  if (!Number.isInteger(d) || d < 0 || d >= rank) throw new FAError('E_ARG', `${op}: dim ${dim} is out of range for a tensor of rank ${rank}`);
  return d;
}

export { shapeStr };
