/**
 * The same small model on every backend the registry offers: forward + backward, gradients
 * compared with the cpu backend's within float32 tolerance. Engines other than @fa/core's cpu
 * are loaded when they can be (as packages, or from this monorepo's built dist); a backend that
 * is missing or unavailable is skipped visibly, with the registry's reason.
 */
import '@fa/core';
import { describe, expect, it } from 'vitest';
import { describeProblem, listBackends, resolveBackend, zeros as hostZeros, type AttentionBackend, type AttentionOptions, type DType } from '@fa/core';
import { Embedding, LayerNorm, Linear, Module, Rng, Tensor, TransformerBlock, add, attention, crossEntropy, mul, randn, sum, type Precision } from '@fa/autograd';
import { relNormErr } from './helpers.js';

const loadNotes: string[] = [];
// @fa/webgpu is a devDependency (so turbo builds it first); @fa/cuda is used when this monorepo has built it.
for (const pkg of ['@fa/webgpu', '@fa/cuda']) {
  try {
    await import(/* @vite-ignore */ pkg);
    loadNotes.push(`${pkg}: loaded`);
  } catch (e1) {
    const dist = new URL(`../../${pkg.slice('@fa/'.length)}/dist/index.js`, import.meta.url).href;
    try {
      await import(/* @vite-ignore */ dist);
      loadNotes.push(`${pkg}: loaded from this monorepo's dist`);
    } catch (e2) {
      loadNotes.push(`${pkg}: not loadable (${(e1 as Error).message.split('\n')[0]}; ${(e2 as Error).message.split('\n')[0]})`);
    }
  }
}
const backends = await listBackends();
console.log(['engines:', ...loadNotes, ...backends.map((b) => `backend ${b.name}: ${b.available ? `available (${b.device})` : `unavailable: ${b.reason}`}`)].join('\n  '));

const V = 7;
const B = 2;
const T = 9;
const C = 32; // 4 heads of D = 8 (CUDA needs D a multiple of 8)
// Two blocks between them use every attention option except varlen (GQA, causal, window, softcap, ALiBi).
const ATTN: AttentionOptions[] = [{ causal: true }, { window: [3, 1], softcap: 4, alibiSlopes: [0.5, 0.25, 0.125, 0.0625] }];

class Small extends Module {
  readonly tok: Embedding;
  readonly pos: Embedding;
  readonly blocks: TransformerBlock[];
  readonly ln: LayerNorm;
  readonly head: Linear;
  constructor(precision: Precision) {
    super();
    const rng = new Rng(11);
    this.tok = new Embedding(V, C, { rng, precision, std: 0.5 });
    this.pos = new Embedding(T, C, { rng, precision, std: 0.5 });
    this.blocks = ATTN.map((a) => new TransformerBlock(C, 4, { rng, precision, kvHeads: 2, attention: a }));
    this.ln = new LayerNorm(C, 1e-5, { precision });
    this.head = new Linear(C, V, { rng, precision });
  }
  async loss(ids: Int32Array, targets: Int32Array, backend: string, dtype: DType): Promise<Tensor> {
    let x = add(this.tok.forward(ids, [B, T]), this.pos.weight);
    for (const b of this.blocks) x = await b.forward(x, { backend, dtype });
    return crossEntropy(this.head.forward(this.ln.forward(x)), targets);
  }
}

const rng = new Rng(5);
const ids = Int32Array.from({ length: B * T }, () => rng.int(V));
const targets = Int32Array.from({ length: B * T }, () => rng.int(V));

type Run = { loss: number; grads: [string, Float64Array][] };

async function gradients(model: Small, backend: string, dtype: DType = 'f32'): Promise<Run> {
  model.zeroGrad();
  const loss = await model.loss(ids, targets, backend, dtype);
  await loss.backward();
  return { loss: loss.item(), grads: model.namedParameters().map(([n, p]) => [n, Float64Array.from(p.grad!.data)]) };
}

const norm = (a: ArrayLike<number>): number => Math.sqrt(Array.from(a).reduce((s, x) => s + x * x, 0));

/**
 * Per parameter ‖Δ‖ / max(‖ref‖, 1e-2·‖all of ref‖): relative, except for parameters whose
 * gradient is zero by symmetry (the key bias of an attention without softcap: adding a constant
 * to every score of a row changes nothing), where it is relative to the whole gradient's scale.
 */
function compare(label: string, got: Run, ref: Run, tol: number): void {
  let worst = 0;
  let worstName = '';
  const total = norm(ref.grads.flatMap(([, g]) => Array.from(g)));
  const all = relNormErr(got.grads.flatMap(([, g]) => Array.from(g)), ref.grads.flatMap(([, g]) => Array.from(g)));
  got.grads.forEach(([name, g], i) => {
    const r = ref.grads[i][1];
    const e = relNormErr(g, r) * (norm(r) / Math.max(norm(r), 1e-2 * total));
    if (e > worst) [worst, worstName] = [e, name];
    expect(e, `${label}: ${name}`).toBeLessThan(tol);
  });
  const lossErr = Math.abs(got.loss - ref.loss) / Math.abs(ref.loss);
  console.log(`${label}: loss ${got.loss} vs ${ref.loss} (rel ${lossErr.toExponential(2)}); all gradients ‖Δ‖/‖ref‖ ${all.toExponential(2)}, worst parameter ${worst.toExponential(2)} (${worstName}) of ${got.grads.length}`);
  expect(all).toBeLessThan(tol);
  expect(lossErr).toBeLessThan(tol);
}

/** Varlen (which the model above does not use): attention alone on packed sequences, through the tape. */
const VARLEN: AttentionOptions = { cuSeqlensQ: [0, 4, 4, 11], cuSeqlensK: [0, 6, 6, 12], causal: true, softcap: 3 };
async function varlenGradients(backend: string, precision: Precision = 'float32', dtype: DType = 'f32'): Promise<Run> {
  const r = new Rng(9);
  const q = randn([11, 4, 8], { rng: r, precision, requiresGrad: true });
  const k = randn([12, 2, 8], { rng: r, precision, requiresGrad: true });
  const v = randn([12, 2, 8], { rng: r, precision, requiresGrad: true });
  const w = randn([11, 4, 8], { rng: r, precision });
  const loss = sum(mul(await attention(q, k, v, { ...VARLEN, backend, dtype }), w));
  await loss.backward();
  return { loss: loss.item(), grads: [['dq', Float64Array.from(q.grad!.data)], ['dk', Float64Array.from(k.grad!.data)], ['dv', Float64Array.from(v.grad!.data)]] };
}

/** Why `be` refuses the model's attention problems in `dtype` ('' when it takes them all). */
function reasons(be: AttentionBackend, dtype: DType): string {
  return ATTN.map((a) => be.supports(describeProblem(hostZeros([B, T, 4, C / 4], dtype), hostZeros([B, T, 2, C / 4], dtype), hostZeros([B, T, 2, C / 4], dtype), a)))
    .flatMap((s) => (s.ok ? [] : [s.reason]))
    .join('; ');
}

/** FA_AUTOGRAD_DTYPE=bf16 (or f16) forces the comparison into that dtype. */
function pickDtype(be: AttentionBackend): DType | undefined {
  const forced = process.env.FA_AUTOGRAD_DTYPE;
  for (const d of forced ? [forced as DType] : (['f32', 'bf16', 'f16'] as const)) {
    if (!be.dtypes.includes(d)) continue;
    const why = reasons(be, d);
    if (why === '') return d;
    console.log(`${be.name}: not in ${d}: ${why}`);
  }
  return undefined;
}

const model = new Small('float32');
const cpuRun = gradients(model, 'cpu');

describe('the same model on every backend', () => {
  it('cpu (float32) against the float64 twin of the model', async () => {
    const twin = new Small('float64');
    const src = model.parameters();
    twin.parameters().forEach((p, i) => p.data.set(src[i].data));
    compare('cpu vs float64', await cpuRun, await gradients(twin, 'cpu'), 1e-5);
    compare('cpu vs float64, varlen attention', await varlenGradients('cpu'), await varlenGradients('cpu', 'float64'), 1e-5);
  });

  for (const b of backends.filter((x) => x.name !== 'cpu')) {
    if (!b.available) {
      it.skip(`${b.name}: skipped, unavailable — ${b.reason}`, () => undefined);
      continue;
    }
    // Generous: a software Vulkan driver compiles the first pipelines slowly on a busy machine.
    it(`${b.name} (${b.device}) against cpu`, { timeout: 900_000 }, async (ctx) => {
      const be = await resolveBackend(b.name);
      // f32 where the engine computes it; otherwise its 16-bit dtype, compared with cpu in that dtype.
      const dtype = pickDtype(be);
      if (!dtype) ctx.skip(`${b.name} computes none of these problems: ${reasons(be, 'f32')}`);
      const tol = dtype === 'f32' ? 1e-4 : 2e-2;
      const ref = dtype === 'f32' ? await cpuRun : await gradients(model, 'cpu', dtype!);
      compare(`${b.name} vs cpu (${dtype})`, await gradients(model, b.name, dtype!), ref, tol);
      const vs = be.supports(describeProblem(hostZeros([11, 4, 8], dtype!), hostZeros([12, 2, 8], dtype!), hostZeros([12, 2, 8], dtype!), VARLEN));
      if (!vs.ok) ctx.skip(`${b.name} does not support varlen in ${dtype}: ${vs.reason}`);
      compare(`${b.name} vs cpu (${dtype}), varlen attention`, await varlenGradients(b.name, 'float32', dtype!), await varlenGradients('cpu', 'float32', dtype!), tol);
    });
  }
  if (!backends.some((x) => x.name !== 'cpu')) {
    it.skip(`no backend besides cpu is registered (${loadNotes.join('; ')})`, () => undefined);
  }
});
