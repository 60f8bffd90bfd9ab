/**
 * The float64 reference wrapped as an AttentionBackend (host tensors only): results are the
 * reference's, rounded once to the dtype. It passes the conformance kit by construction, is
 * the model the kit's own tests perturb, and lets tools run "the exact answer" through the
 * one interface.
 */
import type { AttentionBackend, BackwardResult, ForwardResult, Support } from '../backend.js';
import type { DType } from '../dtype.js';
import { DTYPES } from '../dtype.js';
import { check } from '../errors.js';
import type { AttentionOptions, AttentionProblem } from '../problem.js';
import { describeBackward, describeProblem } from '../problem.js';
import { referenceBackward, referenceForward } from '../reference.js';
import { isHostTensor, type HostTensor, type Tensor } from '../tensor.js';
import { hostTensor } from './random.js';

export interface ReferenceBackendOptions {
  readonly name?: string;
  readonly dtypes?: readonly DType[];
  /** Extra restrictions (to test skipping); default: everything valid is supported. */
  readonly supports?: (p: AttentionProblem) => Support;
  /** Allocation limit passed to the reference. */
  readonly maxBytes?: number;
}

function host(t: Tensor, what: string): HostTensor {
  check(isHostTensor(t), 'E_ARG', `${what}: the reference backend works on host tensors only`);
  return t;
}

/** The exact reference as a backend ("reference", device "float64 reference"). */
export function referenceBackend(o: ReferenceBackendOptions = {}): AttentionBackend {
  const dtypes = o.dtypes ?? DTYPES;
  let disposed = false;
  const alive = () => check(!disposed, 'E_DEVICE', 'the reference backend was disposed');
  return {
    name: o.name ?? 'reference',
    device: 'float64 reference',
    dtypes,
    supports(p: AttentionProblem): Support {
      if (!dtypes.includes(p.dtype)) return { ok: false, reason: `dtype ${p.dtype} is not one of ${dtypes.join(', ')}` };
      return o.supports ? o.supports(p) : { ok: true };
    },
    async forward(q: Tensor, k: Tensor, v: Tensor, opts?: AttentionOptions): Promise<ForwardResult> {
      alive();
      const p = describeProblem(q, k, v, opts);
      const r = referenceForward(host(q, 'q'), host(k, 'k'), host(v, 'v'), opts, { maxBytes: o.maxBytes });
      return { out: hostTensor(r.out, p.qShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
    },
    async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts?: AttentionOptions): Promise<BackwardResult> {
      alive();
      const p = describeBackward(q, k, v, out, dOut, lse, opts);
      const r = referenceBackward(host(q, 'q'), host(k, 'k'), host(v, 'v'), host(dOut, 'dOut'), opts, { maxBytes: o.maxBytes });
      return { dq: hostTensor(r.dq, p.qShape, p.dtype), dk: hostTensor(r.dk, p.kShape, p.dtype), dv: hostTensor(r.dv, p.kShape, p.dtype) };
    },
    async upload(t: HostTensor): Promise<Tensor> {
      alive();
      return t;
    },
    async read(t: Tensor): Promise<HostTensor> {
      return host(t, 'read');
    },
    disposeTensor(): void {},
    async dispose(): Promise<void> {
      disposed = true;
    },
  };
}
