/**
 * gradcheck(fn, inputs): compares the tape's gradients with central finite differences
 * computed in float64.
 *
 * The numeric side always runs fn on float64 copies of the inputs (every op, attention
 * included, has a float64 path), with perturbations ±eps, under noGrad. A non-scalar output is
 * reduced to the scalar Σ out·w with a fixed seeded w, so one backward checks a random
 * projection of the whole Jacobian.
 *
 * The analytic side runs in `precision`:
 * - 'float64' (default): fn on float64 copies; checks the ops' backward formulas and the tape
 *   itself at PyTorch's tolerances |a − n| <= atol + rtol·|n| (atol 1e-5, rtol 1e-3).
 * - 'float32': fn on float32 copies, so attention runs on the chosen backend and its
 *   recompute backward produces the gradient. The reference is still float64 finite
 *   differences; the tolerance reflects float32: |a − n| <= atol·max|n| + rtol·|n| with
 *   atol 1e-5 (relative to the largest gradient entry of that input) and rtol 1e-3.
 */
import { FAError } from '@fa/core';
import { noGrad } from './grad-mode.js';
import { Rng } from './rng.js';
import { Tensor, shapeStr, type Precision } from './tensor.js';

export interface GradcheckOptions {
  /** Finite-difference step (float64). Default 1e-6. */
  eps?: number;
  atol?: number;
  rtol?: number;
  /** Precision of the analytic (tape) gradient. Default 'float64'. */
  precision?: Precision;
  /** Seed of the output projection and of element sampling. */
  seed?: number;
  /** Check at most this many elements per input (a seeded sample); default all. */
  maxElements?: number;
}

export interface GradcheckInputResult {
  readonly index: number;
  readonly name: string | undefined;
  readonly shape: readonly number[];
  readonly checked: number;
  readonly maxAbsErr: number;
  /** max |a − n| / max |n|. */
  readonly maxErrRelToScale: number;
  /** ‖a − n‖ / ‖n‖ over the checked elements. */
  readonly relNormErr: number;
  readonly worst: { readonly element: number; readonly analytic: number; readonly numeric: number };
  readonly ok: boolean;
}

export interface GradcheckResult {
  readonly ok: boolean;
  readonly precision: Precision;
  readonly inputs: readonly GradcheckInputResult[];
  /** One line per input, for test output. */
  readonly summary: string;
}

type Fn = (...xs: Tensor[]) => Tensor | Promise<Tensor>;

function objective(out: Tensor, w: Float32Array): number {
  let s = 0;
  for (let i = 0; i < w.length; i++) s += out.data[i] * w[i];
  return s;
}

export async function gradcheck(fn: Fn, inputs: readonly Tensor[], options: GradcheckOptions = {}): Promise<GradcheckResult> {
  const precision = options.precision ?? 'float64';
  const eps = options.eps ?? 1e-6;
  const atol = options.atol ?? 1e-5;
  const rtol = options.rtol ?? 1e-3;
  const rng = new Rng(options.seed ?? 1234);
  inputs.forEach((t, i) => {
    if (!(t instanceof Tensor)) throw new FAError('E_ARG', `gradcheck: input ${i} is not a Tensor`);
  });
  if (!inputs.some((t) => t.requiresGrad)) throw new FAError('E_ARG', 'gradcheck: no input has requiresGrad');

  // Analytic gradient.
  const twins = inputs.map((t) => t.clone({ precision, requiresGrad: t.requiresGrad }));
  const out = await fn(...twins);
  if (!(out instanceof Tensor)) throw new FAError('E_ARG', 'gradcheck: fn must return a Tensor');
  // The projection is float32-representable so that both sides use exactly the same w.
  const w = new Float32Array(out.size);
  if (out.size === 1) w[0] = 1;
  else for (let i = 0; i < w.length; i++) w[i] = rng.normal();
  if (!out.requiresGrad) throw new FAError('E_ARG', 'gradcheck: the output does not depend on any input that requires grad');
  await out.backward(out.precision === 'float64' ? Float64Array.from(w) : w);

  // Numeric gradient, float64 throughout.
  const x64 = inputs.map((t) => t.clone({ precision: 'float64' }));
  const evalAt = async (): Promise<number> => objective(await noGrad(() => fn(...x64)), w);

  const results: GradcheckInputResult[] = [];
  for (let i = 0; i < inputs.length; i++) {
    if (!inputs[i].requiresGrad) continue;
    const n = inputs[i].size;
    let elems = Array.from({ length: n }, (_, e) => e);
    if (options.maxElements !== undefined && options.maxElements < n) elems = rng.shuffle(elems).slice(0, options.maxElements).sort((a, b) => a - b);
    const analytic = twins[i].grad?.data;
    const data = x64[i].data;
    const num = new Float64Array(elems.length);
    for (let c = 0; c < elems.length; c++) {
      const e = elems[c];
      const orig = data[e];
      data[e] = orig + eps;
      const fp = await evalAt();
      data[e] = orig - eps;
      const fm = await evalAt();
      data[e] = orig;
      num[c] = (fp - fm) / (2 * eps);
    }
    let scaleN = 0;
    for (const v of num) scaleN = Math.max(scaleN, Math.abs(v));
    let maxAbs = 0;
    let ok = true;
    let worst = { element: elems[0] ?? 0, analytic: 0, numeric: 0 };
    let worstExcess = -Infinity;
    let errSq = 0;
    let refSq = 0;
    for (let c = 0; c < elems.length; c++) {
      const a = analytic ? analytic[elems[c]] : 0;
      const nv = num[c];
      const err = Math.abs(a - nv);
      const bound = (precision === 'float64' ? atol : atol * scaleN) + rtol * Math.abs(nv);
      if (!(err <= bound)) ok = false;
      if (err - bound > worstExcess || Number.isNaN(err)) {
        worstExcess = err - bound;
        worst = { element: elems[c], analytic: a, numeric: nv };
      }
      maxAbs = Math.max(maxAbs, err);
      errSq += err * err;
      refSq += nv * nv;
    }
    results.push({
      index: i,
      name: inputs[i].name,
      shape: inputs[i].shape,
      checked: elems.length,
      maxAbsErr: maxAbs,
      maxErrRelToScale: scaleN > 0 ? maxAbs / scaleN : maxAbs,
      relNormErr: refSq > 0 ? Math.sqrt(errSq / refSq) : Math.sqrt(errSq),
      worst,
      ok,
    });
  }
  const summary = results
    .map(
      (r) =>
        `input ${r.index}${r.name ? ` (${r.name})` : ''} ${shapeStr(r.shape)}: ${r.ok ? 'ok' : 'FAIL'} — ${r.checked} elements, max |a−n| ${r.maxAbsErr.toExponential(2)} (${r.maxErrRelToScale.toExponential(2)} of max |n|), ‖a−n‖/‖n‖ ${r.relNormErr.toExponential(2)}` +
        (r.ok ? '' : `; worst element ${r.worst.element}: analytic ${r.worst.analytic}, numeric ${r.worst.numeric}`),
    )
    .join('\n');
  return { ok: results.every((r) => r.ok), precision, inputs: results, summary };
}
