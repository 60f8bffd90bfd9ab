/**
 * The model ops beside the matrix product (DESIGN.md, "Model ops"): the element-wise and per-row
 * passes of a transformer's step, each a synchronous call on float32 arrays in host memory for
 * the host engines. Every engine computes them to float32's rule against the float64 reference
 * of @fa/core/testing's op kit; the checkers here give one-line FAErrors before anything runs,
 * so a refused call leaves its outputs as they were.
 *
 * Conventions shared by every engine:
 * - gelu 'none' is x·Φ(x) with the exact normal CDF; 'tanh' is GPT-2's
 *   0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))).
 * - layerNorm normalises each row of `cols` with the biased variance, y = (x − μ)·rstd·w + b,
 *   rstd = 1/√(var + eps); mean and rstd are returned per row for the backward.
 * - crossEntropy returns the sum of the counted rows' losses (lse − logit[target]) and their
 *   count; rows whose target is ignoreIndex count for nothing, every other target must be a class.
 * - adamw is torch.optim.AdamW's update with decoupled weight decay, bias-corrected by `step`.
 * - rmsNorm: y = x·rstd·weight, rstd = 1/√(mean(x²) + eps) per row (LLaMA's RMSNorm).
 * - silu: y = x·σ(x), times `gate` when given (SwiGLU: silu(x W₁)·(x W₃)).
 * - dropout: y = x·m/(1 − p) (y += with accumulate), m the element mask of philox.ts
 *   (dropoutKeepElements: element e's Philox word, keyed by seed and offset, the same on every
 *   engine); its backward is the same call on dy with the same seed and offset.
 * - rotary: DESIGN.md's rotation of the first rotaryDim dims of each head at position
 *   positionOffset + t: pairs (m, m + rd/2), or (2m, 2m + 1) when interleaved;
 *   x'_a = x_a·cos − x_b·sin, x'_b = x_b·cos + x_a·sin; `inverse` rotates by −θ (the backward).
 */
import { FAError } from '../errors.js';
import { resolveDropout } from '../problem.js';

export type GeluApproximate = 'none' | 'tanh';

/** y = gelu(x). */
export interface GeluCall {
  x: Float32Array;
  y: Float32Array;
  approximate: GeluApproximate;
}

/** dx = dy · gelu′(x) (or dx += with accumulate). */
export interface GeluBackwardCall {
  x: Float32Array;
  dy: Float32Array;
  dx: Float32Array;
  approximate: GeluApproximate;
  accumulate?: boolean;
}

/** Per row of `cols`: y = (x − mean)·rstd·weight + bias; weight and bias [cols] or null. */
export interface LayerNormCall {
  rows: number;
  cols: number;
  x: Float32Array;
  weight: Float32Array | null;
  bias: Float32Array | null;
  eps: number;
  y: Float32Array;
  /** [rows], written */
  mean: Float32Array;
  /** [rows], written: 1/√(var + eps) */
  rstd: Float32Array;
}

/** The gradients of a layerNorm from its saved mean and rstd; each output is set, or skipped when null. */
export interface LayerNormBackwardCall {
  rows: number;
  cols: number;
  x: Float32Array;
  mean: Float32Array;
  rstd: Float32Array;
  weight: Float32Array | null;
  dy: Float32Array;
  dx: Float32Array | null;
  dweight: Float32Array | null;
  dbias: Float32Array | null;
}

/** Softmax cross-entropy per row of `classes` logits; writes each row's logsumexp (ignored rows: 0). */
export interface CrossEntropyCall {
  rows: number;
  classes: number;
  logits: Float32Array;
  targets: Int32Array;
  ignoreIndex: number;
  /** [rows], written */
  lse: Float32Array;
}

/** dlogits = scale · (softmax(logits) − onehot(target)) per counted row, 0 on ignored rows. */
export interface CrossEntropyBackwardCall {
  rows: number;
  classes: number;
  logits: Float32Array;
  lse: Float32Array;
  targets: Int32Array;
  ignoreIndex: number;
  scale: number;
  dlogits: Float32Array;
}

/** One AdamW update of a parameter in place, with its moments m and v (updated too). */
export interface AdamWCall {
  param: Float32Array;
  grad: Float32Array;
  m: Float32Array;
  v: Float32Array;
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** 1 on the first update (the bias corrections are 1 − β^step). */
  step: number;
}

/** out[c] = Σ_r x[r·cols + c] (or out += with accumulate): a bias's gradient. */
export interface SumRowsCall {
  rows: number;
  cols: number;
  x: Float32Array;
  out: Float32Array;
  accumulate?: boolean;
}

/** Per row of `cols`: y = x·rstd·weight (weight [cols] or null); rstd [rows] written. */
export interface RmsNormCall {
  rows: number;
  cols: number;
  x: Float32Array;
  weight: Float32Array | null;
  eps: number;
  y: Float32Array;
  rstd: Float32Array;
}

/** The gradients of an rmsNorm from its saved rstd; each output set, or skipped when null. */
export interface RmsNormBackwardCall {
  rows: number;
  cols: number;
  x: Float32Array;
  rstd: Float32Array;
  weight: Float32Array | null;
  dy: Float32Array;
  dx: Float32Array | null;
  dweight: Float32Array | null;
}

/** y = silu(x) (· gate): SiLU, or SwiGLU's product with a gate of x's length. */
export interface SiluCall {
  x: Float32Array;
  gate: Float32Array | null;
  y: Float32Array;
}

/** dx = dy·gate·silu′(x) (or += with accumulate); dgate = dy·silu(x) when asked. */
export interface SiluBackwardCall {
  x: Float32Array;
  gate: Float32Array | null;
  dy: Float32Array;
  dx: Float32Array;
  dgate: Float32Array | null;
  accumulate?: boolean;
}

/** y = x·m/(1 − p), or y += x·m/(1 − p) with accumulate (the backward: x = dy, y = dx). */
export interface DropoutCall {
  x: Float32Array;
  y: Float32Array;
  /** Drop probability in [0, 1); seed an integer below 2^53; offset below 2^32 (default 0). */
  p: number;
  seed: number;
  offset?: number;
  accumulate?: boolean;
}

/** Rotary position embedding of x [batch, seq, heads, dim] into y (y may be x). */
export interface RotaryCall {
  batch: number;
  seq: number;
  heads: number;
  dim: number;
  /** Even, at most dim: the dims rotated (the rest are copied). */
  rotaryDim: number;
  x: Float32Array;
  y: Float32Array;
  /** [maxPos, rotaryDim / 2] each. */
  cos: Float32Array;
  sin: Float32Array;
  /** Position of token t is positionOffset + t (a KV cache's length when decoding). */
  positionOffset: number;
  interleaved: boolean;
  inverse: boolean;
}

const isDim = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0 && (x as number) < 2 ** 31;
const isNum = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

function obj(who: string, c: unknown, fields: string): void {
  if (typeof c !== 'object' || c === null) throw new FAError('E_ARG', `${who}: the call must be an object { ${fields} }`);
}
function dims(who: string, c: Record<string, unknown>, ...names: string[]): void {
  for (const k of names) if (!isDim(c[k])) throw new FAError('E_SHAPE', `${who}: ${k} must be an integer from 0 to 2^31 - 1, got ${String(c[k])}`);
}
function f32(who: string, name: string, a: unknown, n: number, optional = false): void {
  if (optional && a == null) return;
  if (!(a instanceof Float32Array)) throw new FAError('E_DTYPE', `${who}: ${name} must be a Float32Array${optional ? ' or null' : ''}`);
  if (a.length !== n) throw new FAError('E_SHAPE', `${who}: ${name} holds ${a.length} values, ${n} expected`);
}
function overlap(x: Float32Array, y: Float32Array): boolean {
  return x.buffer === y.buffer && x.length > 0 && y.length > 0 && x.byteOffset < y.byteOffset + y.byteLength && y.byteOffset < x.byteOffset + x.byteLength;
}
/** Outputs must not overlap one another or an input (except where an op is documented in place). */
function separate(who: string, outs: [string, Float32Array | null | undefined][], ins: [string, Float32Array | null | undefined][]): void {
  for (let i = 0; i < outs.length; i++) {
    const [on, o] = outs[i];
    if (!o) continue;
    for (const [n, x] of [...outs.slice(i + 1), ...ins]) {
      if (x && overlap(o, x)) throw new FAError('E_ARG', `${who}: ${on} must not overlap ${n}`);
    }
  }
}
/** An output that may be the input itself (computed in place) but not a shifted view of it. */
function selfOrApart(who: string, outName: string, out: Float32Array, inName: string, x: Float32Array | null): void {
  if (x && out !== x && overlap(out, x) && out.byteOffset !== x.byteOffset) throw new FAError('E_ARG', `${who}: ${outName} must be ${inName} itself or not overlap it`);
}
function approx(who: string, a: unknown): void {
  if (a !== 'none' && a !== 'tanh') throw new FAError('E_ARG', `${who}: approximate must be 'none' or 'tanh', got ${String(a)}`);
}

export function checkGelu(c: GeluCall, who = 'gelu'): void {
  obj(who, c, 'x, y, approximate');
  approx(who, c.approximate);
  f32(who, 'x', c.x, (c.x as Float32Array | undefined)?.length ?? 0);
  f32(who, 'y', c.y, c.x.length);
  selfOrApart(who, 'y', c.y, 'x', c.x);
}

export function checkGeluBackward(c: GeluBackwardCall, who = 'geluBackward'): void {
  obj(who, c, 'x, dy, dx, approximate');
  approx(who, c.approximate);
  f32(who, 'x', c.x, (c.x as Float32Array | undefined)?.length ?? 0);
  f32(who, 'dy', c.dy, c.x.length);
  f32(who, 'dx', c.dx, c.x.length);
  separate(who, [['dx', c.dx]], [['x', c.x], ['dy', c.dy]]);
}

function checkEps(who: string, eps: unknown): void {
  if (!isNum(eps) || eps < 0) throw new FAError('E_ARG', `${who}: eps must be a finite number >= 0, got ${String(eps)}`);
}

export function checkLayerNorm(c: LayerNormCall, who = 'layerNorm'): void {
  obj(who, c, 'rows, cols, x, weight, bias, eps, y, mean, rstd');
  dims(who, c as unknown as Record<string, unknown>, 'rows', 'cols');
  checkEps(who, c.eps);
  const n = c.rows * c.cols;
  f32(who, 'x', c.x, n);
  f32(who, 'weight', c.weight, c.cols, true);
  f32(who, 'bias', c.bias, c.cols, true);
  f32(who, 'y', c.y, n);
  f32(who, 'mean', c.mean, c.rows);
  f32(who, 'rstd', c.rstd, c.rows);
  separate(who, [['y', c.y], ['mean', c.mean], ['rstd', c.rstd]], [['x', c.x], ['weight', c.weight], ['bias', c.bias]]);
}

export function checkLayerNormBackward(c: LayerNormBackwardCall, who = 'layerNormBackward'): void {
  obj(who, c, 'rows, cols, x, mean, rstd, weight, dy, dx, dweight, dbias');
  dims(who, c as unknown as Record<string, unknown>, 'rows', 'cols');
  const n = c.rows * c.cols;
  f32(who, 'x', c.x, n);
  f32(who, 'mean', c.mean, c.rows);
  f32(who, 'rstd', c.rstd, c.rows);
  f32(who, 'weight', c.weight, c.cols, true);
  f32(who, 'dy', c.dy, n);
  f32(who, 'dx', c.dx, n, true);
  f32(who, 'dweight', c.dweight, c.cols, true);
  f32(who, 'dbias', c.dbias, c.cols, true);
  separate(who, [['dx', c.dx], ['dweight', c.dweight], ['dbias', c.dbias]], [['x', c.x], ['mean', c.mean], ['rstd', c.rstd], ['weight', c.weight], ['dy', c.dy]]);
}

function checkTargets(who: string, c: { rows: number; classes: number; targets: Int32Array; ignoreIndex: number }): void {
  if (!(c.targets instanceof Int32Array)) throw new FAError('E_DTYPE', `${who}: targets must be an Int32Array`);
  if (c.targets.length !== c.rows) throw new FAError('E_SHAPE', `${who}: targets holds ${c.targets.length} values, ${c.rows} expected (one per row)`);
  if (!Number.isSafeInteger(c.ignoreIndex)) throw new FAError('E_ARG', `${who}: ignoreIndex must be an integer, got ${String(c.ignoreIndex)}`);
  const t = c.targets;
  for (let r = 0; r < t.length; r++) {
    if (t[r] !== c.ignoreIndex && (t[r] < 0 || t[r] >= c.classes)) throw new FAError('E_ARG', `${who}: target ${t[r]} of row ${r} is not a class in [0, ${c.classes}) nor ignoreIndex ${c.ignoreIndex}`);
  }
}

export function checkCrossEntropy(c: CrossEntropyCall, who = 'crossEntropy'): void {
  obj(who, c, 'rows, classes, logits, targets, ignoreIndex, lse');
  dims(who, c as unknown as Record<string, unknown>, 'rows', 'classes');
  f32(who, 'logits', c.logits, c.rows * c.classes);
  f32(who, 'lse', c.lse, c.rows);
  checkTargets(who, c);
  separate(who, [['lse', c.lse]], [['logits', c.logits]]);
}

export function checkCrossEntropyBackward(c: CrossEntropyBackwardCall, who = 'crossEntropyBackward'): void {
  obj(who, c, 'rows, classes, logits, lse, targets, ignoreIndex, scale, dlogits');
  dims(who, c as unknown as Record<string, unknown>, 'rows', 'classes');
  if (!isNum(c.scale)) throw new FAError('E_ARG', `${who}: scale must be a finite number, got ${String(c.scale)}`);
  f32(who, 'logits', c.logits, c.rows * c.classes);
  f32(who, 'lse', c.lse, c.rows);
  f32(who, 'dlogits', c.dlogits, c.rows * c.classes);
  checkTargets(who, c);
  separate(who, [['dlogits', c.dlogits]], [['logits', c.logits], ['lse', c.lse]]);
}

export function checkAdamW(c: AdamWCall, who = 'adamw'): void {
  obj(who, c, 'param, grad, m, v, lr, beta1, beta2, eps, weightDecay, step');
  f32(who, 'param', c.param, (c.param as Float32Array | undefined)?.length ?? 0);
  const n = c.param.length;
  f32(who, 'grad', c.grad, n);
  f32(who, 'm', c.m, n);
  f32(who, 'v', c.v, n);
  for (const k of ['lr', 'eps', 'weightDecay'] as const) if (!isNum(c[k]) || c[k] < 0) throw new FAError('E_ARG', `${who}: ${k} must be a finite number >= 0, got ${String(c[k])}`);
  for (const k of ['beta1', 'beta2'] as const) if (!isNum(c[k]) || c[k] < 0 || c[k] >= 1) throw new FAError('E_ARG', `${who}: ${k} must be in [0, 1), got ${String(c[k])}`);
  if (!Number.isSafeInteger(c.step) || c.step < 1) throw new FAError('E_ARG', `${who}: step must be an integer >= 1 (the update's number), got ${String(c.step)}`);
  separate(who, [['param', c.param], ['m', c.m], ['v', c.v]], [['grad', c.grad]]);
}

export function checkSumRows(c: SumRowsCall, who = 'sumRows'): void {
  obj(who, c, 'rows, cols, x, out');
  dims(who, c as unknown as Record<string, unknown>, 'rows', 'cols');
  f32(who, 'x', c.x, c.rows * c.cols);
  f32(who, 'out', c.out, c.cols);
  separate(who, [['out', c.out]], [['x', c.x]]);
}

export function checkRmsNorm(c: RmsNormCall, who = 'rmsNorm'): void {
  obj(who, c, 'rows, cols, x, weight, eps, y, rstd');
  dims(who, c as unknown as Record<string, unknown>, 'rows', 'cols');
  checkEps(who, c.eps);
  const n = c.rows * c.cols;
  f32(who, 'x', c.x, n);
  f32(who, 'weight', c.weight, c.cols, true);
  f32(who, 'y', c.y, n);
  f32(who, 'rstd', c.rstd, c.rows);
  separate(who, [['y', c.y], ['rstd', c.rstd]], [['x', c.x], ['weight', c.weight]]);
}

export function checkRmsNormBackward(c: RmsNormBackwardCall, who = 'rmsNormBackward'): void {
  obj(who, c, 'rows, cols, x, rstd, weight, dy, dx, dweight');
  dims(who, c as unknown as Record<string, unknown>, 'rows', 'cols');
  const n = c.rows * c.cols;
  f32(who, 'x', c.x, n);
  f32(who, 'rstd', c.rstd, c.rows);
  f32(who, 'weight', c.weight, c.cols, true);
  f32(who, 'dy', c.dy, n);
  f32(who, 'dx', c.dx, n, true);
  f32(who, 'dweight', c.dweight, c.cols, true);
  separate(who, [['dx', c.dx], ['dweight', c.dweight]], [['x', c.x], ['rstd', c.rstd], ['weight', c.weight], ['dy', c.dy]]);
}

export function checkSilu(c: SiluCall, who = 'silu'): void {
  obj(who, c, 'x, gate, y');
  f32(who, 'x', c.x, (c.x as Float32Array | undefined)?.length ?? 0);
  f32(who, 'gate', c.gate, c.x.length, true);
  f32(who, 'y', c.y, c.x.length);
  selfOrApart(who, 'y', c.y, 'x', c.x);
  selfOrApart(who, 'y', c.y, 'gate', c.gate);
}

export function checkSiluBackward(c: SiluBackwardCall, who = 'siluBackward'): void {
  obj(who, c, 'x, gate, dy, dx, dgate');
  f32(who, 'x', c.x, (c.x as Float32Array | undefined)?.length ?? 0);
  const n = c.x.length;
  f32(who, 'gate', c.gate, n, true);
  f32(who, 'dy', c.dy, n);
  f32(who, 'dx', c.dx, n);
  f32(who, 'dgate', c.dgate, n, true);
  if (c.dgate && !c.gate) throw new FAError('E_ARG', `${who}: dgate asks for a gate's gradient, but there is no gate`);
  separate(who, [['dx', c.dx], ['dgate', c.dgate]], [['x', c.x], ['gate', c.gate], ['dy', c.dy]]);
}

export function checkRotary(c: RotaryCall, who = 'rotary'): void {
  obj(who, c, 'batch, seq, heads, dim, rotaryDim, x, y, cos, sin, positionOffset, interleaved, inverse');
  dims(who, c as unknown as Record<string, unknown>, 'batch', 'seq', 'heads', 'dim', 'rotaryDim', 'positionOffset');
  if (c.rotaryDim % 2 !== 0 || c.rotaryDim > c.dim) throw new FAError('E_SHAPE', `${who}: rotaryDim must be even and at most dim ${c.dim}, got ${c.rotaryDim}`);
  const n = c.batch * c.seq * c.heads * c.dim;
  f32(who, 'x', c.x, n);
  f32(who, 'y', c.y, n);
  if (!(c.cos instanceof Float32Array) || !(c.sin instanceof Float32Array)) throw new FAError('E_DTYPE', `${who}: cos and sin must be Float32Arrays`);
  const half = c.rotaryDim / 2;
  if (half > 0 && (c.cos.length % half !== 0 || c.cos.length !== c.sin.length)) throw new FAError('E_SHAPE', `${who}: cos and sin must both be [maxPos, rotaryDim / 2 = ${half}], got ${c.cos.length} and ${c.sin.length} values`);
  const maxPos = half > 0 ? c.cos.length / half : Infinity;
  if (c.seq > 0 && c.positionOffset + c.seq > maxPos) throw new FAError('E_SHAPE', `${who}: positions ${c.positionOffset} … ${c.positionOffset + c.seq - 1} need ${c.positionOffset + c.seq} rows of cos/sin, the tables have ${maxPos}`);
  if (typeof c.interleaved !== 'boolean' || typeof c.inverse !== 'boolean') throw new FAError('E_ARG', `${who}: interleaved and inverse must be booleans`);
  selfOrApart(who, 'y', c.y, 'x', c.x);
}

export function checkDropout(c: DropoutCall, who = 'dropout'): void {
  obj(who, c, 'x, y, p, seed');
  f32(who, 'x', c.x, (c.x as Float32Array | undefined)?.length ?? 0);
  f32(who, 'y', c.y, c.x.length);
  if (c.accumulate) separate(who, [['y', c.y]], [['x', c.x]]);
  else selfOrApart(who, 'y', c.y, 'x', c.x);
  try {
    resolveDropout({ p: c.p, seed: c.seed, offset: c.offset ?? 0 });
  } catch (e) {
    throw new FAError('E_ARG', `${who}: ${(e as Error).message}`);
  }
}
