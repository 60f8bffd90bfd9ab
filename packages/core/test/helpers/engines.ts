/**
 * Small host-tensor backends for testing the conformance kit: a builder, and engines with
 * deliberate mistakes that the kit must reject.
 */
import {
  describeBackward, describeProblem, referenceBackward, referenceForward,
  type AttentionBackend, type AttentionOptions, type AttentionProblem, type HostTensor, type Support, type Tensor,
} from '../../dist/index.js';
import { hostTensor, referenceKVCacheMethods, tensorValues } from '../../dist/testing/index.js';
import { designVisible, textbook, type TextbookHooks } from './textbook.js';

type Fwd = (q: HostTensor, k: HostTensor, v: HostTensor, o: AttentionOptions, p: AttentionProblem) => { out: ArrayLike<number>; lse: ArrayLike<number> };
type Bwd = (q: HostTensor, k: HostTensor, v: HostTensor, dO: HostTensor, o: AttentionOptions, p: AttentionProblem) => { dq: ArrayLike<number>; dk: ArrayLike<number>; dv: ArrayLike<number>; dsinks?: ArrayLike<number> };

export interface EngineParts {
  forward?: Fwd;
  backward?: Bwd;
  supports?: (p: AttentionProblem) => Support;
  /** Skip describeProblem validation (an engine that does not validate). */
  noValidation?: boolean;
}

const refFwd: Fwd = (q, k, v, o) => referenceForward(q, k, v, o);
const refBwd: Bwd = (q, k, v, dO, o) => referenceBackward(q, k, v, dO, o);

/** A backend over host tensors from forward/backward functions returning float64 values. */
export function hostBackend(name: string, parts: EngineParts = {}): AttentionBackend {
  const fwd = parts.forward ?? refFwd;
  const bwd = parts.backward ?? refBwd;
  const kv = referenceKVCacheMethods(name);
  return {
    name,
    device: 'test',
    dtypes: ['f32', 'f16', 'bf16'],
    supports: (p) => (parts.supports ? parts.supports(p) : { ok: true }),
    async forward(q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}) {
      const p = parts.noValidation ? (undefined as unknown as AttentionProblem) : describeProblem(q, k, v, opts);
      const r = fwd(q as HostTensor, k as HostTensor, v as HostTensor, opts, p);
      return { out: hostTensor(r.out, p.outShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
    },
    async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}) {
      const p = describeBackward(q, k, v, out, dOut, lse, opts);
      const r = bwd(q as HostTensor, k as HostTensor, v as HostTensor, dOut as HostTensor, opts, p);
      const g = { dq: hostTensor(r.dq, p.qShape, p.dtype), dk: hostTensor(r.dk, p.kShape, p.dtype), dv: hostTensor(r.dv, p.vShape, p.dtype) };
      return r.dsinks ? { ...g, dsinks: hostTensor(r.dsinks, [p.h], 'f32') } : g;
    },
    // KV-cache calls: the reference's (these engines test the dense kit)
    ...kv,
    async upload(t: HostTensor) {
      return t;
    },
    async read(t: Tensor) {
      return t as HostTensor;
    },
    disposeTensor: (t) => kv.disposeIndex(t),
    async dispose() {},
  };
}

function argmaxAbs(a: ArrayLike<number>): number {
  let best = -1;
  let m = -1;
  for (let i = 0; i < a.length; i++) if (Math.abs(a[i]) > m) {
    m = Math.abs(a[i]);
    best = i;
  }
  return best;
}

function perturb(a: Float64Array): Float64Array {
  const i = argmaxAbs(a);
  if (i >= 0) a[i] += 0.2 * Math.abs(a[i]) + 0.05;
  return a;
}

const tb = (hooks: TextbookHooks): Fwd => (q, k, v, o) => textbook(q, k, v, o, undefined, hooks);

/** Engines with one deliberate mistake each, and which cases the mistake must show in. */
export const WRONG_ENGINES: Record<string, EngineParts> = {
  'perturbs one element of out': { forward: (q, k, v, o) => { const r = referenceForward(q, k, v, o); return { out: perturb(r.out), lse: r.lse }; } },
  'perturbs one element of dk': { backward: (q, k, v, dO, o) => { const r = referenceBackward(q, k, v, dO, o); return { dq: r.dq, dk: perturb(r.dk), dv: r.dv, dsinks: r.dsinks }; } },
  'ignores sinks': { forward: tb({ noSinks: true }) },
  'ignores dropout': { forward: tb({ noDropout: true }) },
  'returns dsinks with the wrong sign': { backward: (q, k, v, dO, o) => { const r = referenceBackward(q, k, v, dO, o); return { ...r, dsinks: r.dsinks?.map((x) => -x) }; } },
  'drops the scale': { forward: (q, k, v, o) => referenceForward(q, k, v, { ...o, scale: 1 }) },
  'ignores the window': { forward: (q, k, v, o) => referenceForward(q, k, v, { ...o, window: undefined }) },
  'maps query head h to kv head h % Hkv': { forward: tb({ headMap: (h, _H, Hkv) => h % Hkv }) },
  'aligns causal top-left': { forward: tb({ visible: (i, j, tq, _tk, l, r) => designVisible(i, j, tq, tq, l, r) }) },
  'flips the ALiBi sign': { forward: tb({ alibiSign: -1 }) },
  'ignores softcap': { forward: tb({ noSoftcap: true }) },
  'returns NaN for rows that see no key': { forward: tb({ emptyRow: 'nan' }) },
  'returns LSE in base 2': { forward: (q, k, v, o) => { const r = referenceForward(q, k, v, o); return { out: r.out, lse: r.lse.map((x) => x * Math.LOG2E) }; } },
  'does not sum dK/dV over the query heads of a group': {
    backward: (q, k, v, dO, o, p) => {
      const r = referenceBackward(q, k, v, dO, o);
      // Keep only the first query head of each group: zero dOut elsewhere for dK/dV.
      const grp = p.h / p.hkv;
      const src = Float32Array.from(tensorValues(dO));
      for (let x = 0; x < src.length; x++) if (Math.floor(x / p.d) % p.h % grp !== 0) src[x] = 0;
      const r1 = referenceBackward(q, k, v, hostTensor(src, dO.shape, dO.dtype), o);
      return { dq: r.dq, dk: r1.dk, dv: r1.dv, dsinks: r.dsinks };
    },
  },
  'f32 out off by a relative 1e-4': { forward: (q, k, v, o) => { const r = referenceForward(q, k, v, o); return { out: r.out.map((x) => x * (1 + 1e-4)), lse: r.lse }; } },
};
