/**
 * Optimizers (AdamW, SGD) and gradient clipping, updating parameters' data in place. AdamW's
 * float32 update is one fused pass of the model engine (engine.ts) per parameter.
 */
import { FAError } from '@fa/core';
import { modelEngine } from './engine.js';
import { Tensor, alloc, type Data } from './tensor.js';
import { DeviceArray, deviceZeros, runOnDevice } from './device.js';

export abstract class Optimizer {
  readonly params: readonly Tensor[];
  constructor(params: readonly Tensor[]) {
    if (params.length === 0) throw new FAError('E_ARG', 'optimizer: no parameters');
    params.forEach((p, i) => {
      if (!(p instanceof Tensor) || !p.isLeaf || !p.requiresGrad) throw new FAError('E_ARG', `optimizer: parameter ${i} must be a leaf Tensor with requiresGrad`);
    });
    this.params = [...params];
  }
  abstract step(): void;
  zeroGrad(): void {
    for (const p of this.params) p.grad = null;
  }
}

export interface AdamWOptions {
  lr?: number;
  betas?: readonly [number, number];
  eps?: number;
  /** Decoupled weight decay (AdamW); 0 gives Adam. Default 0.01 as torch.optim.AdamW. */
  weightDecay?: number;
}

export class AdamW extends Optimizer {
  lr: number;
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  private t = 0;
  private readonly m: Data[];
  private readonly v: Data[];

  constructor(params: readonly Tensor[], options: AdamWOptions = {}) {
    super(params);
    this.lr = options.lr ?? 1e-3;
    [this.beta1, this.beta2] = options.betas ?? [0.9, 0.999];
    this.eps = options.eps ?? 1e-8;
    this.weightDecay = options.weightDecay ?? 0.01;
    // (a parameter on a device keeps its moments there)
    this.m = this.params.map((p) => (p.device ? (deviceZeros(p.device.engine, p.size) as unknown as Data) : alloc(p.precision, p.size)));
    this.v = this.params.map((p) => (p.device ? (deviceZeros(p.device.engine, p.size) as unknown as Data) : alloc(p.precision, p.size)));
  }

  step(): void {
    this.t++;
    const { beta1: b1, beta2: b2, eps, lr, weightDecay: wd } = this;
    const c1 = 1 - b1 ** this.t;
    const c2 = 1 - b2 ** this.t;
    this.params.forEach((p, i) => {
      if (p.device) {
        // issued on the engine, not awaited (a failure surfaces at the next read)
        const gd = p.grad?.device;
        if (!p.grad) return;
        if (!gd) throw new FAError('E_ARG', `AdamW: parameter ${i} lives on ${p.device.engine.name} but its gradient on the host`);
        const e = p.device.engine;
        const m = this.m[i] as unknown as DeviceArray, v = this.v[i] as unknown as DeviceArray;
        runOnDevice(e, 'adamw', { param: p.device, grad: gd, m, v, lr, beta1: b1, beta2: b2, eps, weightDecay: wd, step: this.t });
        return;
      }
      const g = p.grad?.data;
      if (!g) return;
      const x = p.data;
      const m = this.m[i];
      const v = this.v[i];
      if (x instanceof Float32Array && g instanceof Float32Array && m instanceof Float32Array && v instanceof Float32Array) {
        modelEngine().adamw({ param: x, grad: g, m, v, lr, beta1: b1, beta2: b2, eps, weightDecay: wd, step: this.t });
        return;
      }
      for (let j = 0; j < x.length; j++) {
        if (wd !== 0) x[j] -= lr * wd * x[j];
        m[j] = b1 * m[j] + (1 - b1) * g[j];
        v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
        x[j] -= (lr * (m[j] / c1)) / (Math.sqrt(v[j] / c2) + eps);
      }
    });
  }
}

export class SGD extends Optimizer {
  private readonly buf: (Data | null)[];
  constructor(
    params: readonly Tensor[],
    public lr = 1e-2,
    readonly momentum = 0,
  ) {
    super(params);
    this.buf = this.params.map(() => null);
  }
  step(): void {
    this.params.forEach((p, i) => {
      if (p.device) {
        // on the device: buf = momentum·buf + g; p -= lr·buf (issued, not awaited)
        const gd = p.grad?.device;
        if (!p.grad) return;
        if (!gd) throw new FAError('E_ARG', `SGD: parameter ${i} lives on ${p.device.engine.name} but its gradient on the host`);
        const e = p.device.engine;
        let d: DeviceArray = gd;
        if (this.momentum !== 0) {
          const b = ((this.buf[i] as unknown as DeviceArray | null) ??= deviceZeros(e, p.size));
          this.buf[i] = b as unknown as Data;
          runOnDevice(e, 'axpy', { n: p.size, alpha: 1, x: gd, beta: this.momentum, y: b });
          d = b;
        }
        runOnDevice(e, 'axpy', { n: p.size, alpha: -this.lr, x: d, beta: 1, y: p.device });
        return;
      }
      const g = p.grad?.data;
      if (!g) return;
      let d: Data = g;
      if (this.momentum !== 0) {
        const b = (this.buf[i] ??= alloc(p.precision, p.size));
        for (let j = 0; j < b.length; j++) b[j] = this.momentum * b[j] + g[j];
        d = b;
      }
      for (let j = 0; j < p.data.length; j++) p.data[j] -= this.lr * d[j];
    });
  }
}

/**
 * clipGradNorm for gradients wherever they are: on a device the norm is computed and applied
 * there, issued without awaiting (the step goes on at once); the promise resolves with the norm
 * before clipping when read (awaiting it waits for the GPU). Host gradients: clipGradNorm's result.
 */
export async function clipGradNormAsync(params: readonly Tensor[], maxNorm: number): Promise<number> {
  const dev = params.find((p) => p.grad?.device)?.grad?.device;
  if (!dev) return clipGradNorm(params, maxNorm);
  const e = dev.engine;
  if (!Number.isFinite(maxNorm) || maxNorm < 0) throw new FAError('E_ARG', `clipGradNormAsync: maxNorm must be a finite number >= 0, got ${String(maxNorm)}`);
  const total = deviceZeros(e, 1);
  const grads: DeviceArray[] = [];
  for (const p of params) {
    if (!p.grad) continue;
    const g = p.grad.device;
    if (!g || g.engine !== e) throw new FAError('E_ARG', 'clipGradNormAsync: every gradient must live on one engine');
    grads.push(g);
    const sq = deviceZeros(e, g.length, true), part = deviceZeros(e, 1, true);
    runOnDevice(e, 'mul', { n: g.length, a: g, b: g, m: g.length, y: sq });
    runOnDevice(e, 'sumAll', { n: g.length, x: sq, out: part });
    runOnDevice(e, 'axpy', { n: 1, alpha: 1, x: part, beta: 1, y: total });
  }
  for (const g of grads) runOnDevice(e, 'scaleByNorm', { n: g.length, g, sumSquares: total, maxNorm });
  const t = new Tensor(total, []);
  return Math.sqrt(await t.value());
}

/** Scales all gradients so their global L2 norm is at most maxNorm; returns the norm before clipping (host gradients; clipGradNormAsync for any). */
export function clipGradNorm(params: readonly Tensor[], maxNorm: number): number {
  let sq = 0;
  for (const p of params) if (p.grad) for (const g of p.grad.data) sq += g * g;
  const norm = Math.sqrt(sq);
  if (norm > maxNorm && norm > 0) {
    const s = maxNorm / norm;
    for (const p of params) if (p.grad) for (let j = 0; j < p.grad.data.length; j++) p.grad.data[j] *= s;
  }
  return norm;
}
