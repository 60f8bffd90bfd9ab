/**
 * The element-wise and per-row model ops on the shader cores (issue 25; core's ops/layer-ops.ts
 * conventions): gelu (exact and tanh) and SiLU/SwiGLU forward and backward, layerNorm forward and
 * backward, softmax cross-entropy (per-row logsumexp and loss, then one workgroup summing the
 * counted rows) and its backward, AdamW, the row sum. f32 arithmetic throughout (WGSL has no f64:
 * sums run in f32, in a fixed order, so results repeat bit for bit).
 *
 * Every kernel reads one Params block. Element-wise kernels run one thread per element on a 2-D
 * grid of 64-thread workgroups (grid1d); per-row kernels one 64-thread workgroup per row (rows on
 * x and y); per-column kernels (the weight and bias gradients, the row sum) one thread per column,
 * looping over rows, so that a warp reads consecutive columns.
 */

import { PHILOX_WGSL } from './dropout.js';

const PARAMS = `struct Params { n: u32, rows: u32, cols: u32, flags: u32, f0: f32, f1: f32, f2: f32, f3: f32, f4: f32, f5: f32, f6: f32, f7: f32 }
@group(0) @binding(0) var<uniform> p: Params;`;

/** Bytes of the Params block. */
export const LAYER_PARAMS_BYTES = 48;

const EW_INDEX = `  let i = (wid.y * nw.x + wid.x) * 64u + lid;
  if (i >= p.n) { return; }`;
const EW_MAIN = '@compute @workgroup_size(64)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {';
const ROW_MAIN = '@compute @workgroup_size(64)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n  let r = wid.y * nw.x + wid.x;\n  if (r >= p.rows) { return; }';

/** Φ(x) without cancellation in either tail (Abramowitz-Stegun 7.1.26 on |x|/√2: 1.5e-7 absolute in erf). */
const PHI = `fn phi(x: f32) -> f32 {
  let z = abs(x) * 0.70710678;
  let t = 1.0 / (1.0 + 0.3275911 * z);
  let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  let tail = 0.5 * poly * exp(-z * z); // = 1 - Φ(|x|)
  return select(1.0 - tail, tail, x < 0.0);
}
const TANH_C: f32 = 0.7978845608;`;

/** flags bit 0: tanh form. */
export function geluWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
${PHI}
${EW_MAIN}
${EW_INDEX}
  let v = x[i];
  if ((p.flags & 1u) != 0u) { y[i] = 0.5 * v * (1.0 + tanh(TANH_C * (v + 0.044715 * v * v * v))); } else { y[i] = v * phi(v); }
}`;
}

/** flags bit 0: tanh form; bit 1: accumulate into dx. */
export function geluBackwardWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;
${PHI}
${EW_MAIN}
${EW_INDEX}
  let v = x[i];
  var g: f32;
  if ((p.flags & 1u) != 0u) {
    let t = tanh(TANH_C * (v + 0.044715 * v * v * v));
    g = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * TANH_C * (1.0 + 3.0 * 0.044715 * v * v);
  } else {
    g = phi(v) + v * 0.39894228 * exp(-0.5 * v * v);
  }
  var d = dy[i] * g;
  if ((p.flags & 2u) != 0u) { d += dx[i]; }
  dx[i] = d;
}`;
}

const SIGMOID = 'fn sigmoid(v: f32) -> f32 { return select(1.0 / (1.0 + exp(-v)), exp(v) / (1.0 + exp(v)), v < 0.0); }';

/** y = silu(x) (· gate when flags bit 0). */
export function siluWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gate: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
${SIGMOID}
${EW_MAIN}
${EW_INDEX}
  let v = x[i];
  var s = v * sigmoid(v);
  if ((p.flags & 1u) != 0u) { s *= gate[i]; }
  y[i] = s;
}`;
}

/** flags bit 0: gate; bit 1: write dgate; bit 2: accumulate into dx. */
export function siluBackwardWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gate: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> dgate: array<f32>;
${SIGMOID}
${EW_MAIN}
${EW_INDEX}
  let v = x[i];
  let s = sigmoid(v);
  var g = dy[i];
  if ((p.flags & 1u) != 0u) {
    if ((p.flags & 2u) != 0u) {
      dgate[i] = g * v * s; // (accumulate applies to dx only, as on the host engines)
    }
    g *= gate[i];
  }
  var d = g * s * (1.0 + v * (1.0 - s));
  if ((p.flags & 4u) != 0u) { d += dx[i]; }
  dx[i] = d;
}`;
}

/** f0 lr, f1 beta1, f2 beta2, f3 eps, f4 decay (1 − lr·wd), f5 1 − beta1^step, f6 1 − beta2^step. */
export function adamwWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let gj = g[i];
  let mj = p.f1 * m[i] + (1.0 - p.f1) * gj;
  let vj = p.f2 * v[i] + (1.0 - p.f2) * gj * gj;
  m[i] = mj;
  v[i] = vj;
  x[i] = x[i] * p.f4 - (p.f0 * (mj / p.f5)) / (sqrt(vj / p.f6) + p.f3);
}`;
}

/** out[j] = Σ_r x[r, j] (+ out[j] with flags bit 0), one thread per column. */
export function sumRowsWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
${EW_MAIN}
  let j = (wid.y * nw.x + wid.x) * 64u + lid;
  if (j >= p.cols) { return; }
  var s = 0.0;
  for (var r = 0u; r < p.rows; r++) { s += x[r * p.cols + j]; }
  if ((p.flags & 1u) != 0u) { s += out[j]; }
  out[j] = s;
}`;
}

/** The sum over a 64-thread workgroup of each thread's `v` (every thread gets it). */
const WG_SUM = `var<workgroup> red: array<f32, 64>;
fn wgSum(v: f32, lid: u32) -> f32 {
  workgroupBarrier();
  red[lid] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  return red[0];
}
fn wgMax(v: f32, lid: u32) -> f32 {
  workgroupBarrier();
  red[lid] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  return red[0];
}`;

/** flags bit 0: weight; bit 1: bias. f0 eps. */
export function layerNormWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> mean: array<f32>;
@group(0) @binding(6) var<storage, read_write> rstd: array<f32>;
${WG_SUM}
${ROW_MAIN}
  let o = r * p.cols;
  // the mean of x − x[0] (values of the spread's size, not of the row's offset), then x[0] back
  // (x − x[0]) is exact for values near x[0] (Sterbenz), and x − mean = (x − x[0]) − δ is formed
  // from small numbers: a row far from 0 (mean 1000, spread 1) keeps float32's relative accuracy
  let x0 = x[o];
  var s = 0.0;
  for (var j = lid; j < p.cols; j += 64u) { s += x[o + j] - x0; }
  let delta = wgSum(s, lid) / f32(p.cols);
  let mu = x0 + delta;
  var q = 0.0;
  for (var j = lid; j < p.cols; j += 64u) { let d = (x[o + j] - x0) - delta; q += d * d; }
  let rs = 1.0 / sqrt(wgSum(q, lid) / f32(p.cols) + p.f0);
  for (var j = lid; j < p.cols; j += 64u) {
    var v = ((x[o + j] - x0) - delta) * rs;
    if ((p.flags & 1u) != 0u) { v *= w[j]; }
    if ((p.flags & 2u) != 0u) { v += b[j]; }
    y[o + j] = v;
  }
  if (lid == 0u) { mean[r] = mu; rstd[r] = rs; }
}`;
}

/** dx per row: rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·w. flags bit 0: weight. */
export function layerNormBackwardDxWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> mean: array<f32>;
@group(0) @binding(3) var<storage, read> rstd: array<f32>;
@group(0) @binding(4) var<storage, read> w: array<f32>;
@group(0) @binding(5) var<storage, read> dy: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<f32>;
${WG_SUM}
${ROW_MAIN}
  let o = r * p.cols;
  let mu = mean[r];
  let rs = rstd[r];
  var sg = 0.0;
  var sgx = 0.0;
  for (var j = lid; j < p.cols; j += 64u) {
    var g = dy[o + j];
    if ((p.flags & 1u) != 0u) { g *= w[j]; }
    sg += g;
    sgx += g * (x[o + j] - mu) * rs;
  }
  let mg = wgSum(sg, lid) / f32(p.cols);
  let mgx = wgSum(sgx, lid) / f32(p.cols);
  for (var j = lid; j < p.cols; j += 64u) {
    var g = dy[o + j];
    if ((p.flags & 1u) != 0u) { g *= w[j]; }
    dx[o + j] = rs * (g - mg - (x[o + j] - mu) * rs * mgx);
  }
}`;
}

/** dweight[j] = Σ_r dy·x̂ (flags bit 0), dbias[j] = Σ_r dy (flags bit 1), one thread per column. */
export function layerNormBackwardWbWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> mean: array<f32>;
@group(0) @binding(3) var<storage, read> rstd: array<f32>;
@group(0) @binding(4) var<storage, read> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dw: array<f32>;
@group(0) @binding(6) var<storage, read_write> db: array<f32>;
${EW_MAIN}
  let j = (wid.y * nw.x + wid.x) * 64u + lid;
  if (j >= p.cols) { return; }
  var sw = 0.0;
  var sb = 0.0;
  for (var r = 0u; r < p.rows; r++) {
    let g = dy[r * p.cols + j];
    sw += g * (x[r * p.cols + j] - mean[r]) * rstd[r];
    sb += g;
  }
  if ((p.flags & 1u) != 0u) { dw[j] = sw; }
  if ((p.flags & 2u) != 0u) { db[j] = sb; }
}`;
}

/** Per row: lse, and the row's loss (lse − logit[target]) and count into rl[2r], rl[2r+1]. f0: ignoreIndex (as f32 bits of an i32 in flags). */
export function crossEntropyRowsWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> t: array<i32>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;
@group(0) @binding(4) var<storage, read_write> rl: array<f32>;
${WG_SUM}
${ROW_MAIN}
  let o = r * p.cols;
  let tr = t[r];
  if (tr == bitcast<i32>(p.flags)) {
    if (lid == 0u) { lse[r] = 0.0; rl[2u * r] = 0.0; rl[2u * r + 1u] = 0.0; }
    return;
  }
  var m = bitcast<f32>(0xff7fffffu); // (−FLT_MAX)
  for (var j = lid; j < p.cols; j += 64u) { m = max(m, x[o + j]); }
  m = wgMax(m, lid);
  var s = 0.0;
  for (var j = lid; j < p.cols; j += 64u) { s += exp(x[o + j] - m); }
  let l = m + log(wgSum(s, lid));
  if (lid == 0u) { lse[r] = l; rl[2u * r] = l - x[o + u32(tr)]; rl[2u * r + 1u] = 1.0; }
}`;
}

/** loss[0] = Σ_r rl[2r], loss[1] = Σ_r rl[2r+1]: one workgroup, rows in a fixed order. */
export function crossEntropySumWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> rl: array<f32>;
@group(0) @binding(2) var<storage, read_write> loss: array<f32>;
${WG_SUM}
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  var c = 0.0;
  for (var r = lid; r < p.rows; r += 64u) { s += rl[2u * r]; c += rl[2u * r + 1u]; }
  let ts = wgSum(s, lid);
  let tc = wgSum(c, lid);
  if (lid == 0u) { loss[0] = ts; loss[1] = tc; }
}`;
}

/** dlogits = scale·(softmax − onehot), 0 on ignored rows. flags: ignoreIndex bits; f0 scale. */
export function crossEntropyBackwardWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> lse: array<f32>;
@group(0) @binding(3) var<storage, read> t: array<i32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let r = i / p.cols;
  let j = i % p.cols;
  let tr = t[r];
  if (tr == bitcast<i32>(p.flags)) { dx[i] = 0.0; return; }
  var d = exp(x[i] - lse[r]);
  if (i32(j) == tr) { d -= 1.0; }
  dx[i] = p.f0 * d;
}`;
}

/** y = x·rstd·w per row, rstd = 1/√(mean(x²) + eps). flags bit 0: weight; f0 eps. */
export function rmsNormWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> rstd: array<f32>;
${WG_SUM}
${ROW_MAIN}
  let o = r * p.cols;
  var q = 0.0;
  for (var j = lid; j < p.cols; j += 64u) { q += x[o + j] * x[o + j]; }
  let rs = 1.0 / sqrt(wgSum(q, lid) / f32(p.cols) + p.f0);
  for (var j = lid; j < p.cols; j += 64u) {
    var v = x[o + j] * rs;
    if ((p.flags & 1u) != 0u) { v *= w[j]; }
    y[o + j] = v;
  }
  if (lid == 0u) { rstd[r] = rs; }
}`;
}

/** dx = rstd·(dy·w − x·rstd·mean(dy·w·x̂)) per row. flags bit 0: weight. */
export function rmsNormBackwardDxWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;
${WG_SUM}
${ROW_MAIN}
  let o = r * p.cols;
  let rs = rstd[r];
  var s = 0.0;
  for (var j = lid; j < p.cols; j += 64u) {
    var g = dy[o + j];
    if ((p.flags & 1u) != 0u) { g *= w[j]; }
    s += g * x[o + j] * rs;
  }
  let m = wgSum(s, lid) / f32(p.cols);
  for (var j = lid; j < p.cols; j += 64u) {
    var g = dy[o + j];
    if ((p.flags & 1u) != 0u) { g *= w[j]; }
    dx[o + j] = rs * (g - x[o + j] * rs * m);
  }
}`;
}

/** dweight[j] = Σ_r dy·x·rstd, one thread per column. */
export function rmsNormBackwardWWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dw: array<f32>;
${EW_MAIN}
  let j = (wid.y * nw.x + wid.x) * 64u + lid;
  if (j >= p.cols) { return; }
  var s = 0.0;
  for (var r = 0u; r < p.rows; r++) { s += dy[r * p.cols + j] * x[r * p.cols + j] * rstd[r]; }
  dw[j] = s;
}`;
}

/**
 * Rotary embedding, one thread per (row, pair) with a row = (b, t, h) of `dim` values and the
 * columns past rotaryDim copied (out of place). u: n = rows·(dim/2 slots), rows = heads, cols = seq;
 * flags bit 0 interleaved, bit 1 inverse; f0..: dim, rotaryDim, positionOffset as f32 bits.
 */
export function rotaryWGSL(inPlace: boolean): string {
  const io = inPlace
    ? '@group(0) @binding(1) var<storage, read_write> y: array<f32>;'
    : '@group(0) @binding(1) var<storage, read> x: array<f32>;\n@group(0) @binding(4) var<storage, read_write> y: array<f32>;';
  const X = inPlace ? 'y' : 'x';
  return `${PARAMS}
${io}
@group(0) @binding(2) var<storage, read> cosT: array<f32>;
@group(0) @binding(3) var<storage, read> sinT: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let D = bitcast<u32>(p.f0);
  let rd = bitcast<u32>(p.f1);
  let off = bitcast<u32>(p.f2);
  let half = rd / 2u;
  let slots = (D + 1u) / 2u;           // threads per row: rotated pairs first, then copied pairs
  let row = i / slots;
  let m = i % slots;
  let t = (row / p.rows) % p.cols;     // row = (b·seq + t)·heads + h
  let o = row * D;
  if (m < half) {
    var ia = o + m;
    var ib = o + m + half;
    if ((p.flags & 1u) != 0u) { ia = o + 2u * m; ib = ia + 1u; }
    let pi = (off + t) * half + m;
    let co = cosT[pi];
    var si = sinT[pi];
    if ((p.flags & 2u) != 0u) { si = -si; }
    let xa = ${X}[ia];
    let xb = ${X}[ib];
    y[ia] = xa * co - xb * si;
    y[ib] = xb * co + xa * si;
  } else if (${inPlace ? 'false' : 'true'}) {
    // columns rd.. are copied two a thread
    let j = rd + 2u * (m - half);
    if (j < D) { y[o + j] = ${X}[o + j]; }
    if (j + 1u < D) { y[o + j + 1u] = ${X}[o + j + 1u]; }
  }
}`;
}

/** y[i] = alpha·x[i] + beta·y[i] for i < n (beta 0: y = alpha·x, y's old values unread). f0 alpha, f1 beta. */
export function axpyWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
${EW_MAIN}
${EW_INDEX}
  var v = p.f0 * x[i];
  if (p.f1 != 0.0) { v += p.f1 * y[i]; }
  y[i] = v;
}`;
}

/** out[r, c] = table[ids[r], c] (+ out with flags bit 0). n = rows·dim, cols = dim. */
export function embeddingWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let r = i / p.cols;
  let c = i % p.cols;
  var v = table[u32(ids[r]) * p.cols + c];
  if ((p.flags & 1u) != 0u) { v += out[i]; }
  out[i] = v;
}`;
}

/**
 * dtable[v, c] = Σ grad[r, c] over the rows r whose id is v (+ dtable with flags bit 0), one
 * thread per (v, c): the rows of each id come from a CSR list made on the host from the ids'
 * mirror (offsets [V + 1], then rows), so the sums run in a fixed order — no atomics, the same
 * bits every run. n = V·dim, cols = dim, rows = V.
 */
export function embeddingBackwardWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read> csr: array<u32>;
@group(0) @binding(3) var<storage, read_write> dtable: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let v = i / p.cols;
  let c = i % p.cols;
  let base = p.rows + 1u;
  var s = 0.0;
  for (var k = csr[v]; k < csr[v + 1u]; k++) { s += grad[csr[base + k] * p.cols + c]; }
  if ((p.flags & 1u) != 0u) { s += dtable[i]; }
  dtable[i] = s;
}`;
}

/**
 * dst[dOff + r·dStride + c] (+)= src[sOff + r·sStride + c] for r < rows, c < cols: the strided
 * copy behind splitting a fused projection, joining heads and their gradients. n = rows·cols;
 * u32s after the header: sOff, sStride, dOff, dStride as f32 bits in f0..f3. flags bit 0: accumulate.
 */
export function copy2dWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let r = i / p.cols;
  let c = i % p.cols;
  let s = bitcast<u32>(p.f0) + r * bitcast<u32>(p.f1) + c;
  let d = bitcast<u32>(p.f2) + r * bitcast<u32>(p.f3) + c;
  var v = src[s];
  if ((p.flags & 1u) != 0u) { v += dst[d]; }
  dst[d] = v;
}`;
}

/** y[i] = a[i]·b[i mod m] (b the same size, or repeated over a's leading rows). u.x n, u.cols m. */
export function mulWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
${EW_MAIN}
${EW_INDEX}
  y[i] = a[i] * b[i % p.cols];
}`;
}

/**
 * Softmax along one axis of an [outer, n, inner] view, one thread per (outer, inner) line:
 * max, sum of exps, then the normalised values, in a fixed order. u: n = outer·inner lines,
 * rows = n (the axis), cols = inner.
 */
export function softmaxWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let o = i / p.cols;
  let base = o * p.rows * p.cols + i % p.cols;
  var m = bitcast<f32>(0xff7fffffu);
  for (var j = 0u; j < p.rows; j++) { m = max(m, x[base + j * p.cols]); }
  var s = 0.0;
  for (var j = 0u; j < p.rows; j++) { s += exp(x[base + j * p.cols] - m); }
  for (var j = 0u; j < p.rows; j++) { y[base + j * p.cols] = exp(x[base + j * p.cols] - m) / s; }
}`;
}

/** dx = y·(dy − Σ dy·y) along the axis (the layout of softmaxWGSL). */
export function softmaxBackwardWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let o = i / p.cols;
  let base = o * p.rows * p.cols + i % p.cols;
  var d = 0.0;
  for (var j = 0u; j < p.rows; j++) { d += dy[base + j * p.cols] * y[base + j * p.cols]; }
  for (var j = 0u; j < p.rows; j++) { let k = base + j * p.cols; dx[k] = y[k] * (dy[k] - d); }
}`;
}

/**
 * y = x with its axes permuted: thread i takes output element i, decomposes it over the output
 * shape and reads x at the permuted strides. dimsOf = [rank | out shape (8) | source strides (8)].
 */
export function permuteWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dimsOf: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let rank = dimsOf[0];
  var rest = i;
  var src = 0u;
  for (var d = rank; d > 0u; d--) {
    let dim = dimsOf[d];
    src += (rest % dim) * dimsOf[8u + d];
    rest /= dim;
  }
  y[i] = x[src];
}`;
}

/**
 * out[g] = Σ of x's values g·chunk … (g+1)·chunk − 1 (the last group: to n), one 256-thread
 * workgroup a group, a tree sum in workgroup memory (a fixed order). Run twice it sums a vector:
 * partials, then the partials. u: n, cols = chunk.
 */
export function sumChunksWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
var<workgroup> part: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let g = wid.y * nw.x + wid.x;
  let start = g * p.cols;
  let end = min(start + p.cols, p.n);
  var s = 0.0;
  for (var i = start + lid; i < end; i += 256u) { s += x[i]; }
  part[lid] = s;
  workgroupBarrier();
  for (var w = 128u; w > 0u; w >>= 1u) {
    if (lid < w) { part[lid] += part[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) { out[g] = part[0]; }
}`;
}

/** g *= min(1, maxNorm / (√ss[0] + 1e-6)) in place (gradient clipping by a global norm whose square is on the device). f0 maxNorm. */
export function scaleByNormWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read> ss: array<f32>;
${EW_MAIN}
${EW_INDEX}
  g[i] *= min(1.0, p.f0 / (sqrt(ss[0]) + 1e-6));
}`;
}

/**
 * out = a ⊕ b with NumPy broadcasting (rank at most 8): thread i decomposes its output index over
 * the output shape and reads each operand at its strides (0 along an axis it is broadcast on).
 * dims = [rank | out shape (8) | a strides (8) | b strides (8)]; flags: 0 add, 1 sub, 2 mul.
 */
export function broadcastWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> dimsOf: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let rank = dimsOf[0];
  var rest = i;
  var ia = 0u;
  var ib = 0u;
  for (var d = rank; d > 0u; d--) {
    let c = rest % dimsOf[d];
    rest /= dimsOf[d];
    ia += c * dimsOf[8u + d];
    ib += c * dimsOf[16u + d];
  }
  let x = a[ia];
  let z = b[ib];
  if (p.flags == 0u) { y[i] = x + z; } else if (p.flags == 1u) { y[i] = x - z; } else { y[i] = x * z; }
}`;
}

/**
 * The gradient of a broadcast operand: out[t] = alpha · Σ g over the axes the operand was
 * broadcast along, in a fixed order, one thread per element of the operand. dims = [rank |
 * full shape (8) | full strides (8) | operand shape (8), 1 on its broadcast axes]. f0 alpha.
 */
export function reduceToWGSL(): string {
  return `${PARAMS}
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read> dimsOf: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
${EW_MAIN}
${EW_INDEX}
  let rank = dimsOf[0];
  var rest = i;
  var base = 0u;
  var count = 1u;
  for (var d = rank; d > 0u; d--) {
    let small = dimsOf[16u + d];
    base += (rest % small) * dimsOf[8u + d];
    rest /= small;
    if (small == 1u) { count *= dimsOf[d]; }
  }
  var s = 0.0;
  for (var k = 0u; k < count; k++) {
    var r = k;
    var off = base;
    for (var d = rank; d > 0u; d--) {
      if (dimsOf[16u + d] == 1u && dimsOf[d] > 1u) {
        off += (r % dimsOf[d]) * dimsOf[8u + d];
        r /= dimsOf[d];
      }
    }
    s += g[off];
  }
  out[i] = p.f0 * s;
}`;
}

/**
 * dropout (core's layer-ops.ts; philox.ts dropoutKeepElements): y (+)= x·scale where element i
 * is kept. One thread per element (each recomputes its quad's Philox words: n is a tensor's
 * length, not T²). u32s: n, threshold, k0, flags (bit 0 accumulate); f0, f1, f2 as bits: k1,
 * offset, scale. `inPlace`: one read-write binding for x and y.
 */
export function dropoutWGSL(inPlace: boolean): string {
  return `${PARAMS}
${inPlace ? '@group(0) @binding(1) var<storage, read_write> y: array<f32>;' : '@group(0) @binding(1) var<storage, read> x: array<f32>;\n@group(0) @binding(2) var<storage, read_write> y: array<f32>;'}
${PHILOX_WGSL}
${EW_MAIN}
${EW_INDEX}
  let w = philox4x32(vec4<u32>(i >> 2u, 0u, 0xffffffffu, bitcast<u32>(p.f1)), vec2<u32>(p.cols, bitcast<u32>(p.f0)));
  let v = select(${inPlace ? 'y' : 'x'}[i] * p.f2, 0.0, w[i & 3u] < p.rows);
  if ((p.flags & 1u) != 0u) { y[i] = y[i] + v; } else { y[i] = v; }
}`;
}
