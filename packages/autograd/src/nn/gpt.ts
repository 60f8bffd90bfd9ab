/**
 * A GPT-2-style language model: token and learned position embeddings, pre-LayerNorm blocks with
 * causal attention through the FlashAttention op (GQA when kvHeads < heads) and a GELU MLP, a
 * final LayerNorm and a head tied to the token embedding (logits = x · Eᵀ, GPT-2's weight
 * tying). { positions: 'rotary', norm: 'rms', mlp: 'swiglu' } makes it LLaMA-style: rotary
 * positions on q and k (no position table), RMSNorm, the gated SiLU MLP. Training runs forward(); generation runs prefill and one-token steps over a KVCache
 * (forwardCached), so a new token costs one pass over the cache instead of attention over the
 * whole sequence.
 */
import { FAError } from '@fa/core';
import { Rng } from '../rng.js';
import { Tensor } from '../tensor.js';
import { add } from '../ops/add.js';
import { linear } from '../ops/linear.js';
import type { BackendChoice } from '../ops/attention.js';
import { noGrad } from '../grad-mode.js';
import { Module } from './module.js';
import { Embedding, LayerNorm, RMSNorm } from './layers.js';
import { rotaryTables } from '../ops/rotary.js';
import { TransformerBlock } from './transformer.js';
import { dropout } from '../ops/dropout.js';
import { KVCache } from './kvcache.js';

export interface GPTConfig {
  vocab: number;
  /** Longest sequence (the position table's size). */
  maxT: number;
  dModel: number;
  layers: number;
  heads: number;
  /** Key/value heads (GQA); default `heads`. */
  kvHeads?: number;
  /** MLP width as a multiple of dModel (default 4). */
  mlpRatio?: number;
  /** The attention engine (default: the attention op's default). */
  backend?: BackendChoice;
  /** Initialisation seed (default 0). */
  seed?: number;
  /** 'learned' (default: a position table) or 'rotary' (RoPE on q and k, base 10000). */
  positions?: 'learned' | 'rotary';
  norm?: 'layer' | 'rms';
  mlp?: 'gelu' | 'swiglu';
  /** A learnable attention sink per head in every block (gpt-oss). */
  sinks?: boolean;
  /**
   * GPT-2's dropout (default 0): on the embeddings, the attention probabilities and each
   * block's two residual branches, in forward() calls given a `dropoutSeed` (training); calls
   * without one (evaluation, generation) drop nothing.
   */
  dropout?: number;
}

export interface GPTForwardOptions {
  /** Draws this step's dropout masks (a new seed every step: the step number will do). */
  dropoutSeed?: number;
}

export interface GenerateOptions {
  /** 0 (default): greedy; otherwise sample from softmax(logits / temperature). */
  temperature?: number;
  /** The sampling generator (default: seed 0). */
  rng?: Rng;
}

export class GPT extends Module {
  readonly config: Required<Omit<GPTConfig, 'backend'>> & { backend?: BackendChoice };
  readonly tok: Embedding;
  /** The position table (null with rotary positions). */
  readonly pos: Embedding | null;
  readonly blocks: TransformerBlock[];
  readonly ln: LayerNorm | RMSNorm;

  constructor(c: GPTConfig) {
    super();
    for (const k of ['vocab', 'maxT', 'dModel', 'layers', 'heads'] as const) {
      if (!Number.isSafeInteger(c[k]) || c[k] < 1) throw new FAError('E_ARG', `GPT: ${k} must be a positive integer, got ${String(c[k])}`);
    }
    if (c.dModel % c.heads !== 0) throw new FAError('E_ARG', `GPT: dModel ${c.dModel} is not a multiple of heads ${c.heads}`);
    this.config = { kvHeads: c.heads, mlpRatio: 4, seed: 0, positions: 'learned', norm: 'layer', mlp: 'gelu', sinks: false, dropout: 0, ...c };
    const p = this.config.dropout;
    if (typeof p !== 'number' || !(p >= 0 && p < 1)) throw new FAError('E_ARG', `GPT: dropout must be a probability in [0, 1), got ${String(p)}`);
    const rng = new Rng(this.config.seed);
    // GPT-2's initialisation: N(0, 0.02) embeddings
    this.tok = new Embedding(c.vocab, c.dModel, { rng, std: 0.02 });
    const rope = this.config.positions === 'rotary' ? { tables: rotaryTables(c.maxT, c.dModel / c.heads) } : undefined;
    if (this.config.positions !== 'learned' && this.config.positions !== 'rotary') throw new FAError('E_ARG', `GPT: positions must be 'learned' or 'rotary', got ${String(this.config.positions)}`);
    this.pos = rope ? null : new Embedding(c.maxT, c.dModel, { rng, std: 0.02 });
    const { kvHeads, mlpRatio, norm, mlp } = this.config;
    this.blocks = Array.from({ length: c.layers }, () => new TransformerBlock(c.dModel, c.heads, { rng, kvHeads, mlpRatio, norm, mlp, rotary: rope, sinks: c.sinks, attention: { backend: c.backend, causal: true } }));
    this.ln = norm === 'rms' ? new RMSNorm(c.dModel) : new LayerNorm(c.dModel);
  }

  private embed(ids: Int32Array, batch: number, start: number): Tensor {
    const T = ids.length / batch;
    if (!Number.isInteger(T) || start + T > this.config.maxT) throw new FAError('E_SHAPE', `GPT: ${ids.length} ids are not ${batch} sequences that fit maxT ${this.config.maxT} from position ${start}`);
    const tokens = this.tok.forward(ids, [batch, T]);
    if (!this.pos) return tokens; // rotary: positions enter in attention
    const positions = new Int32Array(ids.length);
    for (let i = 0; i < ids.length; i++) positions[i] = start + (i % T);
    return add(tokens, this.pos.forward(positions, [batch, T]));
  }

  /** The tied head: logits [B, T, vocab] = ln(x) · Eᵀ. */
  private head(x: Tensor): Tensor {
    return linear(this.ln.forward(x), this.tok.weight);
  }

  /**
   * Logits [B, T, vocab] of `batch` sequences of ids (row-major [B·T]), causal. With the config's
   * dropout and a `dropoutSeed`, the masks of site s (embeddings 0; layer l: attention
   * probabilities 3l + 1, its residual branches 3l + 2 and 3l + 3) are keyed by (seed, s).
   */
  async forward(ids: Int32Array, batch: number, opts: GPTForwardOptions = {}): Promise<Tensor> {
    const p = this.config.dropout, seed = opts.dropoutSeed;
    const training = p > 0 && seed !== undefined;
    const drop = (y: Tensor, site: number) => (training ? dropout(y, p, { seed: seed!, offset: site }) : y);
    let x = drop(this.embed(ids, batch, 0), 0);
    for (let l = 0; l < this.blocks.length; l++) {
      const attn = training ? { dropout: { p, seed: seed!, offset: 3 * l + 1 } } : {};
      x = await this.blocks[l].forward(x, attn, training ? (y, branch) => drop(y, 3 * l + 2 + branch) : undefined);
    }
    return this.head(x);
  }

  /** Logits of new tokens at positions cache.length …, attending over the cache; advances it. */
  async forwardCached(ids: Int32Array, batch: number, cache: KVCache): Promise<Tensor> {
    let x = this.embed(ids, batch, cache.length);
    for (let l = 0; l < this.blocks.length; l++) x = await this.blocks[l].forwardCached(x, cache, l);
    await cache.advance(ids.length / batch);
    return this.head(x);
  }

  /** A KV cache for this model: `batch` sequences of up to `capacity` tokens (default maxT). */
  createCache(batch = 1, capacity = this.config.maxT): Promise<KVCache> {
    const c = this.config;
    // a model on a device keeps its cache there
    const dev = this.tok.weight.device?.engine as unknown as BackendChoice | undefined;
    return KVCache.create({ layers: c.layers, batch, capacity, kvHeads: c.kvHeads, headDim: c.dModel / c.heads, backend: dev ?? c.backend });
  }

  /**
   * Continues `prompt` by `n` tokens (one sequence): a prefill of the prompt into a fresh KV
   * cache, then one step per token. Returns the new tokens.
   */
  async generate(prompt: Int32Array, n: number, options: GenerateOptions = {}): Promise<Int32Array> {
    if (prompt.length < 1 || prompt.length + n > this.config.maxT) throw new FAError('E_ARG', `GPT.generate: a prompt of ${prompt.length} and ${n} new tokens must fit maxT ${this.config.maxT}`);
    const rng = options.rng ?? new Rng(0);
    const temperature = options.temperature ?? 0;
    const cache = await this.createCache(1, prompt.length + n);
    const out = new Int32Array(n);
    try {
      await noGrad(async () => {
        let logits = await this.forwardCached(prompt, 1, cache);
        for (let i = 0; i < n; i++) {
          const V = this.config.vocab;
          const all = logits.onDevice ? (await logits.toHost()).data : logits.data; // (the one read a token)
          const row = all.subarray(all.length - V);
          out[i] = pick(row, temperature, rng);
          if (i + 1 < n) logits = await this.forwardCached(out.subarray(i, i + 1), 1, cache);
        }
      });
    } finally {
      cache.dispose();
    }
    return out;
  }
}

/** The argmax, or a sample of softmax(row / temperature). */
function pick(row: ArrayLike<number>, temperature: number, rng: Rng): number {
  let best = 0;
  for (let j = 1; j < row.length; j++) if (row[j] > row[best]) best = j;
  if (!(temperature > 0)) return best;
  let s = 0;
  const p = new Float64Array(row.length);
  for (let j = 0; j < row.length; j++) s += p[j] = Math.exp((row[j] - row[best]) / temperature);
  let u = rng.random() * s;
  for (let j = 0; j < row.length; j++) if ((u -= p[j]) <= 0) return j;
  return row.length - 1;
}
