/**
 * Checks shared by the validation paths (problem.ts for dense and varlen attention, kvcache.ts
 * for attention over a KV cache): tensors, int32 index arrays, and the score options (scale,
 * causal, window, softcap, ALiBi) that mean the same in every call. Internal: not re-exported
 * from the package; each call's describe* function is the public face.
 */
import { check, FAError } from './errors.js';
import { isDType, type DType } from './dtype.js';
import { checkHostData, describeValue, isDeviceTensor, isHostTensor, type DeviceTensor, type Tensor } from './tensor.js';

export const shapeStr = (s: readonly number[]) => `[${s.join(', ')}]`;
/** Whether two shapes are equal (without building their strings: this runs on every call). */
export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** An Int32Array as it is, or an array of int32-range integers copied into one. */
export function toInt32(x: unknown, what: string): Int32Array {
  if (x instanceof Int32Array) return x;
  if (Array.isArray(x) && x.every((v) => Number.isSafeInteger(v) && v >= -(2 ** 31) && v < 2 ** 31)) return Int32Array.from(x as number[]);
  throw new FAError('E_DTYPE', `${what} must be an Int32Array (or an array of integers), got ${describeValue(x)}`);
}

/** A host tensor whose data fits its shape and dtype, or a device tensor not yet disposed. */
export function checkTensorLike(t: unknown, what: string): Tensor {
  if (isHostTensor(t)) {
    checkHostData(t.data, t.shape, t.dtype, what);
    check(isDType(t.dtype), 'E_DTYPE', () => `${what}: unknown dtype ${JSON.stringify(t.dtype)}`);
    return t;
  }
  if (isDeviceTensor(t)) {
    check(!t.disposed, 'E_ARG', () => `${what} is a device tensor that was already disposed`);
    check(isDType(t.dtype), 'E_DTYPE', () => `${what}: unknown dtype ${JSON.stringify(t.dtype)}`);
    return t;
  }
  throw new FAError('E_ARG', `${what} must be a tensor (use tensor(data, shape, dtype)), got ${describeValue(t)}`);
}

/** The score and mask options every attention call shares, as given by the caller. */
export interface ScoreOptions {
  causal?: boolean;
  window?: readonly [number, number];
  softcap?: number;
  scale?: number;
  alibiSlopes?: Float32Array | readonly number[];
  /** Attention sinks: one logit per query head, in the softmax denominator only (DESIGN.md). */
  sinks?: Float32Array | readonly number[];
  deterministic?: boolean;
}

/** ScoreOptions resolved: the fields AttentionProblem and KVCacheProblem share. */
export interface ResolvedScores {
  readonly scale: number;
  readonly causal: boolean;
  /** Resolved window; -1 = unbounded. causal => right = 0. */
  readonly windowLeft: number;
  readonly windowRight: number;
  /** 0 = no soft-capping. */
  readonly softcap: number;
  /** Slopes per (batch, head) as a [batch*h] array, or undefined. */
  readonly alibi: Float32Array | undefined;
  /**
   * Sinks, one f32 logit per query head ([h]), or undefined. The logit joins the softmax
   * denominator of every row of its head, unscaled and carrying no value: with the running max
   * m' = max(m, s_h) the denominator is Σ e^(S − m') + e^(s_h − m') (online-softmax.ts,
   * seedSinkTile), LSE includes it, and a row that sees no key has out 0 and LSE s_h.
   */
  readonly sinks: Float32Array | undefined;
  readonly deterministic: boolean;
}

/**
 * A device tensor of this shape and dtype without data, for the describe*Shapes functions: to
 * ask engines about a call before allocating its inputs.
 */
export function shapeOnlyTensor(shape: readonly number[], dtype: DType): DeviceTensor {
  return { kind: 'device', backend: 'none (shape only)', dtype, shape, handle: null, disposed: false };
}

/**
 * A window edge at least as wide as the longest query and key sequences together bounds nothing:
 * it becomes -1, so that engines that keep windows in 32-bit integers (WGSL uniforms, CUDA's
 * key ranges) never meet edges up to 2^53 that wrap or overflow (the results are the same: with
 * w ≥ tq + tk every key of every row is inside it).
 */
export function boundWindows(sc: ResolvedScores, tq: number, tk: number): ResolvedScores {
  const unbounded = (w: number) => (w >= tq + tk ? -1 : w);
  const left = unbounded(sc.windowLeft), right = unbounded(sc.windowRight);
  return left === sc.windowLeft && right === sc.windowRight ? sc : { ...sc, windowLeft: left, windowRight: right };
}

/**
 * Validates and resolves the score options for `batch` sequences of `h` query heads of head
 * dim `d`: scale defaults to 1/sqrt(d), causal sets the window's right edge to 0, ALiBi slopes
 * (H or B·H of them) are expanded to B·H.
 */
export function resolveScores(opts: ScoreOptions, batch: number, h: number, d: number): ResolvedScores {
  let scale = 1 / Math.sqrt(d);
  if (opts.scale !== undefined) {
    check(typeof opts.scale === 'number' && Number.isFinite(opts.scale), 'E_ARG', () => `scale must be a finite number, got ${String(opts.scale)}`);
    scale = opts.scale;
  }
  check(opts.causal === undefined || typeof opts.causal === 'boolean', 'E_ARG', () => `causal must be true or false, got ${String(opts.causal)}`);
  const causal = opts.causal === true;
  let left = -1;
  let right = -1;
  if (opts.window !== undefined) {
    const w = opts.window as unknown;
    check(Array.isArray(w) && w.length === 2, 'E_ARG', () => `window must be [left, right], got ${JSON.stringify(w)}`);
    for (const x of w as number[]) {
      check(Number.isSafeInteger(x) && x >= -1, 'E_ARG', () => `window entries must be integers >= -1 (-1 = unbounded), got [${(w as number[]).join(', ')}]`);
    }
    [left, right] = w as [number, number];
  }
  if (causal) right = 0;
  let softcap = 0;
  if (opts.softcap !== undefined) {
    check(typeof opts.softcap === 'number' && Number.isFinite(opts.softcap) && opts.softcap > 0, 'E_ARG', () => `softcap must be a finite number > 0 (leave it out for none), got ${String(opts.softcap)}`);
    softcap = opts.softcap;
  }
  let alibi: Float32Array | undefined;
  if (opts.alibiSlopes !== undefined) {
    const s = opts.alibiSlopes as unknown;
    check(s instanceof Float32Array || Array.isArray(s), 'E_DTYPE', () => `alibiSlopes must be a Float32Array or an array of numbers, got ${describeValue(s)}`);
    const arr = s as ArrayLike<number>;
    check(arr.length === h || arr.length === batch * h, 'E_SHAPE', () => `alibiSlopes must have H (${h}) or B*H (${batch * h}) entries, got ${arr.length}`);
    alibi = new Float32Array(batch * h);
    for (let i = 0; i < alibi.length; i++) {
      const x = arr.length === h ? arr[i % h] : arr[i];
      check(typeof x === 'number' && Number.isFinite(x), 'E_ARG', () => `alibiSlopes must be finite numbers; entry ${i % arr.length} is ${String(x)}`);
      alibi[i] = x;
    }
  }
  check(opts.deterministic === undefined || typeof opts.deterministic === 'boolean', 'E_ARG', 'deterministic must be true or false');
  const sinks = opts.sinks === undefined ? undefined : resolveSinks(opts.sinks, h);
  return { scale, causal, windowLeft: left, windowRight: right, softcap, alibi, sinks, deterministic: opts.deterministic === true };
}

/** Sinks as a Float32Array of H finite logits (a copy: the caller may change theirs later). */
function resolveSinks(x: unknown, h: number): Float32Array {
  check(x instanceof Float32Array || Array.isArray(x), 'E_DTYPE', () => `sinks must be a Float32Array (or an array of numbers) of one logit per query head, got ${describeValue(x)}`);
  const arr = x as ArrayLike<number>;
  check(arr.length === h, 'E_SHAPE', () => `sinks must have one entry per query head (H = ${h}), got ${arr.length}`);
  const out = new Float32Array(h);
  for (let i = 0; i < h; i++) {
    const v = arr[i];
    check(typeof v === 'number' && Number.isFinite(v), 'E_ARG', () => `sinks must be finite numbers; entry ${i} is ${String(v)}`);
    out[i] = v;
  }
  return out;
}
