/**
 * rmsNorm(x, weight, eps): y = x / √(mean(x²) + eps) · weight over the last dim (LLaMA's
 * RMSNorm). Saves x and the per-row 1/rms. Float32 runs on the model engine (engine.ts); float64
 * (gradcheck's twin) on core's cpu kernels in float64 arrays.
 */
import { rmsNormBackwardCpu, rmsNormCpu, type RmsNormBackwardCall, type RmsNormCall } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn, type Saved } from '../node.js';
import { checkTensors, dataAs, promote, shapeError, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';
import { DeviceArray, deviceZeros, engineOf, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

function rmsNormBackwardDevice(e: DeviceEngine, x: DeviceArray, rstd: DeviceArray, w: DeviceArray | null, rows: number, C: number): BackwardFn {
  return ([gh], needs) => {
    const dx = needs[0] ? deviceZeros(e, rows * C, true) : null;
    const dw = needs[1] ? deviceZeros(e, C, true) : null;
    runOnDevice(e, 'rmsNormBackward', { rows, cols: C, x, rstd, weight: w, dy: onEngine(e, gh), dx, dweight: dw });
    return [dx, dw] as unknown as (Data | null)[];
  };
}

type F = Float32Array;

function rmsNormBackward(x: Data, rstd: Data, w: Data | null, rows: number, C: number, p: Precision): BackwardFn {
  return ([g], needs) => {
    const dx = needs[0] ? alloc(p, rows * C) : null;
    const dw = needs[1] ? alloc(p, C) : null;
    const call = { rows, cols: C, x: x as F, rstd: rstd as F, weight: w as F | null, dy: g as F, dx: dx as F | null, dweight: dw as F | null } satisfies RmsNormBackwardCall;
    if (p === 'float32') modelEngine().rmsNormBackward(call);
    else rmsNormBackwardCpu(call);
    return [dx, dw];
  };
}

export function rmsNorm(x: Tensor, weight?: Tensor | null, eps = 1e-6): Tensor {
  checkTensors('rmsNorm', ['x', x]);
  const C = x.shape[x.ndim - 1];
  if (x.ndim < 1 || C === 0) throw shapeError('rmsNorm', `x must have a non-empty last dim, got ${shapeStr(x.shape)}`);
  if (weight != null) {
    checkTensors('rmsNorm', ['weight', weight]);
    if (weight.ndim !== 1 || weight.shape[0] !== C) throw shapeError('rmsNorm', `weight must be [${C}], got ${shapeStr(weight.shape)}`);
  }
  const e = engineOf('rmsNorm', x.storage, weight?.storage);
  if (e) {
    const rows = x.size / C;
    const out = deviceZeros(e, x.size, true), rstd = deviceZeros(e, rows, true);
    const xd = x.storage as DeviceArray, wd = (weight?.storage ?? null) as DeviceArray | null;
    runOnDevice(e, 'rmsNorm', { rows, cols: C, x: xd, weight: wd, eps, y: out, rstd });
    const saved: Saved[] = [{ what: 'x', data: xd as unknown as ArrayBufferView, leaf: x.isLeaf }, saveBuffer('rstd', rstd as unknown as ArrayBufferView)];
    return record1('rmsNorm', [x, weight], out as unknown as Data, x.shape, saved, rmsNormBackwardDevice(e, xd, rstd, wd, rows, C));
  }
  const p = promote(x, weight);
  const xd = dataAs(x, p);
  const wd = weight != null ? dataAs(weight, p) : null;
  const rows = x.size / C;
  const out = alloc(p, x.size);
  const rstd = alloc(p, rows);
  const call = { rows, cols: C, x: xd as F, weight: wd as F | null, eps, y: out as F, rstd: rstd as F } satisfies RmsNormCall;
  if (p === 'float32') modelEngine().rmsNorm(call);
  else rmsNormCpu(call);
  const saved: Saved[] = [{ what: 'x', data: xd, leaf: x.isLeaf && xd === x.data }, saveBuffer('rstd', rstd)];
  if (wd) saved.push({ what: 'weight', data: wd, leaf: weight!.isLeaf && wd === weight!.data });
  return record1('rmsNorm', [x, weight], out, x.shape, saved, rmsNormBackward(xd, rstd, wd, rows, C, p));
}
