/**
 * SelfAttention and TransformerBlock: the attention block written with the ops of this package,
 * in the [B, T, C] → [B, T, H, D] layout @fa uses (splitting heads is a reshape).
 */
import { FAError } from '@fa/core';
import { Rng } from '../rng.js';
import { Tensor } from '../tensor.js';
import { add } from '../ops/add.js';
import { gelu } from '../ops/gelu.js';
import { mergeHeads, splitHeads } from '../ops/heads.js';
import { attention, type AttentionCallOptions } from '../ops/attention.js';
import type { KVCache } from './kvcache.js';
import { Module } from './module.js';
import { LayerNorm, Linear, type InitOptions } from './layers.js';

export interface SelfAttentionOptions extends InitOptions {
  /** Key/value heads (GQA/MQA); default = heads. */
  kvHeads?: number;
  /** Attention options applied on every call (causal, window, softcap, alibiSlopes, scale, backend). */
  attention?: AttentionCallOptions;
  bias?: boolean;
}

/** Multi-head self-attention: q, k, v projections, @fa attention, output projection. */
export class SelfAttention extends Module {
  readonly q: Linear;
  readonly k: Linear;
  readonly v: Linear;
  readonly proj: Linear;
  readonly headDim: number;
  readonly kvHeads: number;
  readonly attnOptions: AttentionCallOptions;

  constructor(
    readonly dModel: number,
    readonly heads: number,
    options: SelfAttentionOptions = {},
  ) {
    super();
    if (dModel % heads !== 0) throw new FAError('E_ARG', `SelfAttention: dModel ${dModel} is not divisible by ${heads} heads`);
    const rng = options.rng ?? new Rng(0);
    this.headDim = dModel / heads;
    this.kvHeads = options.kvHeads ?? heads;
    if (heads % this.kvHeads !== 0) throw new FAError('E_ARG', `SelfAttention: heads ${heads} is not a multiple of kvHeads ${this.kvHeads}`);
    const init = { rng, precision: options.precision, bias: options.bias };
    this.q = new Linear(dModel, dModel, init);
    this.k = new Linear(dModel, this.kvHeads * this.headDim, init);
    this.v = new Linear(dModel, this.kvHeads * this.headDim, init);
    this.proj = new Linear(dModel, dModel, init);
    this.attnOptions = options.attention ?? {};
  }

  /** x [B, T, C] → [B, T, C]. Per-call options override the constructor's. */
  async forward(x: Tensor, options: AttentionCallOptions = {}): Promise<Tensor> {
    const q = splitHeads(this.q.forward(x), this.heads); // [B, T, H, D]
    const k = splitHeads(this.k.forward(x), this.kvHeads); // [B, T, Hkv, D]
    const v = splitHeads(this.v.forward(x), this.kvHeads);
    const y = await attention(q, k, v, { ...this.attnOptions, ...options });
    return this.proj.forward(mergeHeads(y));
  }

  /**
   * Inference over a KV cache: x [B, Tnew, C] holds only the new tokens; their keys and values
   * join `cache`'s layer `layer` and their queries attend to everything cached (the same result
   * as forward() over the whole sequence, for the new rows, when the mask is causal).
   */
  async forwardCached(x: Tensor, cache: KVCache, layer: number): Promise<Tensor> {
    const q = splitHeads(this.q.forward(x), this.heads);
    const k = splitHeads(this.k.forward(x), this.kvHeads);
    const v = splitHeads(this.v.forward(x), this.kvHeads);
    const { backend: _b, dtype: _d, cuSeqlensQ: _q, cuSeqlensK: _k, ...opts } = this.attnOptions;
    const y = await cache.attend(layer, q, k, v, opts);
    return this.proj.forward(mergeHeads(y));
  }
}

export interface TransformerBlockOptions extends SelfAttentionOptions {
  /** Hidden width of the MLP as a multiple of dModel (default 4). */
  mlpRatio?: number;
}

/** Pre-LayerNorm block: x + attn(ln1(x)), then + mlp(ln2(x)) with a GELU MLP. */
export class TransformerBlock extends Module {
  readonly ln1: LayerNorm;
  readonly attn: SelfAttention;
  readonly ln2: LayerNorm;
  readonly fc1: Linear;
  readonly fc2: Linear;

  constructor(dModel: number, heads: number, options: TransformerBlockOptions = {}) {
    super();
    const rng = options.rng ?? new Rng(0);
    const hidden = Math.round((options.mlpRatio ?? 4) * dModel);
    this.ln1 = new LayerNorm(dModel, 1e-5, options);
    this.attn = new SelfAttention(dModel, heads, { ...options, rng });
    this.ln2 = new LayerNorm(dModel, 1e-5, options);
    this.fc1 = new Linear(dModel, hidden, { rng, precision: options.precision });
    this.fc2 = new Linear(hidden, dModel, { rng, precision: options.precision });
  }

  async forward(x: Tensor, options: AttentionCallOptions = {}): Promise<Tensor> {
    x = add(x, await this.attn.forward(this.ln1.forward(x), options));
    return add(x, this.fc2.forward(gelu(this.fc1.forward(this.ln2.forward(x)))));
  }

  /** forward() for new tokens only, attention over `cache` (SelfAttention.forwardCached). */
  async forwardCached(x: Tensor, cache: KVCache, layer: number): Promise<Tensor> {
    x = add(x, await this.attn.forwardCached(this.ln1.forward(x), cache, layer));
    return add(x, this.fc2.forward(gelu(this.fc1.forward(this.ln2.forward(x)))));
  }
}
