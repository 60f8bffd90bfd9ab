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
  describeProblem,
  resolveBackend,
  tensor as hostTensor,
  type AttentionBackend,
  type AttentionOptions,
  type HostTensor,
  type Tensor as CoreTensor,
} from '@fa/core';
import { Tensor, type Data } from '../tensor.js';
import { record1, saveBuffer, type BackwardFn, type Saved } from '../node.js';
import { backward64, describeShapes, forward64 } from './attention-f64.js';
import { checkTensors, dataAs } from './util.js';

export type BackendChoice = AttentionBackend | string | readonly string[];

export interface AttentionCallOptions extends AttentionOptions {
  /**
   * The engine: a backend object, a registered name ('cpu', 'webgpu', 'cuda'), or names in order
   * of preference. Default: setDefaultBackend()'s choice, else the registry's best available.
   */
  backend?: BackendChoice;
}

let defaultBackend: BackendChoice | undefined;

/** Sets the backend attention() uses when a call names none (undefined: the registry's best). */
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

async function toHost(be: AttentionBackend, t: CoreTensor, what: string): Promise<Float32Array> {
  const h: HostTensor = t.kind === 'host' ? t : await be.read(t);
  if (t.kind !== 'host') be.disposeTensor(t);
  if (!(h.data instanceof Float32Array)) throw new FAError('E_DTYPE', `attention: backend ${be.name} returned ${what} as ${h.dtype}; @fa/autograd works in f32`);
  return h.data;
}

function coreOptions(opts: AttentionCallOptions): AttentionOptions {
  const { backend: _ignored, ...rest } = opts;
  void _ignored;
  return rest;
}

function backendBackward(be: AttentionBackend, q: HostTensor, k: HostTensor, v: HostTensor, out: HostTensor, lse: HostTensor, opts: AttentionOptions): BackwardFn {
  return async ([g], needs) => {
    const dOut = hostTensor(g as Float32Array, q.shape, 'f32');
    const r = await be.backward(q, k, v, out, dOut, lse, opts);
    const dq = await toHost(be, r.dq, 'dq');
    const dk = await toHost(be, r.dk, 'dk');
    const dv = await toHost(be, r.dv, 'dv');
    return [needs[0] ? dq : null, needs[1] ? dk : null, needs[2] ? dv : null];
  };
}

function float64Backward(p: ReturnType<typeof describeShapes>, q: Float64Array, k: Float64Array, v: Float64Array, out: Float64Array, lse: Float64Array): BackwardFn {
  return ([g]) => {
    const r = backward64(p, q, k, v, out, g as Float64Array, lse);
    return [r.dq, r.dk, r.dv];
  };
}

function saves(q: Tensor, k: Tensor, v: Tensor, qd: Data, kd: Data, vd: Data, out: Data, lse: Data): Saved[] {
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
 * Unsupported combinations fail with the backend's FAError('E_UNSUPPORTED', reason).
 */
export async function attention(q: Tensor, k: Tensor, v: Tensor, opts: AttentionCallOptions = {}): Promise<Tensor> {
  checkTensors('attention', ['q', q], ['k', k], ['v', v]);
  const o = coreOptions(opts);
  if (q.precision === 'float64' || k.precision === 'float64' || v.precision === 'float64') {
    const p = describeShapes(q.shape, k.shape, v.shape, o);
    const qd = dataAs(q, 'float64') as Float64Array;
    const kd = dataAs(k, 'float64') as Float64Array;
    const vd = dataAs(v, 'float64') as Float64Array;
    const { out, lse } = forward64(p, qd, kd, vd);
    return record1('attention', [q, k, v], out, q.shape, saves(q, k, v, qd, kd, vd, out, lse), float64Backward(p, qd, kd, vd, out, lse));
  }
  const be = await pickBackend(opts.backend ?? defaultBackend);
  const hq = hostTensor(q.data as Float32Array, q.shape, 'f32');
  const hk = hostTensor(k.data as Float32Array, k.shape, 'f32');
  const hv = hostTensor(v.data as Float32Array, v.shape, 'f32');
  const problem = describeProblem(hq, hk, hv, o);
  const support = be.supports(problem);
  if (!support.ok) throw new FAError('E_UNSUPPORTED', `attention on backend ${be.name}: ${support.reason}`);
  const fwd = await be.forward(hq, hk, hv, o);
  const out = await toHost(be, fwd.out, 'out');
  const lse = await toHost(be, fwd.lse, 'lse');
  const hout = hostTensor(out, q.shape, 'f32');
  const hlse = hostTensor(lse, problem.lseShape, 'f32');
  return record1('attention', [q, k, v], out, q.shape, saves(q, k, v, hq.data as Float32Array, hk.data as Float32Array, hv.data as Float32Array, out, lse), backendBackward(be, hq, hk, hv, hout, hlse, o));
}
