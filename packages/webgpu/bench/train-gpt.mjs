// A GPT training step on the WebGPU engine (issue 25's WebGPU target): our GPT with every tensor
// on the device (@fa/autograd + @fa/webgpu's device ops and FlashAttention), against the same model
// written with tfjs-backend-webgpu's ops (naive attention: the T×T scores materialised), on one
// GPUDevice (tfjs's), f32, Adam (weight decay 0 on both), from the same initial weights. Checks
// that step 0's losses agree, then times N steps back to back on each (one read at the end).
//   node bench/train-gpt.mjs            (issue shape: 4 layers, d 256, 4 heads, vocab 256, B 2, T 1024)
//   FA_TRAIN=small node bench/train-gpt.mjs   (a quick check: 2 layers, d 64, T 64)
// On the GPU machine: prepare.sh --webgpu with this script, tfjs.bundle.mjs (webgpu/bench/pack-tfjs.mjs) beside it.
import { create, globals } from 'webgpu';

const small = process.env.FA_TRAIN === 'small';
const cfg = small ? { vocab: 64, maxT: 64, dModel: 64, layers: 2, heads: 4, B: 2, T: 64 } : { vocab: 256, maxT: 1024, dModel: 256, layers: 4, heads: 4, B: 2, T: 1024 };
const STEPS = Number(process.env.FA_TRAIN_STEPS ?? (small ? 3 : 10));
Object.assign(globalThis, globals);
globalThis.navigator ??= { gpu: create([]), userAgent: 'node' };
let tf;
try {
  tf = (await import('./tfjs.bundle.mjs')).default;
} catch {
  // (tfjs-core's Node entry registers no gradients and its ESM files do not load in Node: bundle
  // core, its gradients and the WebGPU backend with esbuild, as for the GPU machine)
  const { execFileSync } = await import('node:child_process');
  const { tmpdir } = await import('node:os');
  const out = `${tmpdir()}/fa-tfjs-${process.pid}.mjs`;
  execFileSync(process.execPath, [new URL('./pack-tfjs.mjs', import.meta.url).pathname, out]);
  tf = (await import(out)).default;
}
tf.env().set('WEBGPU_CPU_FORWARD', false);
await tf.setBackend('webgpu');
await tf.ready();
const device = tf.backend().device;
const { createWebGPUBackend } = await import('@fa/webgpu');
let ag;
try {
  ag = await import('@fa/autograd');
} catch {
  ag = await import('../../autograd/dist/index.js'); // (this monorepo: @fa/webgpu does not depend on it)
}
const { GPT, AdamW, crossEntropy } = ag;
const fa = await createWebGPUBackend({ device });
const faBatched = await createWebGPUBackend({ device, batchCalls: true }); // the same model, calls batched a turn
const { vocab: V, dModel: C, layers: L, heads: H, B, T } = cfg;
const D = C / H;
console.log(`# GPT training step on WebGPU: ${fa.device}, ${new Date().toISOString()}; ${L} layers, d ${C}, ${H} heads, vocab ${V}, B ${B}, T ${T}, f32`);

// the same data for both
const ids = Int32Array.from({ length: B * T }, (_, i) => (i * 7 + ((i / 13) | 0)) % V);
const targets = Int32Array.from({ length: B * T }, (_, i) => ids[(i + 1) % (B * T)]);

// ---- ours: built on the host, moved to the device
const host = new GPT({ vocab: V, maxT: cfg.maxT, dModel: C, layers: L, heads: H, seed: 1 });
const named = new Map(host.namedParameters().map(([n, p]) => [n, Float32Array.from(p.data)]));
const stepOn = async (engine) => {
  const m = await new GPT({ vocab: V, maxT: cfg.maxT, dModel: C, layers: L, heads: H, seed: 1 }).to(engine);
  const o = new AdamW(m.parameters(), { lr: 1e-3, weightDecay: 0 });
  return async () => {
    o.zeroGrad();
    const loss = crossEntropy(await m.forward(ids, B), targets);
    await loss.backward();
    o.step();
    return loss;
  };
};
const ourStep = await stepOn(fa);
const ourBatchedStep = await stepOn(faBatched);

// ---- tfjs: the same architecture and weights
const v = (name, shape) => tf.variable(tf.tensor(named.get(name), shape), true, name);
const P = {
  wte: v('tok.weight', [V, C]), wpe: v('pos.weight', [cfg.maxT, C]),
  lnw: v('ln.weight', [C]), lnb: v('ln.bias', [C]),
  blocks: Array.from({ length: L }, (_, l) => {
    const b = (n, shape) => v(`blocks.${l}.${n}`, shape);
    return {
      ln1w: b('ln1.weight', [C]), ln1b: b('ln1.bias', [C]), ln2w: b('ln2.weight', [C]), ln2b: b('ln2.bias', [C]),
      qw: b('attn.q.weight', [C, C]), qb: b('attn.q.bias', [C]), kw: b('attn.k.weight', [C, C]), kb: b('attn.k.bias', [C]),
      vw: b('attn.v.weight', [C, C]), vb: b('attn.v.bias', [C]), pw: b('attn.proj.weight', [C, C]), pb: b('attn.proj.bias', [C]),
      f1w: b('fc1.weight', [4 * C, C]), f1b: b('fc1.bias', [4 * C]), f2w: b('fc2.weight', [C, 4 * C]), f2b: b('fc2.bias', [C]),
    };
  }),
};
const lin = (x, w, b) => tf.add(tf.matMul(x, w, false, true), b);
const ln = (x, w, b) => {
  const { mean, variance } = tf.moments(x, -1, true);
  return tf.add(tf.mul(tf.div(tf.sub(x, mean), tf.sqrt(tf.add(variance, 1e-5))), w), b);
};
const erfGelu = (x) => tf.mul(tf.mul(x, 0.5), tf.add(tf.erf(tf.div(x, Math.SQRT2)), 1));
const causal = tf.tensor2d(Float32Array.from({ length: T * T }, (_, i) => ((i % T) > Math.floor(i / T) ? -1e9 : 0)), [T, T]);
const idsT = tf.tensor1d(ids, 'int32'), posT = tf.tensor1d(Int32Array.from({ length: B * T }, (_, i) => i % T), 'int32');
const oneHot = tf.oneHot(tf.tensor1d(targets, 'int32'), V);
const tfLoss = () => {
  let x = tf.add(tf.gather(P.wte, idsT), tf.gather(P.wpe, posT)); // [B·T, C]
  for (const p of P.blocks) {
    const h = ln(x, p.ln1w, p.ln1b);
    const heads = (y) => tf.transpose(tf.reshape(y, [B, T, H, D]), [0, 2, 1, 3]);
    const q = heads(lin(h, p.qw, p.qb)), k = heads(lin(h, p.kw, p.kb)), vv = heads(lin(h, p.vw, p.vb));
    const s = tf.add(tf.mul(tf.matMul(q, k, false, true), 1 / Math.sqrt(D)), causal);
    const y = tf.reshape(tf.transpose(tf.matMul(tf.softmax(s), vv), [0, 2, 1, 3]), [B * T, C]);
    x = tf.add(x, lin(y, p.pw, p.pb));
    x = tf.add(x, lin(erfGelu(lin(ln(x, p.ln2w, p.ln2b), p.f1w, p.f1b)), p.f2w, p.f2b));
  }
  const logits = tf.matMul(ln(x, P.lnw, P.lnb), P.wte, false, true);
  return tf.losses.softmaxCrossEntropy(oneHot, logits);
};
const tfOpt = tf.train.adam(1e-3, 0.9, 0.999, 1e-8);
const tfStep = () => tfOpt.minimize(tfLoss, true);

// step 0 on both: the same loss (the same weights and data)
const l0 = await (await ourStep()).value();
const l0b = await (await ourBatchedStep()).value();
if (l0b !== l0) throw new Error(`batched calls changed the loss: ${l0b} vs ${l0}`);
const t0 = tfStep();
const m0 = (await t0.data())[0];
t0.dispose();
console.log(`step 0 loss: ours ${l0.toFixed(5)}, tfjs ${m0.toFixed(5)} (rel. diff ${(Math.abs(l0 - m0) / m0).toExponential(1)})`);
if (!(Math.abs(l0 - m0) / m0 < 1e-3)) throw new Error('the two models disagree at step 0');

const timeIt = async (label, step, read) => {
  await read(await step()); // warm
  const t = performance.now();
  let last;
  for (let i = 0; i < STEPS; i++) {
    if (last && last.dispose) last.dispose();
    last = await step();
  }
  const value = await read(last);
  const ms = (performance.now() - t) / STEPS;
  return { label, ms, value };
};
const a = await timeIt('ours (FlashAttention, device model ops)', ourStep, (l) => l.value());
const ab = await timeIt('ours, calls batched a turn (batchCalls)', ourBatchedStep, (l) => l.value());
const b = await timeIt('tfjs-backend-webgpu (naive attention)', tfStep, async (l) => (await l.data())[0]);
console.log('| model | ms a step | tokens/s | last loss |');
console.log('|---|---|---|---|');
for (const r of [a, ab, b]) console.log(`| ${r.label} | ${r.ms.toFixed(1)} | ${((B * T) / (r.ms / 1000)).toFixed(0)} | ${r.value.toFixed(4)} |`);
console.log(`ours / tfjs: ${(b.ms / a.ms).toFixed(2)}x faster; batched: ${(b.ms / ab.ms).toFixed(2)}x (${faBatched.batchesSubmitted} batches submitted in all)`);
