/**
 * layerNorm(x, weight, bias, eps): normalises over the last dim, then scales and shifts
 * (PyTorch's F.layer_norm with normalized_shape = [C]). Saves x and the per-row mean and 1/σ.
 * Float32 runs on the model engine (engine.ts); float64 (gradcheck's twin) on core's cpu kernels.
 */
import { layerNormBackwardCpu, layerNormCpu, type LayerNormBackwardCall, type LayerNormCall } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn, type Saved } from '../node.js';
import { checkTensors, dataAs, promote, shapeError, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';
import { DeviceArray, deviceZeros, engineOf, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

function layerNormBackwardDevice(e: DeviceEngine, x: DeviceArray, mean: DeviceArray, rstd: DeviceArray, w: DeviceArray | null, rows: number, C: number): BackwardFn {
  return ([gh], needs) => {
    const f = (need: boolean, n: number) => (need ? deviceZeros(e, n, true) : null);
    const [dx, dw, db] = [f(needs[0], rows * C), f(needs[1], C), f(needs[2], C)];
    runOnDevice(e, 'layerNormBackward', { rows, cols: C, x, mean, rstd, weight: w, dy: onEngine(e, gh), dx, dweight: dw, dbias: db });
    return [dx, dw, db] as unknown as (Data | null)[];
  };
}

type F = Float32Array;

function layerNormBackward(x: Data, mean: Data, rstd: Data, w: Data | null, rows: number, C: number, p: Precision): BackwardFn {
  return ([g], needs) => {
    const f = (need: boolean, n: number) => (need ? alloc(p, n) : null);
    const [dx, dw, db] = [f(needs[0], rows * C), f(needs[1], C), f(needs[2], C)];
    const call = { rows, cols: C, x: x as F, mean: mean as F, rstd: rstd as F, weight: w as F | null, dy: g as F, dx: dx as F | null, dweight: dw as F | null, dbias: db as F | null } satisfies LayerNormBackwardCall;
    // float32 on the model engine; float64 (gradcheck's twin) on core's cpu kernel in float64 arrays
    if (p === 'float32') modelEngine().layerNormBackward(call);
    else layerNormBackwardCpu(call);
    return [dx, dw, db];
  };
}

export function layerNorm(x: Tensor, weight?: Tensor | null, bias?: Tensor | null, eps = 1e-5): Tensor {
  checkTensors('layerNorm', ['x', x]);
  const C = x.shape[x.ndim - 1];
  if (x.ndim < 1 || C === 0) throw shapeError('layerNorm', `x must have a non-empty last dim, got ${shapeStr(x.shape)}`);
  for (const [what, t] of [['weight', weight], ['bias', bias]] as const) {
    if (t != null) {
      checkTensors('layerNorm', [what, t]);
      if (t.ndim !== 1 || t.shape[0] !== C) throw shapeError('layerNorm', `${what} must be [${C}], got ${shapeStr(t.shape)}`);
    }
  }
  const e = engineOf('layerNorm', x.storage, weight?.storage, bias?.storage);
  if (e) {
    const rows = x.size / C;
    const out = deviceZeros(e, x.size, true), mean = deviceZeros(e, rows, true), rstd = deviceZeros(e, rows, true);
    const xd = x.storage as DeviceArray, wd = (weight?.storage ?? null) as DeviceArray | null;
    runOnDevice(e, 'layerNorm', { rows, cols: C, x: xd, weight: wd, bias: bias?.storage ?? null, eps, y: out, mean, rstd });
    const saved: Saved[] = [{ what: 'x', data: xd as unknown as ArrayBufferView, leaf: x.isLeaf }, saveBuffer('mean', mean as unknown as ArrayBufferView), saveBuffer('rstd', rstd as unknown as ArrayBufferView)];
    return record1('layerNorm', [x, weight, bias], out as unknown as Data, x.shape, saved, layerNormBackwardDevice(e, xd, mean, rstd, wd, rows, C));
  }
  const p = promote(x, weight, bias);
  const xd = dataAs(x, p);
  const wd = weight != null ? dataAs(weight, p) : null;
  const bd = bias != null ? dataAs(bias, p) : null;
  const rows = x.size / C;
  const out = alloc(p, x.size);
  const mean = alloc(p, rows);
  const rstd = alloc(p, rows);
  const call = { rows, cols: C, x: xd as F, weight: wd as F | null, bias: bd as F | null, eps, y: out as F, mean: mean as F, rstd: rstd as F } satisfies LayerNormCall;
  if (p === 'float32') modelEngine().layerNorm(call);
  else layerNormCpu(call);
  const saved: Saved[] = [
    { what: 'x', data: xd, leaf: x.isLeaf && xd === x.data },
    saveBuffer('mean', mean),
    saveBuffer('rstd', rstd),
  ];
  if (wd) saved.push({ what: 'weight', data: wd, leaf: weight!.isLeaf && wd === weight!.data });
  return record1('layerNorm', [x, weight, bias], out, x.shape, saved, layerNormBackward(xd, mean, rstd, wd, rows, C, p));
}
