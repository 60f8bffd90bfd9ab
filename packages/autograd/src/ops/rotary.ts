/**
 * rotary(x, tables, { offset, interleaved }): rotary position embedding of x [B, T, H, D] in
 * DESIGN.md's convention (the KV-cache call's): the first rotaryDim dims of each head at position
 * offset + t, pairs (m, m + rd/2) — GPT-NeoX — or (2m, 2m + 1) with interleaved — GPT-J;
 * x'_a = x_a·cos − x_b·sin, x'_b = x_b·cos + x_a·sin. The backward rotates the gradient by −θ.
 * Saves nothing but the tables (shared by every call). Float32 runs on the model engine; float64
 * (gradcheck's twin) on core's cpu kernel in float64 arrays.
 */
import { FAError, rotaryCpu, type RotaryCall } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn } from '../node.js';
import { checkTensors, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';
import { DeviceArray, deviceFrom, deviceZeros, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

/** The tables on each engine that used them (uploaded once). */
const onEngines = new WeakMap<RotaryTables, Map<DeviceEngine, { cos: DeviceArray; sin: DeviceArray }>>();
function tablesOn(e: DeviceEngine, t: RotaryTables): { cos: DeviceArray; sin: DeviceArray } {
  let m = onEngines.get(t);
  if (!m) onEngines.set(t, (m = new Map()));
  let d = m.get(e);
  if (!d) m.set(e, (d = { cos: deviceFrom(e, t.cos), sin: deviceFrom(e, t.sin) }));
  return d;
}

function applyDevice(e: DeviceEngine, x: DeviceArray, shape: readonly number[], t: RotaryTables, o: RotaryOptions, inverse: boolean): DeviceArray {
  const [batch, seq, heads, dim] = shape;
  const y = deviceZeros(e, x.length, true);
  const { cos, sin } = tablesOn(e, t);
  runOnDevice(e, 'rotary', { batch, seq, heads, dim, rotaryDim: t.rotaryDim, x, y, cos, sin, positionOffset: o.offset ?? 0, interleaved: o.interleaved === true, inverse });
  return y;
}

/** cos and sin tables [maxPos, rotaryDim / 2]: θ(p, m) = p · base^(−2m / rotaryDim). */
export interface RotaryTables {
  readonly maxPos: number;
  readonly rotaryDim: number;
  readonly cos: Float32Array;
  readonly sin: Float32Array;
}

/** The tables of positions 0 … maxPos − 1 (base 10000, as RoPE). */
export function rotaryTables(maxPos: number, rotaryDim: number, base = 10000): RotaryTables {
  if (!Number.isSafeInteger(maxPos) || maxPos < 1 || !Number.isSafeInteger(rotaryDim) || rotaryDim < 2 || rotaryDim % 2 !== 0) {
    throw new FAError('E_ARG', `rotaryTables: maxPos must be a positive integer and rotaryDim an even integer >= 2, got ${maxPos}, ${rotaryDim}`);
  }
  const half = rotaryDim / 2;
  const cos = new Float32Array(maxPos * half), sin = new Float32Array(maxPos * half);
  for (let p = 0; p < maxPos; p++) {
    for (let m = 0; m < half; m++) {
      const th = p * base ** (-(2 * m) / rotaryDim);
      cos[p * half + m] = Math.cos(th);
      sin[p * half + m] = Math.sin(th);
    }
  }
  return { maxPos, rotaryDim, cos, sin };
}

export interface RotaryOptions {
  /** Position of token 0 (a KV cache's length when decoding); default 0. */
  offset?: number;
  /** GPT-J pairs (2m, 2m + 1) instead of GPT-NeoX halves. */
  interleaved?: boolean;
}

function apply(x: Data, y: Data, shape: readonly number[], t: RotaryTables, o: RotaryOptions, inverse: boolean, p: Precision): void {
  const [batch, seq, heads, dim] = shape;
  const call: RotaryCall = { batch, seq, heads, dim, rotaryDim: t.rotaryDim, x: x as Float32Array, y: y as Float32Array, cos: t.cos, sin: t.sin, positionOffset: o.offset ?? 0, interleaved: o.interleaved === true, inverse };
  if (p === 'float32') modelEngine().rotary(call);
  else rotaryCpu(call);
}

export function rotary(x: Tensor, tables: RotaryTables, options: RotaryOptions = {}): Tensor {
  checkTensors('rotary', ['x', x]);
  if (x.ndim !== 4) throw new FAError('E_SHAPE', `rotary: x must be [B, T, H, D], got ${shapeStr(x.shape)}`);
  if (tables.rotaryDim > x.shape[3]) throw new FAError('E_SHAPE', `rotary: rotaryDim ${tables.rotaryDim} exceeds the head dim ${x.shape[3]}`);
  const offset = options.offset ?? 0;
  if (!Number.isSafeInteger(offset) || offset < 0 || offset + x.shape[1] > tables.maxPos) {
    throw new FAError('E_SHAPE', `rotary: positions ${offset} … ${offset + x.shape[1] - 1} need tables of at least ${offset + x.shape[1]} positions, these have ${tables.maxPos}`);
  }
  if (x.device) {
    const e = x.device.engine, shape = x.shape;
    const out = applyDevice(e, x.device, shape, tables, options, false);
    const backDev: BackwardFn = ([g]) => [applyDevice(e, onEngine(e, g), shape, tables, options, true) as unknown as Data];
    return record1('rotary', [x], out as unknown as Data, x.shape, [], backDev);
  }
  const p = x.precision;
  const out = alloc(p, x.size);
  apply(x.data, out, x.shape, tables, options, false, p);
  const shape = x.shape;
  const back: BackwardFn = ([g]) => {
    const gx = alloc(p, g.length);
    apply(g, gx, shape, tables, options, true, p);
    return [gx];
  };
  return record1('rotary', [x], out, x.shape, [], back);
}
