/// <reference types="@webgpu/types" />
/**
 * The model ops on the WebGPU engine's device tensors (issue 25; DESIGN.md "Model ops"):
 * core's call types with webgpu f32 tensors in place of Float32Arrays (`DeviceCall`), integer
 * targets as index tensors (uploadIndex: their host mirror is checked like a KV cache's lengths),
 * and crossEntropy's summed loss and count written to a device tensor of two values instead of
 * returned. Each call is checked at once (one-line FAErrors, nothing enqueued) and then
 * stream-ordered like the attention calls. The kernels are wgsl/gemm.ts and wgsl/layer-ops.ts.
 */
import {
  type AdamWCall, type CrossEntropyBackwardCall, type CrossEntropyCall, type DeviceIndexTensor, type GeluBackwardCall, type GeluCall, type LayerNormBackwardCall,
  type LayerNormCall, type RmsNormBackwardCall, type RmsNormCall, type RotaryCall, type SiluBackwardCall, type SiluCall, type SumRowsCall, type Tensor, type DropoutCall, FAError, isDeviceIndexTensor, numel, resolveDropout,
} from '@fa/core';
import { BufferUsage } from './gpu.js';
import { grid1d } from './dispatch.js';
import type { Bound } from './external.js';
import type { Scope } from './memory.js';
import { WGIndexTensor, WGTensor } from './tensor.js';
import * as K from './wgsl/layer-ops.js';

/** A call of core's model ops with webgpu tensors for its arrays (index tensors for integer ones). */
export type DeviceCall<C> = {
  [F in keyof C]: C[F] extends Float32Array ? Tensor : C[F] extends Float32Array | null ? Tensor | null : C[F] extends Int32Array ? DeviceIndexTensor : C[F];
};
/** crossEntropy on the device: `loss` [2] receives the counted rows' summed loss and their count. */
export type DeviceCrossEntropyCall = DeviceCall<CrossEntropyCall> & { loss: Tensor };

/** What the ops need of the backend (backend.ts makes it). */
export interface OpsEnv {
  device(): GPUDevice;
  pipeline(key: string, code: () => string): Promise<GPUComputePipeline>;
  bind(pipe: GPUComputePipeline, buffers: (Bound | undefined)[]): GPUBindGroup;
  constant(scope: Scope, data: Uint8Array, usage: number, label: string): GPUBuffer;
  createBuffer(scope: Scope, bytes: number, usage: number, label: string): GPUBuffer;
  input(scope: Scope, t: Tensor, what: string): Bound;
  indexBuffer(t: WGIndexTensor, what: string): GPUBuffer;
  /** Runs `body` as one stream-ordered call: it encodes into `enc`, which the backend submits (or a recording takes). */
  run(what: string, body: (enc: GPUCommandEncoder, scope: Scope) => Promise<void>): Promise<void>;
}

const isDim = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0 && (x as number) < 2 ** 31;
const isNum = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

function obj(who: string, c: unknown): asserts c is Record<string, unknown> {
  if (typeof c !== 'object' || c === null) throw new FAError('E_ARG', `${who}: the call must be an object`);
}
function dims(who: string, c: Record<string, unknown>, ...names: string[]): void {
  for (const k of names) if (!isDim(c[k])) throw new FAError('E_SHAPE', `${who}: ${k} must be an integer from 0 to 2^31 - 1, got ${String(c[k])}`);
}
/** A webgpu f32 tensor of n values (or null when optional). */
function f32(who: string, name: string, t: unknown, n: number, optional = false): WGTensor | null {
  if (optional && t == null) return null;
  if (!(t instanceof WGTensor)) throw new FAError('E_ARG', `${who}: ${name} must be a webgpu device tensor${optional ? ' or null' : ''} (upload it first)`);
  if (t.dtype !== 'f32') throw new FAError('E_DTYPE', `${who}: ${name} must be f32, got ${t.dtype}`);
  if (numel(t.shape) !== n) throw new FAError('E_SHAPE', `${who}: ${name} holds ${numel(t.shape)} values, ${n} expected`);
  return t;
}
/** Written tensors share no buffer with another argument (WebGPU forbids binding a written buffer twice in a dispatch). */
function apart(who: string, outs: [string, WGTensor | null][], ins: [string, WGTensor | null][]): void {
  for (let i = 0; i < outs.length; i++) {
    const [on, o] = outs[i];
    if (!o) continue;
    for (const [n, x] of [...outs.slice(i + 1), ...ins]) {
      if (x && x.handle.buffer === o.handle.buffer) throw new FAError('E_ARG', `${who}: ${on} must not share a buffer with ${n}`);
    }
  }
}
/** Targets: an index tensor of this backend with `rows` entries, each a class or ignoreIndex (checked on its mirror). */
function targets(who: string, t: unknown, rows: number, classes: number, ignore: unknown, name = 'targets'): WGIndexTensor {
  if (!isDeviceIndexTensor(t as DeviceIndexTensor) || !(t instanceof WGIndexTensor)) throw new FAError('E_ARG', `${who}: ${name} must be a webgpu index tensor (backend.uploadIndex)`);
  if (t.mirror.length !== rows) throw new FAError('E_SHAPE', `${who}: ${name} holds ${t.mirror.length} values, ${rows} expected`);
  const hasIgnore = !Number.isNaN(ignore);
  if (hasIgnore && (!Number.isSafeInteger(ignore) || (ignore as number) < -(2 ** 31) || (ignore as number) >= 2 ** 31)) throw new FAError('E_ARG', `${who}: ignoreIndex must be a 32-bit integer`);
  for (let r = 0; r < rows; r++) {
    const v = t.mirror[r];
    if (v !== ignore && (v < 0 || v >= classes)) throw new FAError('E_ARG', `${who}: ${name}[${r}] = ${v} is not ${hasIgnore ? 'a class' : 'an id'} (0 to ${classes - 1})${hasIgnore ? ` nor ignoreIndex ${String(ignore)}` : ''}`);
  }
  return t;
}
/** A webgpu f32 tensor of at least n values (an operand read or written in part). */
function atLeast(who: string, name: string, t: unknown, n: number): WGTensor {
  if (!(t instanceof WGTensor)) throw new FAError('E_ARG', `${who}: ${name} must be a webgpu device tensor (upload it first)`);
  if (t.dtype !== 'f32') throw new FAError('E_DTYPE', `${who}: ${name} must be f32, got ${t.dtype}`);
  if (numel(t.shape) < n) throw new FAError('E_SHAPE', `${who}: ${name} holds ${numel(t.shape)} values, at least ${n} needed`);
  return t;
}

const USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

export class WebGPUDeviceOps {
  readonly engine = 'webgpu';
  readonly kernel = 'WGSL, f32 on the shader cores';
  constructor(private readonly env: OpsEnv) {}

  private params(scope: Scope, u: [number, number, number, number], f: number[] = []): GPUBuffer {
    const b = new ArrayBuffer(K.LAYER_PARAMS_BYTES);
    new Uint32Array(b, 0, 4).set(u.map((x) => x >>> 0));
    new Float32Array(b, 16, 8).set(f);
    return this.env.constant(scope, new Uint8Array(b), BufferUsage.UNIFORM, 'model op params');
  }

  /** One dispatch of `key`'s kernel over `groups` workgroups (a 2-D grid past the per-dimension limit). */
  private async dispatch(enc: GPUCommandEncoder, key: string, code: () => string, buffers: (Bound | undefined)[], groups: number): Promise<void> {
    if (groups === 0) return;
    const pipe = await this.env.pipeline(`op:${key}`, code);
    const pass = enc.beginComputePass();
    pass.setPipeline(pipe);
    pass.setBindGroup(0, this.env.bind(pipe, buffers));
    const [x, y] = grid1d(groups, this.env.device().limits.maxComputeWorkgroupsPerDimension);
    pass.dispatchWorkgroups(x, y);
    pass.end();
  }

  private at(scope: Scope, t: WGTensor | null, fallback: WGTensor): Bound {
    return this.env.input(scope, t ?? fallback, 'model op operand');
  }

  /** A scratch buffer standing in for an output the call does not write (bindings cannot be empty). */
  private spare(scope: Scope): GPUBuffer {
    return this.env.createBuffer(scope, 16, USAGE, 'absent output');
  }

  async gelu(c: DeviceCall<GeluCall>): Promise<void> {
    const who = 'gelu';
    obj(who, c);
    if (c.approximate !== 'none' && c.approximate !== 'tanh') throw new FAError('E_ARG', `${who}: approximate must be 'none' or 'tanh', got ${String(c.approximate)}`);
    const x = f32(who, 'x', c.x, numel((c.x as WGTensor | undefined)?.shape ?? [0]))!;
    const n = numel(x.shape);
    const y = f32(who, 'y', c.y, n)!;
    apart(who, [['y', y]], [['x', x]]);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'gelu', K.geluWGSL, [this.params(s, [n, 0, 0, c.approximate === 'tanh' ? 1 : 0]), this.at(s, x, x), this.at(s, y, y)], Math.ceil(n / 64));
    });
  }

  async geluBackward(c: DeviceCall<GeluBackwardCall>): Promise<void> {
    const who = 'geluBackward';
    obj(who, c);
    if (c.approximate !== 'none' && c.approximate !== 'tanh') throw new FAError('E_ARG', `${who}: approximate must be 'none' or 'tanh', got ${String(c.approximate)}`);
    const x = f32(who, 'x', c.x, numel((c.x as WGTensor | undefined)?.shape ?? [0]))!;
    const n = numel(x.shape);
    const dy = f32(who, 'dy', c.dy, n)!, dx = f32(who, 'dx', c.dx, n)!;
    apart(who, [['dx', dx]], [['x', x], ['dy', dy]]);
    const flags = (c.approximate === 'tanh' ? 1 : 0) | (c.accumulate ? 2 : 0);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'geluBackward', K.geluBackwardWGSL, [this.params(s, [n, 0, 0, flags]), this.at(s, x, x), this.at(s, dy, dy), this.at(s, dx, dx)], Math.ceil(n / 64));
    });
  }

  async silu(c: DeviceCall<SiluCall>): Promise<void> {
    const who = 'silu';
    obj(who, c);
    const x = f32(who, 'x', c.x, numel((c.x as WGTensor | undefined)?.shape ?? [0]))!;
    const n = numel(x.shape);
    const gate = f32(who, 'gate', c.gate, n, true), y = f32(who, 'y', c.y, n)!;
    apart(who, [['y', y]], [['x', x], ['gate', gate]]);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'silu', K.siluWGSL, [this.params(s, [n, 0, 0, gate ? 1 : 0]), this.at(s, x, x), this.at(s, gate, x), this.at(s, y, y)], Math.ceil(n / 64));
    });
  }

  async siluBackward(c: DeviceCall<SiluBackwardCall>): Promise<void> {
    const who = 'siluBackward';
    obj(who, c);
    const x = f32(who, 'x', c.x, numel((c.x as WGTensor | undefined)?.shape ?? [0]))!;
    const n = numel(x.shape);
    const gate = f32(who, 'gate', c.gate, n, true), dy = f32(who, 'dy', c.dy, n)!, dx = f32(who, 'dx', c.dx, n)!, dgate = f32(who, 'dgate', c.dgate, n, true);
    if (dgate && !gate) throw new FAError('E_ARG', `${who}: dgate needs a gate`);
    apart(who, [['dx', dx], ['dgate', dgate]], [['x', x], ['gate', gate], ['dy', dy]]);
    const flags = (gate ? 1 : 0) | (dgate ? 2 : 0) | (c.accumulate ? 4 : 0);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'siluBackward', K.siluBackwardWGSL, [this.params(s, [n, 0, 0, flags]), this.at(s, x, x), this.at(s, gate, x), this.at(s, dy, dy), this.at(s, dx, dx), dgate ? this.at(s, dgate, dgate) : this.spare(s)], Math.ceil(n / 64));
    });
  }

  async adamw(c: DeviceCall<AdamWCall>): Promise<void> {
    const who = 'adamw';
    obj(who, c);
    const x = f32(who, 'param', c.param, numel((c.param as WGTensor | undefined)?.shape ?? [0]))!;
    const n = numel(x.shape);
    const g = f32(who, 'grad', c.grad, n)!, m = f32(who, 'm', c.m, n)!, v = f32(who, 'v', c.v, n)!;
    for (const k of ['lr', 'eps', 'weightDecay'] as const) if (!isNum(c[k]) || c[k] < 0) throw new FAError('E_ARG', `${who}: ${k} must be a finite number >= 0, got ${String(c[k])}`);
    for (const k of ['beta1', 'beta2'] as const) if (!isNum(c[k]) || c[k] < 0 || c[k] >= 1) throw new FAError('E_ARG', `${who}: ${k} must be in [0, 1), got ${String(c[k])}`);
    if (!Number.isSafeInteger(c.step) || c.step < 1) throw new FAError('E_ARG', `${who}: step must be an integer >= 1, got ${String(c.step)}`);
    apart(who, [['param', x], ['m', m], ['v', v]], [['grad', g]]);
    const f = [c.lr, c.beta1, c.beta2, c.eps, 1 - c.lr * c.weightDecay, 1 - c.beta1 ** c.step, 1 - c.beta2 ** c.step];
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'adamw', K.adamwWGSL, [this.params(s, [n, 0, 0, 0], f), this.at(s, x, x), this.at(s, g, g), this.at(s, m, m), this.at(s, v, v)], Math.ceil(n / 64));
    });
  }

  async sumRows(c: DeviceCall<SumRowsCall>): Promise<void> {
    const who = 'sumRows';
    obj(who, c);
    dims(who, c, 'rows', 'cols');
    const x = f32(who, 'x', c.x, c.rows * c.cols)!, out = f32(who, 'out', c.out, c.cols)!;
    apart(who, [['out', out]], [['x', x]]);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'sumRows', K.sumRowsWGSL, [this.params(s, [0, c.rows, c.cols, c.accumulate ? 1 : 0]), this.at(s, x, x), this.at(s, out, out)], Math.ceil(c.cols / 64));
    });
  }

  async layerNorm(c: DeviceCall<LayerNormCall>): Promise<void> {
    const who = 'layerNorm';
    obj(who, c);
    dims(who, c, 'rows', 'cols');
    if (!isNum(c.eps) || c.eps < 0) throw new FAError('E_ARG', `${who}: eps must be a finite number >= 0, got ${String(c.eps)}`);
    const n = c.rows * c.cols;
    const x = f32(who, 'x', c.x, n)!, w = f32(who, 'weight', c.weight, c.cols, true), b = f32(who, 'bias', c.bias, c.cols, true);
    const y = f32(who, 'y', c.y, n)!, mean = f32(who, 'mean', c.mean, c.rows)!, rstd = f32(who, 'rstd', c.rstd, c.rows)!;
    apart(who, [['y', y], ['mean', mean], ['rstd', rstd]], [['x', x], ['weight', w], ['bias', b]]);
    const flags = (w ? 1 : 0) | (b ? 2 : 0);
    await this.env.run(who, async (enc, s) => {
      if (c.cols === 0) return;
      await this.dispatch(enc, 'layerNorm', K.layerNormWGSL, [this.params(s, [0, c.rows, c.cols, flags], [c.eps]), this.at(s, x, x), this.at(s, w, x), this.at(s, b, x), this.at(s, y, y), this.at(s, mean, mean), this.at(s, rstd, rstd)], c.rows);
    });
  }

  async layerNormBackward(c: DeviceCall<LayerNormBackwardCall>): Promise<void> {
    const who = 'layerNormBackward';
    obj(who, c);
    dims(who, c, 'rows', 'cols');
    const n = c.rows * c.cols;
    const x = f32(who, 'x', c.x, n)!, mean = f32(who, 'mean', c.mean, c.rows)!, rstd = f32(who, 'rstd', c.rstd, c.rows)!;
    const w = f32(who, 'weight', c.weight, c.cols, true), dy = f32(who, 'dy', c.dy, n)!;
    const dx = f32(who, 'dx', c.dx, n, true), dw = f32(who, 'dweight', c.dweight, c.cols, true), db = f32(who, 'dbias', c.dbias, c.cols, true);
    apart(who, [['dx', dx], ['dweight', dw], ['dbias', db]], [['x', x], ['mean', mean], ['rstd', rstd], ['weight', w], ['dy', dy]]);
    await this.env.run(who, async (enc, s) => {
      if (dx && c.cols > 0) {
        await this.dispatch(enc, 'layerNormBackwardDx', K.layerNormBackwardDxWGSL, [this.params(s, [0, c.rows, c.cols, w ? 1 : 0]), this.at(s, x, x), this.at(s, mean, mean), this.at(s, rstd, rstd), this.at(s, w, x), this.at(s, dy, dy), this.at(s, dx, dx)], c.rows);
      }
      if (dw || db) {
        const flags = (dw ? 1 : 0) | (db ? 2 : 0);
        await this.dispatch(enc, 'layerNormBackwardWb', K.layerNormBackwardWbWGSL, [this.params(s, [0, c.rows, c.cols, flags]), this.at(s, x, x), this.at(s, mean, mean), this.at(s, rstd, rstd), this.at(s, dy, dy), dw ? this.at(s, dw, dw) : this.spare(s), db ? this.at(s, db, db) : this.spare(s)], Math.ceil(c.cols / 64));
      }
    });
  }

  async rmsNorm(c: DeviceCall<RmsNormCall>): Promise<void> {
    const who = 'rmsNorm';
    obj(who, c);
    dims(who, c, 'rows', 'cols');
    if (!isNum(c.eps) || c.eps < 0) throw new FAError('E_ARG', `${who}: eps must be a finite number >= 0, got ${String(c.eps)}`);
    const n = c.rows * c.cols;
    const x = f32(who, 'x', c.x, n)!, w = f32(who, 'weight', c.weight, c.cols, true), y = f32(who, 'y', c.y, n)!, rstd = f32(who, 'rstd', c.rstd, c.rows)!;
    apart(who, [['y', y], ['rstd', rstd]], [['x', x], ['weight', w]]);
    await this.env.run(who, async (enc, s) => {
      if (c.cols === 0) return;
      await this.dispatch(enc, 'rmsNorm', K.rmsNormWGSL, [this.params(s, [0, c.rows, c.cols, w ? 1 : 0], [c.eps]), this.at(s, x, x), this.at(s, w, x), this.at(s, y, y), this.at(s, rstd, rstd)], c.rows);
    });
  }

  async rmsNormBackward(c: DeviceCall<RmsNormBackwardCall>): Promise<void> {
    const who = 'rmsNormBackward';
    obj(who, c);
    dims(who, c, 'rows', 'cols');
    const n = c.rows * c.cols;
    const x = f32(who, 'x', c.x, n)!, rstd = f32(who, 'rstd', c.rstd, c.rows)!, w = f32(who, 'weight', c.weight, c.cols, true), dy = f32(who, 'dy', c.dy, n)!;
    const dx = f32(who, 'dx', c.dx, n, true), dw = f32(who, 'dweight', c.dweight, c.cols, true);
    apart(who, [['dx', dx], ['dweight', dw]], [['x', x], ['rstd', rstd], ['weight', w], ['dy', dy]]);
    await this.env.run(who, async (enc, s) => {
      if (dx && c.cols > 0) {
        await this.dispatch(enc, 'rmsNormBackwardDx', K.rmsNormBackwardDxWGSL, [this.params(s, [0, c.rows, c.cols, w ? 1 : 0]), this.at(s, x, x), this.at(s, rstd, rstd), this.at(s, w, x), this.at(s, dy, dy), this.at(s, dx, dx)], c.rows);
      }
      if (dw) await this.dispatch(enc, 'rmsNormBackwardW', K.rmsNormBackwardWWGSL, [this.params(s, [0, c.rows, c.cols, 0]), this.at(s, x, x), this.at(s, rstd, rstd), this.at(s, dy, dy), this.at(s, dw, dw)], Math.ceil(c.cols / 64));
    });
  }

  /** In place when y is x (the same tensor). */
  async rotary(c: DeviceCall<RotaryCall>): Promise<void> {
    const who = 'rotary';
    obj(who, c);
    dims(who, c, 'batch', 'seq', 'heads', 'dim', 'rotaryDim', 'positionOffset');
    if (c.rotaryDim % 2 !== 0 || c.rotaryDim > c.dim) throw new FAError('E_SHAPE', `${who}: rotaryDim must be even and at most dim (${c.dim}), got ${c.rotaryDim}`);
    const half = c.rotaryDim / 2;
    const n = c.batch * c.seq * c.heads * c.dim;
    const x = f32(who, 'x', c.x, n)!, y = f32(who, 'y', c.y, n)!;
    const cos = c.cos instanceof WGTensor ? c.cos : null, sin = c.sin instanceof WGTensor ? c.sin : null;
    const tn = cos ? numel(cos.shape) : 0;
    if (!cos || !sin) throw new FAError('E_ARG', `${who}: cos and sin must be webgpu device tensors (upload the tables once)`);
    f32(who, 'cos', cos, tn);
    f32(who, 'sin', sin, tn);
    if (half > 0 && (c.positionOffset + c.seq) * half > tn) throw new FAError('E_SHAPE', `${who}: positions up to ${c.positionOffset + c.seq - 1} need ${(c.positionOffset + c.seq) * half} table values, the tables hold ${tn}`);
    const inPlace = x === y;
    if (!inPlace) apart(who, [['y', y]], [['x', x], ['cos', cos], ['sin', sin]]);
    else apart(who, [['y', y]], [['cos', cos], ['sin', sin]]);
    const rows = c.batch * c.seq * c.heads;
    const total = rows * Math.ceil(c.dim / 2);
    const bits = new Float32Array(new Uint32Array([c.dim, c.rotaryDim, c.positionOffset]).buffer);
    await this.env.run(who, async (enc, s) => {
      const p = this.params(s, [total, c.heads, c.seq, (c.interleaved ? 1 : 0) | (c.inverse ? 2 : 0)], [...bits]);
      const buffers: (Bound | undefined)[] = inPlace ? [p, this.at(s, y, y), this.at(s, cos, cos), this.at(s, sin, sin)] : [p, this.at(s, x, x), this.at(s, cos, cos), this.at(s, sin, sin), this.at(s, y, y)];
      await this.dispatch(enc, inPlace ? 'rotaryInPlace' : 'rotary', () => K.rotaryWGSL(inPlace), buffers, Math.ceil(total / 64));
    });
  }

  /** y (+)= x·mask/(1 − p) (core's layer-ops.ts dropout; the backward is the same call on dy). */
  async dropout(c: DeviceCall<DropoutCall>): Promise<void> {
    const who = 'dropout';
    obj(who, c);
    const x = f32(who, 'x', c.x, numel((c.x as WGTensor | undefined)?.shape ?? [0]))!;
    const n = numel(x.shape);
    const y = f32(who, 'y', c.y, n)!;
    let d;
    try {
      d = resolveDropout({ p: c.p, seed: c.seed, offset: c.offset ?? 0 });
    } catch (e) {
      throw new FAError('E_ARG', `${who}: ${(e as Error).message}`);
    }
    const inPlace = x === y;
    if (inPlace && c.accumulate) throw new FAError('E_ARG', `${who}: accumulate into x itself would add x twice; give y a buffer of its own`);
    if (!inPlace) apart(who, [['y', y]], [['x', x]]);
    // (p below 2^-32 resolves to none: threshold 0 keeps every element, scale 1)
    const u = new Uint32Array(K.LAYER_PARAMS_BYTES / 4);
    u.set([n, d?.threshold ?? 0, d?.k0 ?? 0, c.accumulate ? 1 : 0, d?.k1 ?? 0, d?.offset ?? 0]);
    new Float32Array(u.buffer, 24, 1)[0] = d ? d.keepScale : 1;
    await this.env.run(who, async (enc, s) => {
      const p = this.env.constant(s, new Uint8Array(u.buffer), BufferUsage.UNIFORM, 'dropout params');
      const buffers: (Bound | undefined)[] = inPlace ? [p, this.at(s, y, y)] : [p, this.at(s, x, x), this.at(s, y, y)];
      await this.dispatch(enc, inPlace ? 'dropoutInPlace' : 'dropout', () => K.dropoutWGSL(inPlace), buffers, Math.ceil(n / 64));
    });
  }

  /** y = alpha·x + beta·y on the first n values (beta 0: y = alpha·x): scaling, adding gradients. */
  async axpy(c: { n: number; alpha: number; x: Tensor; beta: number; y: Tensor }): Promise<void> {
    const who = 'axpy';
    obj(who, c);
    dims(who, c, 'n');
    if (!isNum(c.alpha) || !isNum(c.beta)) throw new FAError('E_ARG', `${who}: alpha and beta must be finite numbers`);
    const x = atLeast(who, 'x', c.x, c.n), y = atLeast(who, 'y', c.y, c.n);
    apart(who, [['y', y]], [['x', x]]);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'axpy', K.axpyWGSL, [this.params(s, [c.n, 0, 0, 0], [c.alpha, c.beta]), this.at(s, x, x), this.at(s, y, y)], Math.ceil(c.n / 64));
    });
  }

  /** out[r] = table[ids[r]] (rows of dim values; + out with accumulate); ids an index tensor, checked on its mirror. */
  async embedding(c: { rows: number; dim: number; vocab: number; table: Tensor; ids: DeviceIndexTensor; out: Tensor; accumulate?: boolean }): Promise<void> {
    const who = 'embedding';
    obj(who, c);
    dims(who, c, 'rows', 'dim', 'vocab');
    const table = f32(who, 'table', c.table, c.vocab * c.dim)!, out = f32(who, 'out', c.out, c.rows * c.dim)!;
    const ids = targets(who, c.ids, c.rows, c.vocab, Number.NaN, 'ids');
    apart(who, [['out', out]], [['table', table]]);
    const n = c.rows * c.dim;
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'embedding', K.embeddingWGSL, [this.params(s, [n, c.rows, c.dim, c.accumulate ? 1 : 0]), this.at(s, table, table), this.env.indexBuffer(ids, 'ids'), this.at(s, out, out)], Math.ceil(n / 64));
    });
  }

  /** dtable[v] = Σ grad[r] over the rows whose id is v (+ dtable with accumulate), in a fixed order. */
  async embeddingBackward(c: { rows: number; dim: number; vocab: number; grad: Tensor; ids: DeviceIndexTensor; dtable: Tensor; accumulate?: boolean }): Promise<void> {
    const who = 'embeddingBackward';
    obj(who, c);
    dims(who, c, 'rows', 'dim', 'vocab');
    const grad = f32(who, 'grad', c.grad, c.rows * c.dim)!, dtable = f32(who, 'dtable', c.dtable, c.vocab * c.dim)!;
    const ids = targets(who, c.ids, c.rows, c.vocab, Number.NaN, 'ids');
    apart(who, [['dtable', dtable]], [['grad', grad]]);
    // the rows of each id, from the mirror: [offsets V + 1 | rows]
    const csr = new Uint32Array(c.vocab + 1 + c.rows);
    for (let r = 0; r < c.rows; r++) csr[ids.mirror[r] + 1]++;
    for (let v = 0; v < c.vocab; v++) csr[v + 1] += csr[v];
    const fill = csr.slice(0, c.vocab);
    for (let r = 0; r < c.rows; r++) csr[c.vocab + 1 + fill[ids.mirror[r]]++] = r;
    const n = c.vocab * c.dim;
    await this.env.run(who, async (enc, s) => {
      const list = this.env.constant(s, new Uint8Array(csr.buffer), BufferUsage.STORAGE, 'embedding rows by id');
      await this.dispatch(enc, 'embeddingBackward', K.embeddingBackwardWGSL, [this.params(s, [n, c.vocab, c.dim, c.accumulate ? 1 : 0]), this.at(s, grad, grad), list, this.at(s, dtable, dtable)], Math.ceil(n / 64));
    });
  }

  /** dst[dstOffset + r·dstStride + c] (+)= src[srcOffset + r·srcStride + c], r < rows, c < cols. */
  async copy2d(c: { rows: number; cols: number; src: Tensor; srcOffset: number; srcStride: number; dst: Tensor; dstOffset: number; dstStride: number; accumulate?: boolean }): Promise<void> {
    const who = 'copy2d';
    obj(who, c);
    dims(who, c, 'rows', 'cols', 'srcOffset', 'srcStride', 'dstOffset', 'dstStride');
    const last = (off: number, stride: number) => (c.rows === 0 || c.cols === 0 ? 0 : off + (c.rows - 1) * stride + c.cols);
    const src = atLeast(who, 'src', c.src, last(c.srcOffset, c.srcStride)), dst = atLeast(who, 'dst', c.dst, last(c.dstOffset, c.dstStride));
    if (c.rows > 1 && c.dstStride < c.cols) throw new FAError('E_ARG', `${who}: dstStride ${c.dstStride} < cols ${c.cols}: rows would overlap`);
    apart(who, [['dst', dst]], [['src', src]]);
    const n = c.rows * c.cols;
    const bits = new Float32Array(new Uint32Array([c.srcOffset, c.srcStride, c.dstOffset, c.dstStride]).buffer);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'copy2d', K.copy2dWGSL, [this.params(s, [n, c.rows, c.cols, c.accumulate ? 1 : 0], [...bits]), this.at(s, src, src), this.at(s, dst, dst)], Math.ceil(n / 64));
    });
  }

  /** out[0] = Σ x[i] for i < n (two passes of per-workgroup tree sums: a fixed order). */
  async sumAll(c: { n: number; x: Tensor; out: Tensor }): Promise<void> {
    const who = 'sumAll';
    obj(who, c);
    dims(who, c, 'n');
    const x = atLeast(who, 'x', c.x, c.n), out = atLeast(who, 'out', c.out, 1);
    apart(who, [['out', out]], [['x', x]]);
    const chunk = Math.max(256, Math.ceil(c.n / 1024 / 256) * 256); // at most ~1024 partials
    const groups = Math.max(1, Math.ceil(c.n / chunk));
    await this.env.run(who, async (enc, s) => {
      const parts = this.env.createBuffer(s, 4 * groups, BufferUsage.STORAGE, 'partial sums');
      await this.dispatch(enc, 'sumChunks', K.sumChunksWGSL, [this.params(s, [c.n, 0, chunk, 0]), this.at(s, x, x), parts], groups);
      await this.dispatch(enc, 'sumChunks', K.sumChunksWGSL, [this.params(s, [groups, 0, Math.max(groups, 1), 0]), parts, this.at(s, out, out)], 1);
    });
  }

  /** g *= min(1, maxNorm / (√sumSquares[0] + 1e-6)) in place, the squared norm read on the device (no host round trip). */
  async scaleByNorm(c: { n: number; g: Tensor; sumSquares: Tensor; maxNorm: number }): Promise<void> {
    const who = 'scaleByNorm';
    obj(who, c);
    dims(who, c, 'n');
    if (!isNum(c.maxNorm) || c.maxNorm < 0) throw new FAError('E_ARG', `${who}: maxNorm must be a finite number >= 0, got ${String(c.maxNorm)}`);
    const g = atLeast(who, 'g', c.g, c.n), ss = atLeast(who, 'sumSquares', c.sumSquares, 1);
    apart(who, [['g', g]], [['sumSquares', ss]]);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'scaleByNorm', K.scaleByNormWGSL, [this.params(s, [c.n, 0, 0, 0], [c.maxNorm]), this.at(s, g, g), this.at(s, ss, ss)], Math.ceil(c.n / 64));
    });
  }

  /**
   * y = a ⊕ b (add, sub, mul) with NumPy broadcasting, rank at most 8: shapes given padded to the
   * output's rank (1 on broadcast axes).
   */
  async broadcast(c: { op: 'add' | 'sub' | 'mul'; shape: readonly number[]; aShape: readonly number[]; bShape: readonly number[]; a: Tensor; b: Tensor; y: Tensor }): Promise<void> {
    const who = 'broadcast';
    obj(who, c);
    const rank = c.shape.length;
    if (rank > 8 || c.aShape.length !== rank || c.bShape.length !== rank) throw new FAError('E_SHAPE', `${who}: shapes of one rank (at most 8) expected`);
    for (let d = 0; d < rank; d++) {
      for (const [n, s] of [['a', c.aShape], ['b', c.bShape]] as const) {
        if (s[d] !== c.shape[d] && s[d] !== 1) throw new FAError('E_SHAPE', `${who}: ${n}'s axis ${d} (${s[d]}) does not broadcast to ${c.shape[d]}`);
      }
    }
    const size = (s: readonly number[]) => s.reduce((x, y) => x * y, 1);
    const n = size(c.shape);
    const a = f32(who, 'a', c.a, size(c.aShape))!, b = f32(who, 'b', c.b, size(c.bShape))!, y = f32(who, 'y', c.y, n)!;
    apart(who, [['y', y]], [['a', a], ['b', b]]);
    const strides = (s: readonly number[]) => {
      const st = new Array<number>(rank);
      let m = 1;
      for (let d = rank - 1; d >= 0; d--) {
        st[d] = s[d] === 1 ? 0 : m;
        m *= s[d];
      }
      return st;
    };
    const meta = new Uint32Array(25);
    meta[0] = rank;
    const sa = strides(c.aShape), sb = strides(c.bShape);
    for (let d = 0; d < rank; d++) {
      meta[1 + d] = c.shape[d];
      meta[9 + d] = sa[d];
      meta[17 + d] = sb[d];
    }
    await this.env.run(who, async (enc, s) => {
      const mb = this.env.constant(s, new Uint8Array(meta.buffer), BufferUsage.STORAGE, 'broadcast shapes');
      await this.dispatch(enc, 'broadcast', K.broadcastWGSL, [this.params(s, [n, 0, 0, c.op === 'add' ? 0 : c.op === 'sub' ? 1 : 2]), this.at(s, a, a), this.at(s, b, b), mb, this.at(s, y, y)], Math.ceil(n / 64));
    });
  }

  /** out = alpha · g summed over the axes a broadcast operand of shape `to` (padded, 1 on broadcast axes) was repeated along. */
  async reduceTo(c: { shape: readonly number[]; to: readonly number[]; g: Tensor; out: Tensor; alpha?: number }): Promise<void> {
    const who = 'reduceTo';
    obj(who, c);
    const rank = c.shape.length;
    if (rank > 8 || c.to.length !== rank) throw new FAError('E_SHAPE', `${who}: shapes of one rank (at most 8) expected`);
    for (let d = 0; d < rank; d++) if (c.to[d] !== c.shape[d] && c.to[d] !== 1) throw new FAError('E_SHAPE', `${who}: axis ${d} (${c.to[d]}) is not ${c.shape[d]} or 1`);
    const size = (s: readonly number[]) => s.reduce((x, y) => x * y, 1);
    const g = f32(who, 'g', c.g, size(c.shape))!, out = f32(who, 'out', c.out, size(c.to))!;
    apart(who, [['out', out]], [['g', g]]);
    const meta = new Uint32Array(25);
    meta[0] = rank;
    let m = 1;
    for (let d = rank - 1; d >= 0; d--) {
      meta[1 + d] = c.shape[d];
      meta[9 + d] = m;
      meta[17 + d] = c.to[d];
      m *= c.shape[d];
    }
    const n = size(c.to);
    await this.env.run(who, async (enc, s) => {
      const mb = this.env.constant(s, new Uint8Array(meta.buffer), BufferUsage.STORAGE, 'reduce shapes');
      await this.dispatch(enc, 'reduceTo', K.reduceToWGSL, [this.params(s, [n, 0, 0, 0], [c.alpha ?? 1]), this.at(s, g, g), mb, this.at(s, out, out)], Math.ceil(n / 64));
    });
  }

  /** y = a·b element-wise, b the same size or repeated over a's leading rows (its size divides a's). */
  async mul(c: { n: number; a: Tensor; b: Tensor; m: number; y: Tensor }): Promise<void> {
    const who = 'mul';
    obj(who, c);
    dims(who, c, 'n', 'm');
    if (c.n > 0 && (c.m === 0 || c.n % c.m !== 0)) throw new FAError('E_SHAPE', `${who}: b's ${c.m} values do not divide a's ${c.n}`);
    const a = f32(who, 'a', c.a, c.n)!, b = f32(who, 'b', c.b, c.m)!, y = f32(who, 'y', c.y, c.n)!;
    apart(who, [['y', y]], [['a', a], ['b', b]]);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'mul', K.mulWGSL, [this.params(s, [c.n, 0, Math.max(c.m, 1), 0]), this.at(s, a, a), this.at(s, b, b), this.at(s, y, y)], Math.ceil(c.n / 64));
    });
  }

  /** Softmax along the middle axis of an [outer, n, inner] layout. */
  async softmax(c: { outer: number; n: number; inner: number; x: Tensor; y: Tensor }): Promise<void> {
    const who = 'softmax';
    obj(who, c);
    dims(who, c, 'outer', 'n', 'inner');
    const total = c.outer * c.n * c.inner;
    const x = f32(who, 'x', c.x, total)!, y = f32(who, 'y', c.y, total)!;
    apart(who, [['y', y]], [['x', x]]);
    const lines = c.outer * c.inner;
    await this.env.run(who, async (enc, s) => {
      if (c.n === 0) return;
      await this.dispatch(enc, 'softmax', K.softmaxWGSL, [this.params(s, [lines, c.n, c.inner, 0]), this.at(s, x, x), this.at(s, y, y)], Math.ceil(lines / 64));
    });
  }

  /** dx = y·(dy − Σ dy·y) along the middle axis of an [outer, n, inner] layout. */
  async softmaxBackward(c: { outer: number; n: number; inner: number; y: Tensor; dy: Tensor; dx: Tensor }): Promise<void> {
    const who = 'softmaxBackward';
    obj(who, c);
    dims(who, c, 'outer', 'n', 'inner');
    const total = c.outer * c.n * c.inner;
    const y = f32(who, 'y', c.y, total)!, dy = f32(who, 'dy', c.dy, total)!, dx = f32(who, 'dx', c.dx, total)!;
    apart(who, [['dx', dx]], [['y', y], ['dy', dy]]);
    const lines = c.outer * c.inner;
    await this.env.run(who, async (enc, s) => {
      if (c.n === 0) return;
      await this.dispatch(enc, 'softmaxBackward', K.softmaxBackwardWGSL, [this.params(s, [lines, c.n, c.inner, 0]), this.at(s, y, y), this.at(s, dy, dy), this.at(s, dx, dx)], Math.ceil(lines / 64));
    });
  }

  /** y = x with axes permuted (rank at most 8): y's axis k is x's axis dims[k]. */
  async permute(c: { shape: readonly number[]; dims: readonly number[]; x: Tensor; y: Tensor }): Promise<void> {
    const who = 'permute';
    obj(who, c);
    const rank = Array.isArray(c.shape) ? c.shape.length : -1;
    if (rank < 0 || rank > 8 || !c.shape.every(isDim)) throw new FAError('E_SHAPE', `${who}: shape must be at most 8 non-negative integers`);
    if (!Array.isArray(c.dims) || c.dims.length !== rank || new Set(c.dims).size !== rank || !c.dims.every((d) => Number.isInteger(d) && d >= 0 && d < rank)) {
      throw new FAError('E_ARG', `${who}: dims ${JSON.stringify(c.dims)} must be a permutation of 0..${rank - 1}`);
    }
    const n = c.shape.reduce((a, b) => a * b, 1);
    const x = f32(who, 'x', c.x, n)!, y = f32(who, 'y', c.y, n)!;
    apart(who, [['y', y]], [['x', x]]);
    const inStrides = new Array<number>(rank);
    let st = 1;
    for (let d = rank - 1; d >= 0; d--) {
      inStrides[d] = st;
      st *= c.shape[d];
    }
    const meta = new Uint32Array(17);
    meta[0] = rank;
    c.dims.forEach((d, k) => {
      meta[1 + k] = c.shape[d];
      meta[9 + k] = inStrides[d];
    });
    await this.env.run(who, async (enc, s) => {
      const mb = this.env.constant(s, new Uint8Array(meta.buffer), BufferUsage.STORAGE, 'permute shape');
      await this.dispatch(enc, 'permute', K.permuteWGSL, [this.params(s, [n, 0, 0, 0]), this.at(s, x, x), mb, this.at(s, y, y)], Math.ceil(n / 64));
    });
  }

  async crossEntropy(c: DeviceCrossEntropyCall): Promise<void> {
    const who = 'crossEntropy';
    obj(who, c);
    dims(who, c, 'rows', 'classes');
    if (c.classes === 0 && c.rows > 0) throw new FAError('E_SHAPE', `${who}: classes must be at least 1`);
    const logits = f32(who, 'logits', c.logits, c.rows * c.classes)!, lse = f32(who, 'lse', c.lse, c.rows)!, loss = f32(who, 'loss', c.loss, 2)!;
    const t = targets(who, c.targets, c.rows, c.classes, c.ignoreIndex);
    apart(who, [['lse', lse], ['loss', loss]], [['logits', logits]]);
    await this.env.run(who, async (enc, s) => {
      const rl = this.env.createBuffer(s, Math.max(16, 8 * c.rows), BufferUsage.STORAGE, 'per-row losses');
      const p = this.params(s, [0, c.rows, c.classes, c.ignoreIndex], []);
      await this.dispatch(enc, 'crossEntropyRows', K.crossEntropyRowsWGSL, [p, this.at(s, logits, logits), this.env.indexBuffer(t, 'targets'), this.at(s, lse, lse), rl], c.rows);
      await this.dispatch(enc, 'crossEntropySum', K.crossEntropySumWGSL, [p, rl, this.at(s, loss, loss)], 1);
    });
  }

  async crossEntropyBackward(c: DeviceCall<CrossEntropyBackwardCall>): Promise<void> {
    const who = 'crossEntropyBackward';
    obj(who, c);
    dims(who, c, 'rows', 'classes');
    if (!isNum(c.scale)) throw new FAError('E_ARG', `${who}: scale must be a finite number, got ${String(c.scale)}`);
    const n = c.rows * c.classes;
    const logits = f32(who, 'logits', c.logits, n)!, lse = f32(who, 'lse', c.lse, c.rows)!, dl = f32(who, 'dlogits', c.dlogits, n)!;
    const t = targets(who, c.targets, c.rows, c.classes, c.ignoreIndex);
    apart(who, [['dlogits', dl]], [['logits', logits], ['lse', lse]]);
    await this.env.run(who, async (enc, s) => {
      await this.dispatch(enc, 'crossEntropyBackward', K.crossEntropyBackwardWGSL, [this.params(s, [n, c.rows, c.classes, c.ignoreIndex], [c.scale]), this.at(s, logits, logits), this.at(s, lse, lse), this.env.indexBuffer(t, 'targets'), this.at(s, dl, dl)], Math.ceil(n / 64));
    });
  }
}
