// One training step of a small GPT-style model through @fa/autograd, timed (issue 25): 4 pre-norm
// blocks, d_model 256, 4 heads, vocab 256, B 2, T 512, causal, AdamW. `--engine` picks the model
// engine (setModelEngine: cpu, native, wasm; the products of linear/matmul), `--backend` the
// attention engine (default: the same). Prints the median step, tokens/s, the model's GFLOP/s
// (6 · params · tokens + attention) and the share of the step spent in products.
//   node packages/autograd/bench/train-step.mjs [--engine native] [--backend native] [--steps 4] [--T 512]
import { resolveBackend, gemmFlops } from '@fa/core';
import { AdamW, Embedding, LayerNorm, Linear, Module, Rng, TransformerBlock, add, crossEntropy, setModelEngine } from '@fa/autograd';
import { loadEngines } from '../examples/engines.mjs';

const arg = (name, dflt) => { const i = process.argv.indexOf(`--${name}`); return i > 0 ? process.argv[i + 1] : dflt; };
const engineName = arg('engine', 'cpu');
const backendName = arg('backend', engineName);
const steps = Number(arg('steps', 4));
const [L, C, H, V, B, T] = [4, 256, 4, Number(arg('vocab', 256)), Number(arg('B', 2)), Number(arg('T', 512))];

await loadEngines([...new Set([engineName, backendName])].join(','));
const engine = await resolveBackend(engineName);
const attn = backendName === engineName ? engine : await resolveBackend(backendName);
const ops = setModelEngine(engine);
// count the time and FLOPs of the products
let gemmMs = 0, gemmFl = 0;
setModelEngine({ ...ops, gemm(g) { const t0 = performance.now(); ops.gemm(g); gemmMs += performance.now() - t0; gemmFl += gemmFlops(g); } });

class GPT extends Module {
  constructor(rng) {
    super();
    this.tok = new Embedding(V, C, { rng, std: 0.02 });
    this.pos = new Embedding(T, C, { rng, std: 0.02 });
    this.blocks = Array.from({ length: L }, () => new TransformerBlock(C, H, { rng, attention: { backend: attn, causal: true } }));
    this.ln = new LayerNorm(C);
    this.head = new Linear(C, V, { rng });
  }
  async forward(ids) {
    let x = add(this.tok.forward(ids, [B, T]), this.pos.weight);
    for (const b of this.blocks) x = await b.forward(x);
    return this.head.forward(this.ln.forward(x));
  }
}
const rng = new Rng(1);
const model = new GPT(rng);
const opt = new AdamW(model.parameters(), { lr: 1e-3 });
const params = model.parameters().reduce((n, p) => n + p.size, 0);
const ids = new Int32Array(B * T).map((_, i) => (i * 7 + 3) % V);
const targets = new Int32Array(B * T).map((_, i) => (i * 7 + 10) % V);
const times = [], shares = [];
let loss0 = 0, loss = 0;
for (let s = 0; s < steps + 1; s++) {
  gemmMs = 0; gemmFl = 0;
  const t0 = performance.now();
  opt.zeroGrad();
  const l = crossEntropy(await model.forward(ids), targets);
  await l.backward();
  opt.step();
  const ms = performance.now() - t0;
  loss = l.item();
  if (s === 0) loss0 = loss;
  else { times.push(ms); shares.push(gemmMs / ms); }
}
const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const ms = med(times);
const attnFl = L * 4 * B * H * T * T * (C / H) * 0.5 * 3.5; // causal, forward + backward (2.5x)
const fl = 6 * params * B * T + attnFl;
console.log(`| model engine ${ops.engine} (${ops.kernel}), attention ${attn.name} | step ${ms.toFixed(0)} ms | ${((B * T) / (ms / 1000)).toFixed(0)} tokens/s | ${(fl / (ms / 1e3) / 1e9).toFixed(1)} GFLOP/s | products ${(100 * med(shares)).toFixed(0)} % of the step, ${(gemmFl / 1e9).toFixed(1)} GFLOP at ${(gemmFl / (gemmMs / 1e3) / 1e9).toFixed(1)} GFLOP/s | loss ${loss0.toFixed(3)} -> ${loss.toFixed(3)} |`);
await engine.dispose?.();
if (attn !== engine) await attn.dispose?.();
