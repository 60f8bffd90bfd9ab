/**
 * layerNorm(x, weight, bias, eps): normalises over the last dim, then scales and shifts
 * (PyTorch's F.layer_norm with normalized_shape = [C]). Saves x and the per-row mean and 1/σ.
 * Float32 runs on the model engine (engine.ts); float64 (gradcheck's twin) here.
 */
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn, type Saved } from '../node.js';
import { checkTensors, dataAs, promote, shapeError, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';

function layerNormBackward(x: Data, mean: Data, rstd: Data, w: Data | null, rows: number, C: number, p: Precision): BackwardFn {
  return ([g], needs) => {
    if (p === 'float32') {
      const f = (need: boolean, n: number) => (need ? new Float32Array(n) : null);
      const [dx, dw, db] = [f(needs[0], rows * C), f(needs[1], C), f(needs[2], C)];
      modelEngine().layerNormBackward({ rows, cols: C, x: x as Float32Array, mean: mean as Float32Array, rstd: rstd as Float32Array, weight: w as Float32Array | null, dy: g as Float32Array, dx, dweight: dw, dbias: db });
      return [dx, dw, db];
    }
    const gx = needs[0] ? alloc(p, rows * C) : null;
    const gw = needs[1] ? new Float64Array(C) : null;
    const gb = needs[2] ? new Float64Array(C) : null;
    const xh = new Float64Array(C);
    const dxh = new Float64Array(C);
    for (let r = 0; r < rows; r++) {
      const o = r * C;
      const mu = mean[r];
      const rs = rstd[r];
      let s1 = 0;
      let s2 = 0;
      for (let c = 0; c < C; c++) {
        const xhat = (x[o + c] - mu) * rs;
        const dy = g[o + c];
        xh[c] = xhat;
        if (gw) gw[c] += dy * xhat;
        if (gb) gb[c] += dy;
        const d = w ? dy * w[c] : dy;
        dxh[c] = d;
        s1 += d;
        s2 += d * xhat;
      }
      if (gx) {
        const m1 = s1 / C;
        const m2 = s2 / C;
        for (let c = 0; c < C; c++) gx[o + c] = rs * (dxh[c] - m1 - xh[c] * m2);
      }
    }
    const cast = (a: Float64Array | null) => (a === null ? null : p === 'float64' ? a : Float32Array.from(a));
    return [gx, cast(gw), cast(gb)];
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
  const p = promote(x, weight, bias);
  const xd = dataAs(x, p);
  const wd = weight != null ? dataAs(weight, p) : null;
  const bd = bias != null ? dataAs(bias, p) : null;
  const rows = x.size / C;
  const out = alloc(p, x.size);
  const mean = alloc(p, rows);
  const rstd = alloc(p, rows);
  if (p === 'float32') {
    modelEngine().layerNorm({ rows, cols: C, x: xd as Float32Array, weight: wd as Float32Array | null, bias: bd as Float32Array | null, eps, y: out as Float32Array, mean: mean as Float32Array, rstd: rstd as Float32Array });
  } else for (let r = 0; r < rows; r++) {
    const o = r * C;
    let s = 0;
    for (let c = 0; c < C; c++) s += xd[o + c];
    const mu = s / C;
    let v = 0;
    for (let c = 0; c < C; c++) {
      const d = xd[o + c] - mu;
      v += d * d;
    }
    const rs = 1 / Math.sqrt(v / C + eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (let c = 0; c < C; c++) {
      let y = (xd[o + c] - mu) * rs;
      if (wd) y *= wd[c];
      if (bd) y += bd[c];
      out[o + c] = y;
    }
  }
  const saved: Saved[] = [
    { what: 'x', data: xd, leaf: x.isLeaf && xd === x.data },
    saveBuffer('mean', mean),
    saveBuffer('rstd', rstd),
  ];
  if (wd) saved.push({ what: 'weight', data: wd, leaf: weight!.isLeaf && wd === weight!.data });
  return record1('layerNorm', [x, weight, bias], out, x.shape, saved, layerNormBackward(xd, mean, rstd, wd, rows, C, p));
}
