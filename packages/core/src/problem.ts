/**
 * Attention options, and their validation into a resolved AttentionProblem: the one description
 * of "what to compute" that every engine, the reference and the CLI share. Every rule of
 * DESIGN.md's conventions that concerns shapes and options is enforced here, once.
 */
import { check } from './errors.js';
import type { DType } from './dtype.js';
import type { DropoutSpec } from './philox.js';
import { boundWindows, checkTensorLike, resolveScores, sameShape, shapeOnlyTensor, shapeStr, toInt32, type ResolvedScores } from './validate.js';

export interface AttentionOptions {
  /** Bottom-right aligned causal mask: query i sees key j iff j <= i + Tk - Tq. */
  causal?: boolean;
  /** [left, right], -1 = unbounded: query i sees key j iff i+Tk-Tq-left <= j <= i+Tk-Tq+right. */
  window?: readonly [number, number];
  /** Tanh soft-capping c > 0: s = c * tanh(s / c). Leave undefined for none. */
  softcap?: number;
  /** Multiplies q·k; defaults to 1/sqrt(D). */
  scale?: number;
  /** Per-head ALiBi slopes, length H (or B*H): s += -slope * |i + Tk - Tq - j|. */
  alibiSlopes?: Float32Array | readonly number[];
  /** Varlen: packed [totalQ, H, D] inputs split by these B+1 offsets. Give both or neither. */
  cuSeqlensQ?: Int32Array | readonly number[];
  cuSeqlensK?: Int32Array | readonly number[];
  /**
   * Attention sinks (gpt-oss): one f32 logit per query head, length H, added to each row's softmax
   * denominator only (unscaled, no value). LSE includes it; a row that sees no key gets out 0 and
   * LSE = sinks[h]. Backward also returns dsinks [H].
   */
  sinks?: Float32Array | readonly number[];
  /**
   * Dropout on the attention probabilities (training): entries of P are dropped with probability
   * p and the kept ones scaled by 1/(1 − p); LSE stays the undropped one. The mask is Philox
   * 4×32-10 keyed by (seed, offset, batch, head, row, column) (philox.ts), the same on every
   * engine; backward regenerates it. offset (default 0) picks another mask for the same seed.
   */
  dropout?: { readonly p: number; readonly seed: number; readonly offset?: number };
  /** Ask for bit-identical gradients run to run (engines that reduce in parallel honour it). */
  deterministic?: boolean;
}

/** A fully validated and resolved problem. Engines read this, never the raw options. */
export interface AttentionProblem extends ResolvedScores {
  readonly dtype: DType;
  /** Number of sequences. */
  readonly batch: number;
  readonly h: number;
  readonly hkv: number;
  /** Head dim of q and k (the scale's default is 1/sqrt(d)). */
  readonly d: number;
  /** Head dim of v, and so of out, dOut and dv (DeepSeek MLA: 192 for q·k, 128 for v); d unless v says otherwise. */
  readonly vDim: number;
  /** Longest query / key sequence (the common length unless varlen). */
  readonly tq: number;
  readonly tk: number;
  /** Rows of the packed token dimension: B*Tq and B*Tk unless varlen. */
  readonly totalQ: number;
  readonly totalK: number;
  readonly varlen: boolean;
  /** Dropout (resolved), or undefined for none (p = 0 included). */
  readonly dropout: DropoutSpec | undefined;
  /** Offsets, length batch+1, in tokens; synthesised as multiples of tq/tk when not varlen. */
  readonly cuSeqlensQ: Int32Array;
  readonly cuSeqlensK: Int32Array;
  readonly qShape: readonly number[];
  readonly kShape: readonly number[];
  /** v's (and dv's) shape: k's with head dim vDim. */
  readonly vShape: readonly number[];
  /** out's (and dOut's) shape: q's with head dim vDim. */
  readonly outShape: readonly number[];
  readonly lseShape: readonly number[];
}

/** The rows of one sequence: packed offsets and lengths. */
export interface Segment {
  readonly q0: number;
  readonly tq: number;
  readonly k0: number;
  readonly tk: number;
}

export function segment(p: AttentionProblem, b: number): Segment {
  const q0 = p.cuSeqlensQ[b];
  const k0 = p.cuSeqlensK[b];
  return { q0, tq: p.cuSeqlensQ[b + 1] - q0, k0, tk: p.cuSeqlensK[b + 1] - k0 };
}

/** Index into a [B,H,Tq] (or varlen [H,totalQ]) LSE buffer for packed row `row` and head `h`. */
export function lseIndex(p: AttentionProblem, b: number, h: number, i: number): number {
  return p.varlen ? h * p.totalQ + p.cuSeqlensQ[b] + i : (b * p.h + h) * p.tq + i;
}

function checkCuSeqlens(cu: Int32Array, total: number, what: string): void {
  check(cu.length >= 2, 'E_SHAPE', () => `${what} must have length B+1 >= 2, got length ${cu.length}`);
  check(cu[0] === 0, 'E_ARG', () => `${what} must start at 0, got ${cu[0]}`);
  for (let i = 1; i < cu.length; i++) {
    check(cu[i] >= cu[i - 1], 'E_ARG', () => `${what} must be non-decreasing: entry ${i} is ${cu[i]} after ${cu[i - 1]}`);
  }
  check(cu[cu.length - 1] === total, 'E_SHAPE', () => `${what} ends at ${cu[cu.length - 1]} but the packed tensor has ${total} tokens`);
}

/**
 * Validates q, k, v and the options, and resolves them into an AttentionProblem.
 * Throws FAError (E_SHAPE, E_DTYPE, E_ARG) with a message that says what to change.
 */
export function describeProblem(qIn: unknown, kIn: unknown, vIn: unknown, opts: AttentionOptions = {}): AttentionProblem {
  check(typeof opts === 'object' && opts !== null, 'E_ARG', 'options must be an object');
  const q = checkTensorLike(qIn, 'q');
  const k = checkTensorLike(kIn, 'k');
  const v = checkTensorLike(vIn, 'v');
  check(q.dtype === k.dtype && k.dtype === v.dtype, 'E_DTYPE', () => `q, k, v must share one dtype; got ${q.dtype}, ${k.dtype}, ${v.dtype}`);
  // v may have a head dim of its own (its last axis); every other axis is k's
  check(k.shape.length === v.shape.length && k.shape.slice(0, -1).every((x, i) => x === v.shape[i]), 'E_SHAPE', () => `k and v must have the same shape but for the head dim; got ${shapeStr(k.shape)} and ${shapeStr(v.shape)}`);
  const hasCuQ = opts.cuSeqlensQ !== undefined;
  const hasCuK = opts.cuSeqlensK !== undefined;
  check(hasCuQ === hasCuK, 'E_ARG', 'varlen needs both cuSeqlensQ and cuSeqlensK');
  const varlen = hasCuQ;
  const rank = varlen ? 3 : 4;
  const layout = varlen ? '[totalT, H, D] (varlen)' : '[B, T, H, D]';
  for (const [name, t] of [['q', q], ['k', k], ['v', v]] as const) {
    check(t.shape.length === rank, 'E_SHAPE', () => `${name} must have rank ${rank}, layout ${layout}; got shape ${shapeStr(t.shape)}`);
  }
  const [h, d] = q.shape.slice(-2);
  const [hkv, dk] = k.shape.slice(-2);
  const vDim = v.shape[v.shape.length - 1];
  check(d >= 1, 'E_SHAPE', () => `head dim D must be at least 1; q has shape ${shapeStr(q.shape)}`);
  check(vDim >= 1, 'E_SHAPE', () => `v's head dim must be at least 1; v has shape ${shapeStr(v.shape)}`);
  check(h >= 1 && hkv >= 1, 'E_SHAPE', () => `q and k need at least one head; got H=${h}, Hkv=${hkv}`);
  check(dk === d, 'E_SHAPE', () => `q and k must have the same head dim D; got ${d} and ${dk}`);
  check(h % hkv === 0, 'E_SHAPE', () => `H (${h}) must be a multiple of Hkv (${hkv}) for MQA/GQA`);

  let batch: number, tq: number, tk: number, totalQ: number, totalK: number;
  let cuQ: Int32Array, cuK: Int32Array;
  if (varlen) {
    totalQ = q.shape[0];
    totalK = k.shape[0];
    cuQ = toInt32(opts.cuSeqlensQ, 'cuSeqlensQ');
    cuK = toInt32(opts.cuSeqlensK, 'cuSeqlensK');
    check(cuQ.length === cuK.length, 'E_SHAPE', () => `cuSeqlensQ and cuSeqlensK must both have length B+1; got ${cuQ.length} and ${cuK.length}`);
    checkCuSeqlens(cuQ, totalQ, 'cuSeqlensQ');
    checkCuSeqlens(cuK, totalK, 'cuSeqlensK');
    batch = cuQ.length - 1;
    tq = 0;
    tk = 0;
    for (let b = 0; b < batch; b++) {
      tq = Math.max(tq, cuQ[b + 1] - cuQ[b]);
      tk = Math.max(tk, cuK[b + 1] - cuK[b]);
    }
  } else {
    check(q.shape[0] === k.shape[0], 'E_SHAPE', () => `q and k must have the same batch B; got ${q.shape[0]} and ${k.shape[0]}`);
    batch = q.shape[0];
    tq = q.shape[1];
    tk = k.shape[1];
    totalQ = batch * tq;
    totalK = batch * tk;
    cuQ = new Int32Array(batch + 1);
    cuK = new Int32Array(batch + 1);
    for (let b = 0; b <= batch; b++) {
      cuQ[b] = b * tq;
      cuK[b] = b * tk;
    }
  }

  const sc = boundWindows(resolveScores(opts, batch, h, d), tq, tk);
  return {
    dtype: q.dtype,
    batch, h, hkv, d, vDim, tq, tk, totalQ, totalK, varlen,
    dropout: resolveDropout(opts.dropout),
    cuSeqlensQ: cuQ,
    cuSeqlensK: cuK,
    ...sc,
    qShape: [...q.shape],
    kShape: [...k.shape],
    vShape: [...v.shape],
    outShape: [...q.shape.slice(0, -1), vDim],
    lseShape: varlen ? [h, totalQ] : [batch, h, tq],
  };
}

/** A dropout option { p, seed, offset? } checked and resolved (undefined: no dropout), or a one-line E_ARG. */
export function resolveDropout(x: unknown): DropoutSpec | undefined {
  if (x === undefined) return undefined;
  check(typeof x === 'object' && x !== null, 'E_ARG', () => `dropout must be { p, seed, offset? }, got ${String(x)}`);
  const { p, seed, offset = 0 } = x as { p?: unknown; seed?: unknown; offset?: unknown };
  check(typeof p === 'number' && p >= 0 && p < 1, 'E_ARG', () => `dropout.p must be a probability in [0, 1), got ${String(p)}`);
  check(typeof seed === 'number' && Number.isSafeInteger(seed) && seed >= 0, 'E_ARG', () => `dropout.seed must be an integer in [0, 2^53), got ${String(seed)}`);
  check(typeof offset === 'number' && Number.isInteger(offset) && offset >= 0 && offset < 2 ** 32, 'E_ARG', () => `dropout.offset must be an integer in [0, 2^32), got ${String(offset)}`);
  // p below 2^-32 drops nothing (threshold 0) and scales by less than float32 resolves: none, as in the kernels
  const threshold = Math.floor(p * 2 ** 32);
  if (threshold === 0) return undefined;
  return { p, threshold, keepScale: 1 / (1 - p), k0: seed % 2 ** 32, k1: Math.floor(seed / 2 ** 32), offset };
}

/**
 * The problem of q/k/v of these shapes and dtype (v has k's shape unless vShape is given),
 * without their data: to ask engines (supports(), resolveBackendFor()) about a call before
 * allocating its inputs.
 */
export function describeProblemShapes(qShape: readonly number[], kShape: readonly number[], dtype: DType, opts: AttentionOptions = {}, vShape: readonly number[] = kShape): AttentionProblem {
  return describeProblem(shapeOnlyTensor(qShape, dtype), shapeOnlyTensor(kShape, dtype), shapeOnlyTensor(vShape, dtype), opts);
}

/**
 * Validates the extra inputs of a backward call (out, dOut, lse) against the problem.
 */
export function describeBackward(q: unknown, k: unknown, v: unknown, out: unknown, dOut: unknown, lse: unknown, opts: AttentionOptions = {}): AttentionProblem {
  const p = describeProblem(q, k, v, opts);
  const o = checkTensorLike(out, 'out');
  const dO = checkTensorLike(dOut, 'dOut');
  const l = checkTensorLike(lse, 'lse');
  for (const [name, t] of [['out', o], ['dOut', dO]] as const) {
    check(t.dtype === p.dtype, 'E_DTYPE', () => `${name} must have the inputs' dtype ${p.dtype}, got ${t.dtype}`);
    check(sameShape(t.shape, p.outShape), 'E_SHAPE', () => `${name} must have ${p.vDim === p.d ? "q's shape" : "q's shape with v's head dim"} ${shapeStr(p.outShape)}, got ${shapeStr(t.shape)}`);
  }
  check(l.dtype === 'f32', 'E_DTYPE', () => `lse must be f32, got ${l.dtype}`);
  check(sameShape(l.shape, p.lseShape), 'E_SHAPE', () => `lse must have shape ${shapeStr(p.lseShape)}, got ${shapeStr(l.shape)}`);
  return p;
}

/** Forward FLOPs per DESIGN.md: 4·B·H·Tq·Tk·D (2·(D + Dv) with a head dim of v's own), half when causal (varlen sums per sequence). */
export function problemFlops(p: AttentionProblem): number {
  let pairs = 0;
  for (let b = 0; b < p.batch; b++) {
    const s = segment(p, b);
    pairs += s.tq * s.tk;
  }
  return (2 * p.h * pairs * (p.d + p.vDim)) / (p.causal ? 2 : 1);
}
