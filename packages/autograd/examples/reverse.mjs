#!/usr/bin/env node
/**
 * A tiny transformer trained from scratch to reverse sequences, on the cpu backend.
 *
 *   input   3 9 0 4 4 7 1 8
 *   target  8 1 7 4 4 0 9 3
 *
 * Two pre-LN blocks (d_model 32, 2 heads of 16, see CONFIG), token + learned position
 * embeddings, bidirectional attention through @fa/autograd's attention op (the FlashAttention
 * backward of whichever backend is chosen), AdamW. Accuracy is measured on held-out sequences
 * that training never sees.
 *
 *   pnpm --filter @fa/autograd build && node packages/autograd/examples/reverse.mjs
 *   node packages/autograd/examples/reverse.mjs --backend webgpu      # imports @fa/webgpu
 *   node packages/autograd/examples/reverse.mjs --backend cuda --dtype bf16
 *   node packages/autograd/examples/reverse.mjs --backend auto        # every installed engine;
 *        each attention call runs on the first that computes it (a note says when one declined)
 *   node packages/autograd/examples/reverse.mjs --backend cuda,cpu    # names in order of preference
 *
 * An engine that cannot run the model (not installed, no driver, declines its attention
 * problem) ends the run with one line "reverse: E_CODE: message" and exit status 1.
 */
import { FAError, isFAError } from '@fa/core'; // @fa/core registers the "cpu" backend
import { pathToFileURL } from 'node:url';
import { loadEngines } from './engines.mjs';
import { AdamW, Embedding, LayerNorm, Linear, Module, Rng, TransformerBlock, add, crossEntropy, noGrad } from '@fa/autograd';

export const CONFIG = {
  vocab: 10,
  length: 8,
  dModel: 32,
  heads: 2,
  layers: 2,
  batch: 32,
  steps: 300,
  lr: 3e-3,
  heldOut: 500,
  seed: 7,
  /** A registered name, 'auto', or comma-separated names in order of preference. */
  backend: 'cpu',
  /** The dtype attention computes in: 'f32', or 'bf16' / 'f16' (for engines such as @fa/cuda). */
  dtype: /** @type {import('@fa/core').DType} */ ('f32'),
};

/** Token + position embeddings, a stack of blocks, a final LayerNorm and a linear head. */
export class Reverser extends Module {
  /**
   * @param {typeof CONFIG} cfg
   * @param {Rng} rng
   */
  constructor(cfg, rng) {
    super();
    this.cfg = cfg;
    this.tok = new Embedding(cfg.vocab, cfg.dModel, { rng, std: 0.5 });
    this.pos = new Embedding(cfg.length, cfg.dModel, { rng, std: 0.5 });
    const backend = cfg.backend.includes(',') ? cfg.backend.split(',') : cfg.backend;
    this.blocks = Array.from({ length: cfg.layers }, () => new TransformerBlock(cfg.dModel, cfg.heads, { rng, mlpRatio: 2, attention: { backend, dtype: cfg.dtype } }));
    this.ln = new LayerNorm(cfg.dModel);
    this.head = new Linear(cfg.dModel, cfg.vocab, { rng });
  }

  /**
   * @param {Int32Array} ids [B·T] token ids
   * @param {number} batch
   * @returns {Promise<import('@fa/autograd').Tensor>} logits [B, T, vocab]
   */
  async forward(ids, batch) {
    const T = this.cfg.length;
    let x = add(this.tok.forward(ids, [batch, T]), this.pos.weight); // [B, T, C] + [T, C]
    for (const block of this.blocks) x = await block.forward(x);
    return this.head.forward(this.ln.forward(x));
  }
}

/**
 * @param {Rng} rng
 * @param {number} n
 * @param {typeof CONFIG} cfg
 * @param {Set<string>} [exclude] sequences never to produce
 */
export function makeBatch(rng, n, cfg, exclude) {
  const T = cfg.length;
  const ids = new Int32Array(n * T);
  const targets = new Int32Array(n * T);
  for (let b = 0; b < n; b++) {
    let seq;
    do seq = Array.from({ length: T }, () => rng.int(cfg.vocab));
    while (exclude?.has(seq.join(',')));
    for (let t = 0; t < T; t++) {
      ids[b * T + t] = seq[t];
      targets[b * T + t] = seq[T - 1 - t];
    }
  }
  return { ids, targets };
}

/**
 * @param {import('@fa/autograd').Tensor} logits
 * @param {Int32Array} targets
 * @param {number} T
 */
function accuracy(logits, targets, T) {
  const V = logits.shape[logits.shape.length - 1];
  let tokens = 0;
  let seqs = 0;
  for (let s = 0; s < targets.length / T; s++) {
    let all = true;
    for (let t = 0; t < T; t++) {
      const r = s * T + t;
      let best = 0;
      for (let c = 1; c < V; c++) if (logits.data[r * V + c] > logits.data[r * V + best]) best = c;
      if (best === targets[r]) tokens++;
      else all = false;
    }
    if (all) seqs++;
  }
  return { token: tokens / targets.length, sequence: seqs / (targets.length / T) };
}

/**
 * Trains and evaluates; returns held-out accuracy and timings.
 * @param {Partial<typeof CONFIG>} [overrides]
 * @param {(line: string) => void} [log]
 */
export async function train(overrides = {}, log = () => {}) {
  const cfg = { ...CONFIG, ...overrides };
  const rng = new Rng(cfg.seed);
  const model = new Reverser(cfg, rng);
  const opt = new AdamW(model.parameters(), { lr: cfg.lr, weightDecay: 0 });

  // Held-out sequences come from their own stream; training never draws one of them.
  const test = makeBatch(new Rng(cfg.seed + 1000), cfg.heldOut, cfg);
  const heldOut = new Set();
  for (let s = 0; s < cfg.heldOut; s++) heldOut.add(Array.from(test.ids.subarray(s * cfg.length, (s + 1) * cfg.length)).join(','));

  const t0 = performance.now();
  let loss = NaN;
  for (let step = 1; step <= cfg.steps; step++) {
    const { ids, targets } = makeBatch(rng, cfg.batch, cfg, heldOut);
    // Cosine decay after a short warm-up.
    const warm = Math.min(1, step / 20);
    opt.lr = cfg.lr * warm * (0.5 + 0.5 * Math.cos((Math.PI * step) / cfg.steps));
    opt.zeroGrad();
    const l = crossEntropy(await model.forward(ids, cfg.batch), targets);
    await l.backward();
    opt.step();
    loss = l.item();
    if (step % 50 === 0 || step === 1) log(`step ${String(step).padStart(4)}  loss ${loss.toFixed(4)}  ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
  const seconds = (performance.now() - t0) / 1000;
  const logits = await noGrad(() => model.forward(test.ids, cfg.heldOut));
  const acc = accuracy(logits, test.targets, cfg.length);
  log(`held-out (${cfg.heldOut} sequences): token accuracy ${(100 * acc.token).toFixed(2)}%, whole-sequence ${(100 * acc.sequence).toFixed(2)}%; trained ${cfg.steps} steps in ${seconds.toFixed(1)} s on ${cfg.backend} (${cfg.dtype})`);
  return { tokenAccuracy: acc.token, sequenceAccuracy: acc.sequence, seconds, finalLoss: loss, parameters: model.numParameters(), config: cfg };
}

/** `--name value` pairs of CONFIG's keys (numbers parsed). */
function parseArgs(/** @type {string[]} */ argv) {
  /** @type {Record<string, string | number>} */
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in CONFIG)) throw new FAError('E_ARG', `unknown option ${argv[i]}; options: ${Object.keys(CONFIG).map((k) => `--${k}`).join(' ')}`);
    const v = argv[i + 1];
    out[key] = typeof CONFIG[/** @type {keyof typeof CONFIG} */ (key)] === 'number' ? Number(v) : v;
  }
  return /** @type {Partial<typeof CONFIG>} */ (out);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    const args = parseArgs(process.argv.slice(2));
    await loadEngines(String(args.backend ?? CONFIG.backend));
    const r = await train(args, (line) => console.log(line));
    console.log(JSON.stringify({ tokenAccuracy: r.tokenAccuracy, sequenceAccuracy: r.sequenceAccuracy, seconds: r.seconds, parameters: r.parameters }));
    process.exit(r.tokenAccuracy >= 0.95 ? 0 : 1);
  } catch (e) {
    // A bad option, or an engine that is missing or declines the model's attention: one line.
    if (!isFAError(e)) throw e;
    console.error(`reverse: ${e.code}: ${e.message}`);
    process.exit(1);
  }
}
