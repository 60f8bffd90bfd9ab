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
import { describeKVCacheProblem, hostIndexTensor, isDeviceIndexTensor, writeHostIndex, type DeviceIndexTensor, type HostIndexTensor, type KVCacheOptions, type KVCacheProblem } from '../kvcache.js';
import { appendKVCacheHost, referenceKVCache } from '../kvcache-host.js';
import { hostTensor } from './random.js';

export interface ReferenceBackendOptions {
  readonly name?: string;
  readonly dtypes?: readonly DType[];
  /** Extra restrictions (to test skipping); default: everything valid is supported. */
  readonly supports?: (p: AttentionProblem) => Support;
  /** Allocation limit passed to the reference. */
  readonly maxBytes?: number;
  /** Extra restrictions on KV-cache calls; default: everything valid is supported. */
  readonly supportsKVCache?: (p: KVCacheProblem) => Support;
}

/** The KV-cache part of AttentionBackend over host tensors, computed by the float64 reference. */
export type KVCacheMethods = Pick<AttentionBackend, 'supportsKVCache' | 'forwardWithKVCache' | 'uploadIndex' | 'writeIndex'> & {
  /** Marks an index tensor of this backend disposed (call from disposeTensor). */
  disposeIndex(t: unknown): void;
};

/**
 * supportsKVCache/forwardWithKVCache/uploadIndex/writeIndex for a host-tensor backend named
 * `name`: the append on the host caches, then referenceKVCache rounded once to the dtype. The
 * reference backend uses them, and test engines built on the reference can too.
 */
export function referenceKVCacheMethods(name: string, o: { dtypes?: readonly DType[]; supports?: (p: KVCacheProblem) => Support; maxBytes?: number } = {}): KVCacheMethods {
  const dtypes = o.dtypes ?? DTYPES;
  return {
    supportsKVCache(p: KVCacheProblem): Support {
      if (!dtypes.includes(p.dtype)) return { ok: false, reason: `dtype ${p.dtype} is not one of ${dtypes.join(', ')}` };
      return o.supports ? o.supports(p) : { ok: true };
    },
    async forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
      const p = describeKVCacheProblem(q, kCache, vCache, opts, name);
      const [qh, kc, vc] = [host(q, 'q'), host(kCache, 'kCache'), host(vCache, 'vCache')];
      const kn = opts.kNew === undefined ? undefined : host(opts.kNew, 'kNew');
      const vn = opts.vNew === undefined ? undefined : host(opts.vNew, 'vNew');
      const r = referenceKVCache(qh, kc, vc, opts, { maxBytes: o.maxBytes });
      appendKVCacheHost(p, kc, vc, kn, vn);
      return { out: hostTensor(r.out, p.outShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
    },
    async uploadIndex(data, shape): Promise<DeviceIndexTensor> {
      return hostIndexTensor(name, data, shape);
    },
    async writeIndex(t, data, offset = 0): Promise<void> {
      writeHostIndex(t, data, offset, name);
    },
    disposeIndex(t: unknown): void {
      if (isDeviceIndexTensor(t) && t.backend === name) (t as HostIndexTensor).disposed = true;
    },
  };
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
  const name = o.name ?? 'reference';
  const kv = referenceKVCacheMethods(name, { dtypes, supports: o.supportsKVCache, maxBytes: o.maxBytes });
  return {
    name,
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
      return { out: hostTensor(r.out, p.outShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
    },
    async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts?: AttentionOptions): Promise<BackwardResult> {
      alive();
      const p = describeBackward(q, k, v, out, dOut, lse, opts);
      const r = referenceBackward(host(q, 'q'), host(k, 'k'), host(v, 'v'), host(dOut, 'dOut'), opts, { maxBytes: o.maxBytes });
      const g = { dq: hostTensor(r.dq, p.qShape, p.dtype), dk: hostTensor(r.dk, p.kShape, p.dtype), dv: hostTensor(r.dv, p.vShape, p.dtype) };
      return r.dsinks ? { ...g, dsinks: hostTensor(r.dsinks, [p.h], 'f32') } : g;
    },
    supportsKVCache: kv.supportsKVCache,
    async forwardWithKVCache(q, kCache, vCache, opts) {
      alive();
      return kv.forwardWithKVCache(q, kCache, vCache, opts);
    },
    uploadIndex: kv.uploadIndex,
    writeIndex: kv.writeIndex,
    async upload(t: HostTensor): Promise<Tensor> {
      alive();
      return t;
    },
    async read(t: Tensor): Promise<HostTensor> {
      return host(t, 'read');
    },
    disposeTensor(t): void {
      kv.disposeIndex(t);
    },
    async dispose(): Promise<void> {
      disposed = true;
    },
  };
}
