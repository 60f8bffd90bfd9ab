/**
 * attention(q, k, v, opts): exact softmax attention on a registered @fa backend, recorded with
 * the FlashAttention trade: the node saves only q, k, v, the output and the per-row logsumexp,
 * and its backward calls the backend's recompute backward. No T×T tensor is ever held.
 *
 * Layout is @fa's [B, T, H, D] (K and V may have fewer heads: GQA/MQA), or packed [totalT, H, D]
 * with cuSeqlensQ/cuSeqlensK for variable length. float64 tensors (gradcheck's twin) run the
 * float64 path of attention-f64.ts instead of a backend.
 */
import {
  FAError,
  decode,
  describeProblem,
  encode,
  resolveBackend,
  tensor as hostTensor,
  type AttentionBackend,
  type AttentionOptions,
  type DType,
  type HostTensor,
  type Tensor as CoreTensor,
} from '@fa/core';
import { Tensor, type Data } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn, type Saved } from '../node.js';
import { backward64, describeShapes, forward64 } from './attention-f64.js';
import { checkTensors, dataAs } from './util.js';
import { DeviceArray, engineOf, onEngine, type DeviceEngine } from '../device.js';

/** Attention on the device: the engine the tensors live on computes it (stream-ordered; f32). */
async function attentionDevice(q: Tensor, k: Tensor, v: Tensor, o: AttentionOptions, opts: AttentionCallOptions, sinks: Tensor | undefined): Promise<Tensor> {
  const e = engineOf('attention', q.storage, k.storage, v.storage)!;
  if ((opts.dtype ?? 'f32') !== 'f32') throw new FAError('E_UNSUPPORTED', `attention on ${e.name} device tensors computes in f32 (dtype ${String(opts.dtype)} has no device path yet)`);
  if (opts.backend !== undefined && (opts.backend as unknown) !== e && opts.backend !== e.name) {
    throw new FAError('E_ARG', `attention: q, k, v live on ${e.name}; backend ${typeof opts.backend === 'string' ? opts.backend : (opts.backend as { name?: string }).name} cannot compute on them (leave backend out, or move the tensors)`);
  }
  const [dq, dk, dv] = [q, k, v].map((t) => t.storage as DeviceArray);
  const view = (a: DeviceArray, shape: readonly number[]) => e.viewTensor(a.t, shape);
  const r = await e.forward(view(dq, q.shape), view(dk, k.shape), view(dv, v.shape), o);
  const os = outShapeOf(q, v);
  const out = new DeviceArray(e, r.out, os.reduce((a, b) => a * b, 1));
  const lse = new DeviceArray(e, r.lse, r.lse.shape.reduce((a, b) => a * b, 1));
  const saved: Saved[] = [dq, dk, dv].map((a, i) => ({ what: 'qkv'[i], data: a as unknown as ArrayBufferView, leaf: [q, k, v][i].isLeaf }));
  saved.push(saveBuffer('out', out as unknown as ArrayBufferView), saveBuffer('lse', lse as unknown as ArrayBufferView));
  return record1('attention', [q, k, v, sinks], out as unknown as Data, os, saved, attentionBackwardDevice(e, dq, dk, dv, out, lse, q.shape, k.shape, v.shape, o, sinks));
}

/** out's shape: q's, with v's head dim (v may have its own). */
function outShapeOf(q: Tensor, v: Tensor): number[] {
  return [...q.shape.slice(0, -1), v.shape[v.shape.length - 1]];
}

function attentionBackwardDevice(e: DeviceEngine, q: DeviceArray, k: DeviceArray, v: DeviceArray, out: DeviceArray, lse: DeviceArray, qs: readonly number[], ks: readonly number[], vs: readonly number[], o: AttentionOptions, sinks: Tensor | undefined): BackwardFn {
  return async ([gh], needs) => {
    const g = onEngine(e, gh);
    const os = [...qs.slice(0, -1), vs[vs.length - 1]];
    const r = await e.backward(e.viewTensor(q.t, qs), e.viewTensor(k.t, ks), e.viewTensor(v.t, vs), e.viewTensor(out.t, os), e.viewTensor(g.t, os), lse.t, o);
    const wrap = (t: CoreTensor, n: number, need: boolean) => {
      if (need) return new DeviceArray(e, t, n) as unknown as Data;
      e.disposeTensor(t);
      return null;
    };
    let ds: Data | null = null;
    if (o.sinks && !r.dsinks) throw new FAError('E_DEVICE', `attention: ${e.name} returned no dsinks for a call with sinks`);
    if (r.dsinks) {
      // the gradient lives where the sinks tensor does: on the engine, or read back for a host one
      if (!needs[3] || !sinks) e.disposeTensor(r.dsinks);
      else if (sinks.onDevice) ds = new DeviceArray(e, r.dsinks, o.sinks!.length) as unknown as Data;
      else {
        ds = Float32Array.from((await e.read(r.dsinks)).data as Float32Array);
        e.disposeTensor(r.dsinks);
      }
    }
    return [wrap(r.dq, q.length, needs[0]), wrap(r.dk, k.length, needs[1]), wrap(r.dv, v.length, needs[2]), ds];
  };
}

export type BackendChoice = AttentionBackend | string | readonly string[];

export interface AttentionCallOptions extends Omit<AttentionOptions, 'sinks'> {
  /**
   * Attention sinks (gpt-oss), one logit per query head, shape [H]: fixed values, or a Tensor,
   * which then gets the gradient dsinks (a learnable parameter). A sinks Tensor on an engine's
   * device is read back once per call (the engines take the logits as call options).
   */
  sinks?: Tensor | Float32Array | readonly number[];
  /**
   * The engine: a backend object, a registered name ('cpu', 'webgpu', 'cuda'), 'auto', or names
   * in order of preference. Default: setDefaultBackend()'s choice, else 'auto'. 'auto' and a list
   * run each call on the first engine whose supports() accepts its problem (core's auto
   * backend), so a model runs on any machine; a single name runs there or fails with its reason.
   */
  backend?: BackendChoice;
  /**
   * The dtype the engine computes in (default 'f32'). With 'f16' or 'bf16', q, k, v are rounded
   * to it on the way in, out and the gradients are widened back to float32 (autocast for
   * attention; engines such as @fa/cuda compute only these). The node then keeps q, k, v and out
   * in 16 bits: half the bytes.
   */
  dtype?: DType;
}

let defaultBackend: BackendChoice | undefined;

/** Sets the backend attention() uses when a call names none (undefined: 'auto', by problem). */
export function setDefaultBackend(b: BackendChoice | undefined): void {
  defaultBackend = b;
}

export function getDefaultBackend(): BackendChoice | undefined {
  return defaultBackend;
}

function isBackend(x: unknown): x is AttentionBackend {
  return typeof x === 'object' && x !== null && typeof (x as AttentionBackend).forward === 'function' && typeof (x as AttentionBackend).backward === 'function';
}

/** The backend a call would use. */
export async function pickBackend(choice: BackendChoice | undefined = defaultBackend): Promise<AttentionBackend> {
  if (isBackend(choice)) return choice;
  return resolveBackend(choice as string | readonly string[] | undefined);
}

/** A backend's result on the host, in its own dtype. */
async function readHost(be: AttentionBackend, t: CoreTensor, what: string, dtype: DType): Promise<HostTensor> {
  const h: HostTensor = t.kind === 'host' ? t : await be.read(t);
  if (t.kind !== 'host') be.disposeTensor(t);
  if (h.dtype !== dtype) throw new FAError('E_DTYPE', `attention: backend ${be.name} returned ${what} as ${h.dtype}, expected ${dtype}`);
  return h;
}

/** A backend's result widened to float32. */
async function toFloat32(be: AttentionBackend, t: CoreTensor, what: string, dtype: DType): Promise<Float32Array> {
  const h = await readHost(be, t, what, dtype);
  return h.data instanceof Float32Array ? h.data : decode(dtype as 'f16' | 'bf16', h.data);
}

function toDtype(d: Float32Array, dtype: DType): Float32Array | Uint16Array {
  return dtype === 'f32' ? d : encode(dtype, d);
}

/** The core options of a call: sinks as values (a Tensor's read, from the device if it lives there). */
async function coreOptions(opts: AttentionCallOptions): Promise<AttentionOptions> {
  const { backend: _b, dtype: _d, sinks, ...rest } = opts;
  void _b;
  void _d;
  if (sinks === undefined) return rest;
  return { ...rest, sinks: sinks instanceof Tensor ? await sinkValues(sinks) : sinks };
}

/** A sinks tensor's values as f32 (read back when it lives on a device). */
export async function sinkValues(sinks: Tensor): Promise<Float32Array> {
  if (sinks.shape.length !== 1) throw new FAError('E_SHAPE', `attention: the sinks tensor must have shape [H], got [${sinks.shape.join(', ')}]`);
  const host = sinks.onDevice ? await sinks.toHost() : sinks;
  return Float32Array.from(host.data as ArrayLike<number>);
}

function backendBackward(be: AttentionBackend, q: HostTensor, k: HostTensor, v: HostTensor, out: HostTensor, lse: HostTensor, opts: AttentionOptions): BackwardFn {
  return async ([g], needs) => {
    const dtype = q.dtype;
    const dOut = hostTensor(toDtype(g as Float32Array, dtype), out.shape, dtype);
    const r = await be.backward(q, k, v, out, dOut, lse, opts);
    const dq = await toFloat32(be, r.dq, 'dq', dtype);
    const dk = await toFloat32(be, r.dk, 'dk', dtype);
    const dv = await toFloat32(be, r.dv, 'dv', dtype);
    if (opts.sinks && !r.dsinks) throw new FAError('E_DEVICE', `attention: backend ${be.name} returned no dsinks for a call with sinks`);
    const ds = r.dsinks ? await toFloat32(be, r.dsinks, 'dsinks', 'f32') : null;
    return [needs[0] ? dq : null, needs[1] ? dk : null, needs[2] ? dv : null, needs[3] ? ds : null];
  };
}

function float64Backward(p: ReturnType<typeof describeShapes>, q: Float64Array, k: Float64Array, v: Float64Array, out: Float64Array, lse: Float64Array, sinks: ArrayLike<number> | undefined): BackwardFn {
  return ([g]) => {
    const r = backward64(p, q, k, v, out, g as Float64Array, lse, sinks);
    return [r.dq, r.dk, r.dv, r.dsinks ?? null];
  };
}

function saves(q: Tensor, k: Tensor, v: Tensor, qd: ArrayBufferView, kd: ArrayBufferView, vd: ArrayBufferView, out: ArrayBufferView, lse: ArrayBufferView): Saved[] {
  return [
    { what: 'q', data: qd, leaf: q.isLeaf && qd === q.data },
    { what: 'k', data: kd, leaf: k.isLeaf && kd === k.data },
    { what: 'v', data: vd, leaf: v.isLeaf && vd === v.data },
    saveBuffer('out', out),
    saveBuffer('lse', lse),
  ];
}

/**
 * Softmax(q·kᵀ·scale [+ softcap, ALiBi, masks]) · v. Returns the output, shaped like q.
 * A problem no chosen engine computes fails with FAError('E_UNSUPPORTED', the reasons).
 */
export async function attention(q: Tensor, k: Tensor, v: Tensor, opts: AttentionCallOptions = {}): Promise<Tensor> {
  checkTensors('attention', ['q', q], ['k', k], ['v', v]);
  const sinkT = opts.sinks instanceof Tensor ? opts.sinks : undefined;
  const o = await coreOptions(opts);
  if (q.onDevice || k.onDevice || v.onDevice) return attentionDevice(q, k, v, o, opts, sinkT);
  if (sinkT?.onDevice) throw new FAError('E_ARG', 'attention: the sinks tensor lives on a device but q, k, v on the host; move them together');
  if (q.precision === 'float64' || k.precision === 'float64' || v.precision === 'float64' || sinkT?.precision === 'float64') {
    const p = describeShapes(q.shape, k.shape, v.shape, o);
    const qd = dataAs(q, 'float64') as Float64Array;
    const kd = dataAs(k, 'float64') as Float64Array;
    const vd = dataAs(v, 'float64') as Float64Array;
    // the sinks' float64 values (p.sinks holds them rounded to f32)
    const sd = sinkT ? (dataAs(sinkT, 'float64') as Float64Array) : p.sinks;
    const { out, lse } = forward64(p, qd, kd, vd, sd);
    return record1('attention', [q, k, v, sinkT], out, outShapeOf(q, v), saves(q, k, v, qd, kd, vd, out, lse), float64Backward(p, qd, kd, vd, out, lse, sd));
  }
  const dtype = opts.dtype ?? 'f32';
  if (dtype !== 'f32' && dtype !== 'f16' && dtype !== 'bf16') throw new FAError('E_DTYPE', `attention: dtype must be f32, f16 or bf16, got ${JSON.stringify(dtype)}`);
  const be = await pickBackend(opts.backend ?? defaultBackend);
  const hq = hostTensor(toDtype(q.data as Float32Array, dtype), q.shape, dtype);
  const hk = hostTensor(toDtype(k.data as Float32Array, dtype), k.shape, dtype);
  const hv = hostTensor(toDtype(v.data as Float32Array, dtype), v.shape, dtype);
  const problem = describeProblem(hq, hk, hv, o);
  const support = be.supports(problem);
  if (!support.ok) {
    const dtypeHint = dtype === 'f32' && be.dtypes.some((d) => d !== 'f32') ? `pass dtype: '${be.dtypes.includes('bf16') ? 'bf16' : be.dtypes[0]}' to compute in 16 bits` : undefined;
    const autoHint = be.name === 'auto' ? undefined : "backend: 'auto' lets another engine compute it";
    const hints = [dtypeHint, autoHint].filter((h) => h !== undefined);
    throw new FAError('E_UNSUPPORTED', `attention on backend ${be.name}: ${support.reason}${hints.length ? ` (${hints.join('; or ')})` : ''}`);
  }
  const fwd = await be.forward(hq, hk, hv, o);
  const hout = await readHost(be, fwd.out, 'out', dtype);
  const hlse = await readHost(be, fwd.lse, 'lse', 'f32');
  const out = hout.data instanceof Float32Array ? hout.data : decode(dtype as 'f16' | 'bf16', hout.data);
  return record1('attention', [q, k, v, sinkT], out, outShapeOf(q, v), saves(q, k, v, hq.data, hk.data, hv.data, hout.data, hlse.data), backendBackward(be, hq, hk, hv, hout, hlse, o));
}
