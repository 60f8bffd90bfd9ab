#!/usr/bin/env node
/**
 * Generation with a KV cache: a tiny causal transformer, trained from scratch to write a
 * sequence backwards after a separator, generates the answer token by token — once by
 * recomputing attention over the whole sequence for every new token, once with a KV cache
 * (KVCache, backend.forwardWithKVCache: each step appends one token's keys and values and reads
 * the cache once) — and the two give the same tokens.
 *
 *   prompt     3 9 0 4 4 7 1 8 |
 *   generated                    8 1 7 4 4 0 9 3
 *
 * Two pre-LN blocks (d_model 32, 4 query heads over 2 kv heads: GQA), token + position
 * embeddings, causal attention through @fa/autograd's attention op, AdamW.
 *
 *   pnpm --filter @fa/autograd build && node packages/autograd/examples/generate.mjs
 *   node packages/autograd/examples/generate.mjs --backend webgpu      # imports @fa/webgpu
 */
import '@fa/core'; // registers the "cpu" backend
import { pathToFileURL } from 'node:url';
import { loadEngines } from './engines.mjs';
import { AdamW, Embedding, KVCache, LayerNorm, Linear, Module, Rng, Tensor, TransformerBlock, add, crossEntropy, noGrad } from '@fa/autograd';

export const CONFIG = {
  digits: 10,
  length: 8,
  dModel: 32,
  heads: 4,
  kvHeads: 2,
  layers: 2,
  batch: 32,
  steps: 400,
  lr: 3e-3,
  heldOut: 200,
  seed: 11,
  backend: 'cpu',
};

/** Token + position embeddings, causal blocks, a final LayerNorm and a linear head. */
export class CausalReverser extends Module {
  /**
   * @param {typeof CONFIG} cfg
   * @param {Rng} rng
   */
  constructor(cfg, rng) {
    super();
    this.cfg = cfg;
    this.sep = cfg.digits; // the separator token
    this.tok = new Embedding(cfg.digits + 1, cfg.dModel, { rng, std: 0.5 });
    this.pos = new Embedding(2 * cfg.length + 1, cfg.dModel, { rng, std: 0.5 });
    this.blocks = Array.from({ length: cfg.layers }, () => new TransformerBlock(cfg.dModel, cfg.heads, { rng, mlpRatio: 2, kvHeads: cfg.kvHeads, attention: { backend: cfg.backend, causal: true } }));
    this.ln = new LayerNorm(cfg.dModel);
    this.head = new Linear(cfg.dModel, cfg.digits + 1, { rng });
  }

  /**
   * Embeddings of tokens `ids` [B·T] at positions start … start + T − 1.
   * @param {Int32Array} ids
   * @param {number} batch
   * @param {number} start
   */
  embed(ids, batch, start) {
    const T = ids.length / batch;
    const positions = Array.from({ length: batch * T }, (_, i) => start + (i % T));
    return add(this.tok.forward(ids, [batch, T]), this.pos.forward(positions, [batch, T]));
  }

  /**
   * Logits [B, T, vocab] of a whole sequence (causal attention over all of it).
   * @param {Int32Array} ids
   * @param {number} batch
   * @returns {Promise<Tensor>}
   */
  async forward(ids, batch) {
    let x = this.embed(ids, batch, 0);
    for (const block of this.blocks) x = await block.forward(x);
    return this.head.forward(this.ln.forward(x));
  }

  /**
   * Logits of new tokens `ids` [B·Tnew] at positions cache.length …, attending over the cache.
   * @param {Int32Array} ids
   * @param {number} batch
   * @param {KVCache} cache
   * @returns {Promise<Tensor>}
   */
  async forwardCached(ids, batch, cache) {
    let x = this.embed(ids, batch, cache.length);
    for (let l = 0; l < this.blocks.length; l++) x = await this.blocks[l].forwardCached(x, cache, l);
    await cache.advance(ids.length / batch);
    return this.head.forward(this.ln.forward(x));
  }
}

/**
 * Prompts (digits, then the separator) and their answers (the digits reversed).
 * @param {Rng} rng
 * @param {number} n
 * @param {typeof CONFIG} cfg
 * @param {Set<string>} [exclude] digit sequences never to produce
 */
export function makeBatch(rng, n, cfg, exclude) {
  const L = cfg.length;
  const prompts = [];
  const answers = [];
  for (let b = 0; b < n; b++) {
    let seq;
    do seq = Array.from({ length: L }, () => rng.int(cfg.digits));
    while (exclude?.has(seq.join(',')));
    prompts.push([...seq, cfg.digits]);
    answers.push([...seq].reverse());
  }
  return { prompts, answers };
}

/**
 * Training batch: inputs prompt + answer[0..L−2]; targets: the answer at positions L … 2L−1.
 * @param {Rng} rng
 * @param {typeof CONFIG} cfg
 * @param {Set<string>} exclude
 */
function trainingBatch(rng, cfg, exclude) {
  const { prompts, answers } = makeBatch(rng, cfg.batch, cfg, exclude);
  const T = 2 * cfg.length;
  const ids = new Int32Array(cfg.batch * T);
  const targets = new Int32Array(cfg.batch * T).fill(-100);
  for (let b = 0; b < cfg.batch; b++) {
    const seq = [...prompts[b], ...answers[b]];
    for (let t = 0; t < T; t++) ids[b * T + t] = seq[t];
    for (let t = 0; t < cfg.length; t++) targets[b * T + cfg.length + t] = answers[b][t];
  }
  return { ids, targets };
}

/**
 * @param {Tensor} logits [B, T, V]
 * @param {number} batch
 */
function argmaxLast(logits, batch) {
  const [B, T, V] = logits.shape;
  const out = [];
  const rows = [];
  for (let b = 0; b < batch; b++) {
    const o = (b * T + T - 1) * V;
    let best = 0;
    for (let c = 1; c < V; c++) if (logits.data[o + c] > logits.data[o + best]) best = c;
    out.push(best);
    rows.push(logits.data.subarray(o, o + V));
  }
  return { tokens: out, rows };
}

/**
 * Greedy generation of `cfg.length` tokens after each prompt: with a KV cache, or recomputing
 * the whole sequence every step. Returns the tokens, each step's last-position logits, seconds.
 */
/**
 * @param {CausalReverser} model
 * @param {number[][]} prompts
 * @param {{ cache: boolean }} how
 */
export async function generate(model, prompts, { cache: useCache }) {
  const cfg = model.cfg;
  const B = prompts.length;
  const seqs = prompts.map((p) => [...p]);
  /** @type {ArrayLike<number>[][]} */
  const logits = [];
  const t0 = performance.now();
  const cache = useCache
    ? await KVCache.create({ layers: cfg.layers, batch: B, capacity: 2 * cfg.length + 1, kvHeads: cfg.kvHeads, headDim: cfg.dModel / cfg.heads, backend: cfg.backend })
    : undefined;
  try {
    await noGrad(async () => {
      for (let step = 0; step < cfg.length; step++) {
        let out;
        if (cache) {
          // the whole prompt first (prefill), then one token a step
          const fresh = step === 0 ? seqs.map((s) => s) : seqs.map((s) => [s[s.length - 1]]);
          out = await model.forwardCached(Int32Array.from(fresh.flat()), B, cache);
        } else {
          out = await model.forward(Int32Array.from(seqs.flat()), B);
        }
        const { tokens, rows } = argmaxLast(out, B);
        logits.push(rows);
        tokens.forEach((t, b) => seqs[b].push(t));
      }
    });
  } finally {
    cache?.dispose();
  }
  return { tokens: seqs.map((s) => s.slice(prompts[0].length)), logits, seconds: (performance.now() - t0) / 1000, cacheBytes: cache?.bytes ?? 0 };
}

/**
 * Trains, then generates the held-out answers both ways and compares.
 * @param {Partial<typeof CONFIG>} [overrides]
 * @param {(line: string) => void} [log]
 */
export async function run(overrides = {}, log = (/** @type {string} */ _line) => {}) {
  const cfg = { ...CONFIG, ...overrides };
  const rng = new Rng(cfg.seed);
  const model = new CausalReverser(cfg, rng);
  const opt = new AdamW(model.parameters(), { lr: cfg.lr, weightDecay: 0 });
  const test = makeBatch(new Rng(cfg.seed + 1000), cfg.heldOut, cfg);
  const heldOut = new Set(test.prompts.map((p) => p.slice(0, cfg.length).join(',')));
  const t0 = performance.now();
  for (let step = 1; step <= cfg.steps; step++) {
    const { ids, targets } = trainingBatch(rng, cfg, heldOut);
    opt.lr = cfg.lr * Math.min(1, step / 20) * (0.5 + 0.5 * Math.cos((Math.PI * step) / cfg.steps));
    opt.zeroGrad();
    const l = crossEntropy(await model.forward(ids, cfg.batch), targets);
    await l.backward();
    opt.step();
    if (step % 100 === 0 || step === 1) log(`step ${String(step).padStart(4)}  loss ${l.item().toFixed(4)}  ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
  const trainSeconds = (performance.now() - t0) / 1000;
  const plain = await generate(model, test.prompts, { cache: false });
  const cached = await generate(model, test.prompts, { cache: true });
  let same = 0;
  let correct = 0;
  let maxLogitDiff = 0;
  for (let b = 0; b < cfg.heldOut; b++) {
    if (plain.tokens[b].join() === cached.tokens[b].join()) same++;
    if (cached.tokens[b].join() === test.answers[b].join()) correct++;
  }
  for (let s = 0; s < cfg.length; s++) {
    for (let b = 0; b < cfg.heldOut; b++) {
      for (let c = 0; c < plain.logits[s][b].length; c++) maxLogitDiff = Math.max(maxLogitDiff, Math.abs(plain.logits[s][b][c] - cached.logits[s][b][c]));
    }
  }
  const ex = test.prompts[0];
  log(`prompt ${ex.slice(0, cfg.length).join(' ')} |  →  with the cache: ${cached.tokens[0].join(' ')}   recomputing: ${plain.tokens[0].join(' ')}`);
  log(`held-out (${cfg.heldOut} prompts): ${same}/${cfg.heldOut} generations identical with and without the cache (largest logit difference ${maxLogitDiff.toExponential(1)}); ${correct}/${cfg.heldOut} reversed correctly`);
  log(`generation: ${plain.seconds.toFixed(2)} s recomputing, ${cached.seconds.toFixed(2)} s with the cache (${cached.cacheBytes} bytes); training ${trainSeconds.toFixed(1)} s on ${cfg.backend}`);
  return { identical: same, heldOut: cfg.heldOut, correct, maxLogitDiff, plainSeconds: plain.seconds, cachedSeconds: cached.seconds, trainSeconds, tokens: { plain: plain.tokens, cached: cached.tokens } };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  /** @type {Record<string, string | number>} */
  const parsed = {};
  for (let i = 2; i < process.argv.length; i += 2) {
    const key = process.argv[i].replace(/^--/, '');
    if (!(key in CONFIG)) throw new Error(`unknown option ${process.argv[i]}; options: ${Object.keys(CONFIG).map((k) => `--${k}`).join(' ')}`);
    parsed[key] = typeof CONFIG[/** @type {keyof typeof CONFIG} */ (key)] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
  }
  const args = /** @type {Partial<typeof CONFIG>} */ (parsed);
  if (args.backend) await loadEngines(args.backend);
  const r = await run(args, (line) => console.log(line));
  process.exit(r.identical === r.heldOut ? 0 : 1);
}
