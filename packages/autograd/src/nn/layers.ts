/** Linear, LayerNorm, RMSNorm and Embedding modules, initialised as PyTorch does by default. */
import { Rng } from '../rng.js';
import { rand, randn, ones, zeros } from '../init.js';
import { Tensor, type Precision } from '../tensor.js';
import { linear } from '../ops/linear.js';
import { layerNorm } from '../ops/layernorm.js';
import { rmsNorm } from '../ops/rmsnorm.js';
import { embedding } from '../ops/embedding.js';
import { Module } from './module.js';

export interface InitOptions {
  rng?: Rng;
  precision?: Precision;
}

/** y = x·Wᵀ + b with W [out, in] ~ U(−1/√in, 1/√in), b likewise (torch.nn.Linear). */
export class Linear extends Module {
  readonly weight: Tensor;
  readonly bias: Tensor | null;

  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    options: InitOptions & { bias?: boolean; std?: number } = {},
  ) {
    super();
    const rng = options.rng ?? new Rng(0);
    const bound = 1 / Math.sqrt(inFeatures);
    const w =
      options.std !== undefined
        ? randn([outFeatures, inFeatures], { rng, std: options.std, precision: options.precision })
        : rand([outFeatures, inFeatures], { rng, low: -bound, high: bound, precision: options.precision });
    this.weight = w.requiresGrad_();
    this.bias = options.bias === false ? null : (options.std !== undefined ? zeros([outFeatures], { precision: options.precision }) : rand([outFeatures], { rng, low: -bound, high: bound, precision: options.precision })).requiresGrad_();
  }

  forward(x: Tensor): Tensor {
    return linear(x, this.weight, this.bias);
  }
}

/** Normalises over the last dim; weight 1, bias 0 (torch.nn.LayerNorm). */
export class LayerNorm extends Module {
  readonly weight: Tensor;
  readonly bias: Tensor;

  constructor(
    readonly normalizedShape: number,
    readonly eps = 1e-5,
    options: InitOptions = {},
  ) {
    super();
    this.weight = ones([normalizedShape], { precision: options.precision }).requiresGrad_();
    this.bias = zeros([normalizedShape], { precision: options.precision }).requiresGrad_();
  }

  forward(x: Tensor): Tensor {
    return layerNorm(x, this.weight, this.bias, this.eps);
  }
}

/** Divides by the root mean square over the last dim, then scales; weight 1 (torch.nn.RMSNorm). */
export class RMSNorm extends Module {
  readonly weight: Tensor;

  constructor(
    readonly normalizedShape: number,
    readonly eps = 1e-6,
    options: InitOptions = {},
  ) {
    super();
    this.weight = ones([normalizedShape], { precision: options.precision }).requiresGrad_();
  }

  forward(x: Tensor): Tensor {
    return rmsNorm(x, this.weight, this.eps);
  }
}

/** A lookup table [num, dim] ~ N(0, std²) (std 1 as torch.nn.Embedding; transformers often use 0.02). */
export class Embedding extends Module {
  readonly weight: Tensor;

  constructor(
    readonly numEmbeddings: number,
    readonly embeddingDim: number,
    options: InitOptions & { std?: number } = {},
  ) {
    super();
    this.weight = randn([numEmbeddings, embeddingDim], { rng: options.rng ?? new Rng(0), std: options.std ?? 1, precision: options.precision }).requiresGrad_();
  }

  /** ids [...shape] → [...shape, dim]. */
  forward(ids: Int32Array | readonly number[], shape?: readonly number[]): Tensor {
    return embedding(ids, this.weight, shape);
  }
}
