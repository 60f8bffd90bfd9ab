/**
 * The autograd Tensor: row-major data in a Float32Array (the normal case) or a Float64Array
 * (gradcheck's float64 twin), a shape, and the links reverse mode needs: `requiresGrad`,
 * `grad`, and for a tensor an op produced, the node that computes its gradient (`gradFn`).
 */
import { FAError, tensor as hostTensor } from '@fa/core';
import type { Node } from './node.js';
import { backward } from './backward.js';
import { DeviceArray, isDeviceEngine, settle, type DeviceEngine } from './device.js';

export type Precision = 'float32' | 'float64';
export type Data = Float32Array | Float64Array;

/** Number of elements of a shape. */
export function sizeOf(shape: readonly number[]): number {
  let n = 1;
  for (const s of shape) n *= s;
  return n;
}

export function shapeStr(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

export function precisionOf(data: Data): Precision {
  return data instanceof Float64Array ? 'float64' : 'float32';
}

export function alloc(precision: Precision, n: number): Data {
  return precision === 'float64' ? new Float64Array(n) : new Float32Array(n);
}

/** `data` in the given precision: the same array when it already is, a rounded/widened copy otherwise. */
export function castData(data: Data, precision: Precision): Data {
  if (precisionOf(data) === precision) return data;
  return precision === 'float64' ? Float64Array.from(data) : Float32Array.from(data);
}

function checkShape(shape: readonly number[], what: string): void {
  if (!Array.isArray(shape) || !shape.every((s) => Number.isSafeInteger(s) && s >= 0)) {
    throw new FAError('E_SHAPE', `${what}: shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`);
  }
}

export interface TensorOptions {
  /** Accumulate a gradient into `.grad` during backward (parameters, gradcheck inputs). */
  requiresGrad?: boolean;
  /** A label shown in memory reports and errors. */
  name?: string;
}

export class Tensor {
  #host: Data | null;
  /** The values on an engine's device (device.ts), or null for a host tensor. */
  readonly device: DeviceArray | null;
  readonly shape: readonly number[];
  /** Leaf: whether backward accumulates into `.grad`. Non-leaf: whether it is part of a recorded graph. */
  requiresGrad: boolean;
  /** The accumulated gradient (leaves only), same shape and precision. */
  grad: Tensor | null = null;
  /** The node that produced this tensor, or null for a leaf. */
  readonly gradFn: Node | null;
  /** Which output of `gradFn` this tensor is. */
  readonly outputIndex: number;
  name: string | undefined;

  constructor(data: Data | DeviceArray, shape: readonly number[], options: TensorOptions = {}, gradFn: Node | null = null, outputIndex = 0) {
    checkShape(shape, 'Tensor');
    if (!(data instanceof Float32Array) && !(data instanceof Float64Array) && !(data instanceof DeviceArray)) {
      throw new FAError('E_DTYPE', 'Tensor data must be a Float32Array (or a Float64Array for float64 checks)');
    }
    if (data.length !== sizeOf(shape)) {
      throw new FAError('E_SHAPE', `Tensor: shape ${shapeStr(shape)} needs ${sizeOf(shape)} elements, the data has ${data.length}`);
    }
    this.#host = data instanceof DeviceArray ? null : data;
    this.device = data instanceof DeviceArray ? data : null;
    this.shape = Object.freeze([...shape]);
    this.gradFn = gradFn;
    this.outputIndex = outputIndex;
    this.requiresGrad = gradFn !== null || options.requiresGrad === true;
    this.name = options.name;
  }

  /**
   * Row-major values in host memory. Ops never write into an input's data; `data` of a parameter
   * is updated in place by optimizers. A tensor on a device has none: reading it throws (read it
   * with `await t.toHost()`), so that no op copies to the host behind the caller's back.
   */
  get data(): Data {
    if (this.#host === null) {
      throw new FAError('E_UNSUPPORTED', `this tensor${this.name ? ` (${this.name})` : ''} lives on the ${this.device!.engine.name} engine: an op without a device path read its values; read it with await t.toHost(), or use ops with a device path (README, "Tensors on the GPU")`);
    }
    return this.#host;
  }

  /** The values, wherever they are: the host array or the device array (for ops with both paths). */
  get storage(): Data | DeviceArray {
    return this.#host ?? this.device!;
  }

  get precision(): Precision {
    return this.#host === null ? 'float32' : precisionOf(this.#host);
  }

  /** Number of elements. */
  get size(): number {
    return sizeOf(this.shape);
  }

  /** True when the values are on an engine's device. */
  get onDevice(): boolean {
    return this.device !== null;
  }

  /** A copy on `engine`'s device (a leaf, like clone()); float32. */
  async to(engine: DeviceEngine, options: TensorOptions = {}): Promise<Tensor> {
    if (!isDeviceEngine(engine)) throw new FAError('E_ARG', 'to(engine): the engine has no device model ops (an @fa/webgpu backend has them)');
    const host = this.device ? await this.toHost() : this;
    const d = host.data instanceof Float32Array ? host.data : Float32Array.from(host.data);
    const t = await engine.upload(hostTensor(d, [d.length])); // (upload copies the values)
    return new Tensor(new DeviceArray(engine, t, d.length), this.shape, { requiresGrad: options.requiresGrad, name: options.name ?? this.name });
  }

  /** A host copy (a leaf): reads a device tensor back (waiting for the work that computes it), or clones a host one. */
  async toHost(): Promise<Tensor> {
    if (!this.device) return this.clone();
    settle(this.device.engine);
    const r = await this.device.engine.read(this.device.t);
    settle(this.device.engine);
    return new Tensor(r.data as Float32Array, this.shape, { name: this.name }); // (read gives a fresh array)
  }

  /** The value of a one-element tensor, wherever it is. */
  async value(): Promise<number> {
    if (this.size !== 1) throw new FAError('E_SHAPE', `value() needs a tensor with one element, this one has shape ${shapeStr(this.shape)}`);
    return this.device ? (await this.toHost()).data[0] : this.data[0];
  }

  get ndim(): number {
    return this.shape.length;
  }

  /** True when no op produced this tensor (parameters and inputs). */
  get isLeaf(): boolean {
    return this.gradFn === null;
  }

  /** The value of a one-element tensor. */
  item(): number {
    if (this.device) throw new FAError('E_UNSUPPORTED', 'item() of a tensor on a device would wait for the GPU: use await t.value()');
    if (this.data.length !== 1) throw new FAError('E_SHAPE', `item() needs a tensor with one element, this one has shape ${shapeStr(this.shape)}`);
    return this.data[0];
  }

  /** A plain array copy of the values (row-major). */
  toArray(): number[] {
    return Array.from(this.data);
  }

  /** The same data, cut from the graph: no gradFn, requiresGrad false. */
  detach(): Tensor {
    return new Tensor(this.storage, this.shape);
  }

  /** A copy with its own data (a leaf), optionally in another precision. */
  clone(options: TensorOptions & { precision?: Precision } = {}): Tensor {
    const p = options.precision ?? this.precision;
    const data = p === 'float64' ? Float64Array.from(this.data) : Float32Array.from(this.data);
    return new Tensor(data, this.shape, { requiresGrad: options.requiresGrad, name: options.name ?? this.name });
  }

  /** Sets requiresGrad on a leaf and returns it (PyTorch's `requires_grad_()`). */
  requiresGrad_(on = true): this {
    if (!this.isLeaf) throw new FAError('E_ARG', 'requiresGrad_() applies to leaf tensors; detach() first');
    this.requiresGrad = on;
    return this;
  }

  /** Drops the accumulated gradient. */
  zeroGrad(): void {
    this.grad = null;
  }

  /**
   * Reverse-mode differentiation from this tensor. A scalar needs no `gradient`; otherwise pass
   * the cotangent (same shape). Async because attention backward runs on a backend.
   */
  async backward(gradient?: Tensor | Data, options: { retainGraph?: boolean } = {}): Promise<void> {
    await backward([this], gradient === undefined ? undefined : [gradient], options);
  }

  toString(): string {
    if (this.device) return `Tensor(${shapeStr(this.shape)}, float32 on ${this.device.engine.name}${this.gradFn ? `, gradFn=${this.gradFn.name}` : this.requiresGrad ? ', requiresGrad' : ''})`;
    const head = Array.from(this.data.subarray(0, 6), (x) => x.toPrecision(4)).join(', ');
    return `Tensor(${shapeStr(this.shape)}, ${this.precision}${this.gradFn ? `, gradFn=${this.gradFn.name}` : this.requiresGrad ? ', requiresGrad' : ''}) [${head}${this.data.length > 6 ? ', …' : ''}]`;
  }
}

/** Checks that a value is an autograd Tensor (a clear error for @fa/core HostTensors passed by mistake). */
export function checkTensor(x: unknown, what: string): asserts x is Tensor {
  if (!(x instanceof Tensor)) {
    const hint = typeof x === 'object' && x !== null && (x as { kind?: unknown }).kind === 'host' ? ' (this is an @fa/core HostTensor; wrap its data with fromHost() or new Tensor(data, shape))' : '';
    throw new FAError('E_ARG', `${what} must be an @fa/autograd Tensor${hint}`);
  }
}
