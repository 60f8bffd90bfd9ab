/**
 * The model-op conformance kit (DESIGN.md, "Model ops"): cases for each op an engine's
 * `modelOps` offers, checked against a float64 reference with float32's rule
 * (‖x − ref‖ / ‖ref‖ ≤ 1e-5), and the bad-argument cases every engine must refuse with a
 * one-line FAError that leaves the output untouched: the matrix product here, the element-wise
 * and per-row ops in layer-op-kit.ts.
 */
import { isFAError } from '../errors.js';
import type { GemmCall, HostModelOps } from '../ops/model-ops.js';
import { createRng, randomValues } from './random.js';
import { checkBadLayerOpCalls, checkLayerOpCase, layerOpCases, type LayerOpCase } from './layer-op-kit.js';

export interface GemmCase {
  name: string;
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
  accumulate: boolean;
  /** The operands sit inside larger arrays (subarray views at odd offsets). */
  views?: boolean;
}

/** The gemm cases: every transpose pair, ragged edges of every tile size, K past any blocking, empty dims. */
export function gemmCases(): GemmCase[] {
  const cases: GemmCase[] = [];
  const shapes: [number, number, number][] = [
    [1, 1, 1], [1, 8, 1], [3, 5, 7], [8, 8, 8], [13, 17, 19], [6, 16, 33], [33, 31, 64], [64, 96, 128],
    [7, 129, 300], [129, 7, 257], [50, 40, 1030], [200, 300, 96], [0, 5, 3], [4, 0, 3], [4, 5, 0],
  ];
  for (const [M, N, K] of shapes) {
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        for (const accumulate of [false, true]) {
          cases.push({ name: `gemm ${transA ? 't' : 'n'}${transB ? 't' : 'n'} M${M} N${N} K${K}${accumulate ? ' +=' : ''}`, transA, transB, M, N, K, accumulate });
        }
      }
    }
  }
  cases.push({ name: 'gemm nn M37 N41 K43 in views', transA: false, transB: false, M: 37, N: 41, K: 43, accumulate: true, views: true });
  cases.push({ name: 'gemm tt M37 N41 K43 in views', transA: true, transB: true, M: 37, N: 41, K: 43, accumulate: false, views: true });
  // the shapes of a transformer layer's products (d_model 256, MLP 1024, 1024 tokens)
  cases.push({ name: 'gemm nt M1024 N768 K256 (qkv)', transA: false, transB: true, M: 1024, N: 768, K: 256, accumulate: false });
  cases.push({ name: 'gemm tn M1024 N256 K1024 (weight grad)', transA: true, transB: false, M: 1024, N: 256, K: 1024, accumulate: true });
  return cases;
}

function view(n: number, values: Float32Array, at: number): Float32Array {
  const big = new Float32Array(n + at + 5).fill(Number.NaN);
  const v = big.subarray(at, at + n);
  v.set(values);
  return v;
}

/** The float64 product of a case (the reference). */
export function gemmReference(g: GemmCall): Float64Array {
  const { M, N, K } = g;
  const out = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += g.a[g.transA ? k * M + m : m * K + k] * g.b[g.transB ? n * K + k : k * N + n];
      out[m * N + n] = (g.accumulate ? g.c[m * N + n] : 0) + s;
    }
  }
  return out;
}

export interface OpCaseResult {
  name: string;
  pass: boolean;
  /** ‖x − ref‖ / ‖ref‖ (0 for an empty product). */
  error: number;
  message?: string;
}

export interface OpConformanceSummary {
  engine: string;
  passed: number;
  failed: number;
  failures: OpCaseResult[];
}

export const GEMM_TOLERANCE = 1e-5;

/** ‖x − ref‖ / ‖ref‖, the kit's measure of a product (0 for an empty one). */
export function gemmError(x: ArrayLike<number>, ref: ArrayLike<number>): number {
  let num = 0, den = 0;
  for (let i = 0; i < ref.length; i++) {
    const d = x[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return ref.length === 0 ? 0 : Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
}

/** Runs one gemm case on the ops. */
export function checkGemmCase(ops: HostModelOps, c: GemmCase, seed = 1): OpCaseResult {
  const rng = createRng(seed);
  const { M, N, K } = c;
  let a = randomValues(rng, M * K), b = randomValues(rng, K * N), c0 = randomValues(rng, M * N);
  if (c.views) {
    a = view(M * K, a, 3);
    b = view(K * N, b, 1);
  }
  const out = c.views ? view(M * N, c0, 7) : Float32Array.from(c0);
  const call: GemmCall = { transA: c.transA, transB: c.transB, M, N, K, a, b, c: out, accumulate: c.accumulate };
  const ref = gemmReference({ ...call, c: c0 });
  try {
    ops.gemm(call);
  } catch (e) {
    return { name: c.name, pass: false, error: Number.NaN, message: `threw: ${e instanceof Error ? e.message : String(e)}` };
  }
  const error = gemmError(out, ref);
  const pass = error <= GEMM_TOLERANCE; // (NaN fails)
  return { name: c.name, pass, error, message: pass ? undefined : `error ${error.toExponential(3)} > ${GEMM_TOLERANCE}` };
}

/** Bad calls: each must throw an FAError with a code and leave c as it was. */
function badGemmCases(): { name: string; call: () => GemmCall; code: string }[] {
  const f = (n: number) => new Float32Array(n).fill(1);
  const shared = f(40);
  return [
    { name: 'a too short', code: 'E_SHAPE', call: () => ({ transA: false, transB: false, M: 2, N: 3, K: 4, a: f(7), b: f(12), c: f(6) }) },
    { name: 'c too long', code: 'E_SHAPE', call: () => ({ transA: false, transB: true, M: 2, N: 3, K: 4, a: f(8), b: f(12), c: f(7) }) },
    { name: 'M negative', code: 'E_SHAPE', call: () => ({ transA: false, transB: false, M: -1, N: 3, K: 4, a: f(0), b: f(12), c: f(0) }) },
    { name: 'K fractional', code: 'E_SHAPE', call: () => ({ transA: false, transB: false, M: 2, N: 3, K: 1.5, a: f(3), b: f(4), c: f(6) }) },
    { name: 'b a Float64Array', code: 'E_DTYPE', call: () => ({ transA: false, transB: false, M: 2, N: 3, K: 4, a: f(8), b: new Float64Array(12) as unknown as Float32Array, c: f(6) }) },
    { name: 'c overlaps a', code: 'E_ARG', call: () => ({ transA: false, transB: false, M: 2, N: 2, K: 2, a: shared.subarray(0, 4), b: f(4), c: shared.subarray(2, 6) }) },
  ];
}

/**
 * Every case and bad call on an engine's model ops: the gemm cases (options.cases, default all)
 * and the layer-op cases (options.layerCases, default all; [] to skip them).
 */
export function runOpConformance(
  ops: HostModelOps,
  options: { onResult?: (r: OpCaseResult) => void; cases?: readonly GemmCase[]; layerCases?: readonly LayerOpCase[] } = {},
): OpConformanceSummary {
  const results: OpCaseResult[] = [];
  const cases = options.cases ?? gemmCases();
  cases.forEach((c, i) => results.push(checkGemmCase(ops, c, 100 + i)));
  const layer = options.layerCases ?? layerOpCases();
  layer.forEach((c, i) => results.push(checkLayerOpCase(ops, c, 5000 + i)));
  if (layer.length > 0) results.push(...checkBadLayerOpCalls(ops));
  for (const bad of badGemmCases()) {
    const call = bad.call();
    const before = Float32Array.from(call.c);
    let r: OpCaseResult;
    try {
      ops.gemm(call);
      r = { name: `bad gemm: ${bad.name}`, pass: false, error: Number.NaN, message: 'did not throw' };
    } catch (e) {
      const code = isFAError(e) ? e.code : undefined;
      const same = call.c.every((x, i) => Object.is(x, before[i]));
      const oneLine = e instanceof Error && !e.message.includes('\n');
      const pass = code === bad.code && same && oneLine;
      r = { name: `bad gemm: ${bad.name}`, pass, error: 0, message: pass ? undefined : `got ${code ?? String(e)} (want ${bad.code})${same ? '' : ', c changed'}${oneLine ? '' : ', message not one line'}` };
    }
    results.push(r);
  }
  for (const r of results) options.onResult?.(r);
  const failures = results.filter((r) => !r.pass);
  return { engine: ops.engine, passed: results.length - failures.length, failed: failures.length, failures };
}
