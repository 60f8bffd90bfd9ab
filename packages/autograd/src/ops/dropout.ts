/**
 * dropout(x, p, { seed, offset }): y = x·m/(1 − p) with m core's element mask (philox.ts
 * dropoutKeepElements: element e's Philox word, keyed by seed and offset), so a run is the same
 * on every engine and repeats by seed; backward multiplies the gradient by the same mask (no mask
 * is stored: it is drawn again from the key). Float32 runs on the model engine (`dropout` of
 * its model ops) or on the device; float64 (gradcheck's twin) here.
 */
import { FAError, dropoutKeepElements, resolveDropout, type DropoutCall, type DropoutSpec } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { checkTensors } from './util.js';
import { modelEngine } from '../engine.js';
import { deviceZeros, engineOf, onEngine, runOnDevice, type DeviceArray } from '../device.js';

export interface DropoutOptions {
  /** The mask's key: an integer in [0, 2^53). Use a new seed (or offset) for every call that should draw a new mask. */
  readonly seed: number;
  /** A second part of the key, in [0, 2^32) (default 0): e.g. the layer, with one seed a step. */
  readonly offset?: number;
}

function spec(p: number, o: DropoutOptions): DropoutSpec | undefined {
  if (typeof o !== 'object' || o === null) throw new FAError('E_ARG', 'dropout: options { seed, offset? } are required (the mask is drawn from them)');
  try {
    return resolveDropout({ p, seed: o.seed, offset: o.offset ?? 0 });
  } catch (e) {
    throw new FAError('E_ARG', `dropout: ${(e as Error).message}`);
  }
}

/** y = x·m/(1 − p) in float64 (the twin of the engines' float32 op). */
function dropout64(d: DropoutSpec, x: Data, y: Data): void {
  const keep = new Uint8Array(x.length);
  dropoutKeepElements(d, 0, keep);
  for (let i = 0; i < x.length; i++) y[i] = keep[i] ? x[i] * d.keepScale : 0;
}

function run(d: DropoutSpec, call: DropoutCall, p: Precision): void {
  if (p === 'float32') modelEngine().dropout(call);
  else dropout64(d, call.x, call.y);
}

export function dropout(x: Tensor, p: number, opts: DropoutOptions): Tensor {
  checkTensors('dropout', ['x', x]);
  const d = spec(p, opts);
  if (!d) return x; // p = 0 (or below 2^-32): nothing is dropped
  const call = { p, seed: opts.seed, offset: opts.offset ?? 0 };
  if (x.onDevice) {
    const e = engineOf('dropout', x.storage)!;
    const out = deviceZeros(e, x.size, true);
    runOnDevice(e, 'dropout', { ...call, x: x.storage as DeviceArray, y: out });
    const back: BackwardFn = ([g]) => {
      const dx = deviceZeros(e, x.size, true);
      runOnDevice(e, 'dropout', { ...call, x: onEngine(e, g), y: dx });
      return [dx as unknown as Data];
    };
    return record1('dropout', [x], out as unknown as Data, x.shape, [], back);
  }
  const prec = x.precision;
  const out = alloc(prec, x.size);
  run(d, { ...call, x: x.data as Float32Array, y: out as Float32Array }, prec);
  const back: BackwardFn = ([g]) => {
    const dx = alloc(prec, x.size);
    run(d, { ...call, x: g as Float32Array, y: dx as Float32Array }, prec);
    return [dx];
  };
  return record1('dropout', [x], out, x.shape, [], back);
}
