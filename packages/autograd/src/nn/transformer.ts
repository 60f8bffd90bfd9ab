/**
 * SelfAttention and TransformerBlock: the attention block written with the ops of this package,
 * in the [B, T, C] → [B, T, H, D] layout @fa uses (splitting heads is a reshape). GPT-2-style by
 * default (LayerNorm, GELU MLP, positions outside); LLaMA-style with { norm: 'rms', mlp:
 * 'swiglu', rotary } (RMSNorm, the gated SiLU MLP, rotary positions applied to q and k).
 */
import { FAError } from '@fa/core';
import { Rng } from '../rng.js';
import { Tensor } from '../tensor.js';
import { add } from '../ops/add.js';
import { gelu } from '../ops/gelu.js';
import { swiglu } from '../ops/silu.js';
import { rotary, type RotaryTables } from '../ops/rotary.js';
import { mergeHeads, splitHeads } from '../ops/heads.js';
import { attention, sinkValues, type AttentionCallOptions } from '../ops/attention.js';
import { zeros } from '../init.js';
import type { KVCache } from './kvcache.js';
import { Module } from './module.js';
import { LayerNorm, Linear, RMSNorm, type InitOptions } from './layers.js';

export interface SelfAttentionOptions extends InitOptions {
  /** Key/value heads (GQA/MQA); default = heads. */
  kvHeads?: number;
  /** Attention options applied on every call (causal, window, softcap, alibiSlopes, scale, backend). */
  attention?: AttentionCallOptions;
  bias?: boolean;
  /** Rotary positions on q and k (rotaryTables), GPT-NeoX halves or, interleaved, GPT-J pairs. */
  rotary?: { tables: RotaryTables; interleaved?: boolean };
  /** A learnable attention sink per head (gpt-oss): a parameter [heads], zeros at the start. */
  sinks?: boolean;
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
  readonly rotary: { tables: RotaryTables; interleaved?: boolean } | undefined;
  /** The sink logits [heads] (a parameter), or null. */
  readonly sinks: Tensor | null;

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
    this.rotary = options.rotary;
    this.sinks = options.sinks ? zeros([heads], { precision: options.precision }).requiresGrad_() : null;
    if (this.rotary && this.rotary.tables.rotaryDim > this.headDim) throw new FAError('E_ARG', `SelfAttention: rotaryDim ${this.rotary.tables.rotaryDim} exceeds the head dim ${this.headDim}`);
  }

  /** q and k rotated to their positions (offset + t), when the block has rotary positions. */
  private positions(q: Tensor, k: Tensor, offset: number): [Tensor, Tensor] {
    if (!this.rotary) return [q, k];
    const o = { offset, interleaved: this.rotary.interleaved };
    return [rotary(q, this.rotary.tables, o), rotary(k, this.rotary.tables, o)];
  }

  /** x [B, T, C] → [B, T, C]. Per-call options override the constructor's. */
  async forward(x: Tensor, options: AttentionCallOptions = {}): Promise<Tensor> {
    const [q, k] = this.positions(splitHeads(this.q.forward(x), this.heads), splitHeads(this.k.forward(x), this.kvHeads), 0); // [B, T, H, D], [B, T, Hkv, D]
    const v = splitHeads(this.v.forward(x), this.kvHeads);
    const y = await attention(q, k, v, { ...this.attnOptions, ...(this.sinks ? { sinks: this.sinks } : {}), ...options });
    return this.proj.forward(mergeHeads(y));
  }

  /**
   * Inference over a KV cache: x [B, Tnew, C] holds only the new tokens; their keys and values
   * join `cache`'s layer `layer` and their queries attend to everything cached (the same result
   * as forward() over the whole sequence, for the new rows, when the mask is causal).
   */
  async forwardCached(x: Tensor, cache: KVCache, layer: number): Promise<Tensor> {
    const [q, k] = this.positions(splitHeads(this.q.forward(x), this.heads), splitHeads(this.k.forward(x), this.kvHeads), cache.length);
    const v = splitHeads(this.v.forward(x), this.kvHeads);
    const { backend: _b, dtype: _d, cuSeqlensQ: _q, cuSeqlensK: _k, sinks, ...rest } = { ...this.attnOptions, ...(this.sinks ? { sinks: this.sinks } : {}) };
    const opts = sinks === undefined ? rest : { ...rest, sinks: sinks instanceof Tensor ? await sinkValues(sinks) : sinks };
    const y = await cache.attend(layer, q, k, v, opts);
    return this.proj.forward(mergeHeads(y));
  }
}

export interface TransformerBlockOptions extends SelfAttentionOptions {
  /** Hidden width of the MLP as a multiple of dModel (default 4). */
  mlpRatio?: number;
  /** 'layer' (default) or 'rms' normalisation before attention and MLP. */
  norm?: 'layer' | 'rms';
  /** 'gelu' (default: fc2(gelu(fc1 x))) or 'swiglu' (fc2(silu(fc1 x) · fc3 x)). */
  mlp?: 'gelu' | 'swiglu';
}

/** Pre-norm block: x + attn(ln1(x)), then + mlp(ln2(x)) (a GELU or SwiGLU MLP). */
export class TransformerBlock extends Module {
  readonly ln1: LayerNorm | RMSNorm;
  readonly attn: SelfAttention;
  readonly ln2: LayerNorm | RMSNorm;
  readonly fc1: Linear;
  readonly fc2: Linear;
  /** SwiGLU's second input projection (null for the GELU MLP). */
  readonly fc3: Linear | null;

  constructor(dModel: number, heads: number, options: TransformerBlockOptions = {}) {
    super();
    const rng = options.rng ?? new Rng(0);
    const hidden = Math.round((options.mlpRatio ?? 4) * dModel);
    const norm = () => (options.norm === 'rms' ? new RMSNorm(dModel, 1e-6, options) : new LayerNorm(dModel, 1e-5, options));
    if (options.norm !== undefined && options.norm !== 'layer' && options.norm !== 'rms') throw new FAError('E_ARG', `TransformerBlock: norm must be 'layer' or 'rms', got ${String(options.norm)}`);
    if (options.mlp !== undefined && options.mlp !== 'gelu' && options.mlp !== 'swiglu') throw new FAError('E_ARG', `TransformerBlock: mlp must be 'gelu' or 'swiglu', got ${String(options.mlp)}`);
    this.ln1 = norm();
    this.attn = new SelfAttention(dModel, heads, { ...options, rng });
    this.ln2 = norm();
    this.fc1 = new Linear(dModel, hidden, { rng, precision: options.precision });
    this.fc3 = options.mlp === 'swiglu' ? new Linear(dModel, hidden, { rng, precision: options.precision }) : null;
    this.fc2 = new Linear(hidden, dModel, { rng, precision: options.precision });
  }

  private mlp(x: Tensor): Tensor {
    const h = this.ln2.forward(x);
    return this.fc2.forward(this.fc3 ? swiglu(this.fc1.forward(h), this.fc3.forward(h)) : gelu(this.fc1.forward(h)));
  }

  /** `residualDropout`: applied to the attention (branch 0) and MLP (branch 1) outputs before each residual add. */
  async forward(x: Tensor, options: AttentionCallOptions = {}, residualDropout?: (y: Tensor, branch: 0 | 1) => Tensor): Promise<Tensor> {
    const a = await this.attn.forward(this.ln1.forward(x), options);
    x = add(x, residualDropout ? residualDropout(a, 0) : a);
    const m = this.mlp(x);
    return add(x, residualDropout ? residualDropout(m, 1) : m);
  }

  /** forward() for new tokens only, attention over `cache` (SelfAttention.forwardCached). */
  async forwardCached(x: Tensor, cache: KVCache, layer: number): Promise<Tensor> {
    x = add(x, await this.attn.forwardCached(this.ln1.forward(x), cache, layer));
    return add(x, this.mlp(x));
  }
}
