/** Tensor factories and parameter initialisers (seeded). */
import { Rng } from './rng.js';
import { Tensor, alloc, sizeOf, type Precision, type TensorOptions } from './tensor.js';

export interface FactoryOptions extends TensorOptions {
  precision?: Precision;
}

export interface RandomOptions extends FactoryOptions {
  /** Source of randomness; a fresh Rng(0) when omitted (so results are reproducible). */
  rng?: Rng;
}

/** A tensor from values (copied) and a shape. */
export function tensor(values: ArrayLike<number>, shape: readonly number[] = [values.length], options: FactoryOptions = {}): Tensor {
  const data = alloc(options.precision ?? 'float32', values.length);
  for (let i = 0; i < values.length; i++) data[i] = values[i];
  return new Tensor(data, shape, options);
}

export function zeros(shape: readonly number[], options: FactoryOptions = {}): Tensor {
  return new Tensor(alloc(options.precision ?? 'float32', sizeOf(shape)), shape, options);
}

export function full(shape: readonly number[], value: number, options: FactoryOptions = {}): Tensor {
  const t = zeros(shape, options);
  t.data.fill(value);
  return t;
}

export function ones(shape: readonly number[], options: FactoryOptions = {}): Tensor {
  return full(shape, 1, options);
}

/** Normal(mean, std) values. */
export function randn(shape: readonly number[], options: RandomOptions & { mean?: number; std?: number } = {}): Tensor {
  const rng = options.rng ?? new Rng(0);
  const t = zeros(shape, options);
  const mean = options.mean ?? 0;
  const std = options.std ?? 1;
  for (let i = 0; i < t.data.length; i++) t.data[i] = rng.normal(mean, std);
  return t;
}

/** Uniform[low, high) values. */
export function rand(shape: readonly number[], options: RandomOptions & { low?: number; high?: number } = {}): Tensor {
  const rng = options.rng ?? new Rng(0);
  const t = zeros(shape, options);
  const lo = options.low ?? 0;
  const hi = options.high ?? 1;
  for (let i = 0; i < t.data.length; i++) t.data[i] = rng.uniform(lo, hi);
  return t;
}

/** A trainable leaf (requiresGrad = true) of the given values. */
export function parameter(t: Tensor, name?: string): Tensor {
  const p = new Tensor(t.data, t.shape, { requiresGrad: true, name: name ?? t.name });
  return p;
}
