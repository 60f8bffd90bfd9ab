/**
 * An engine that declines some problems, to test engine choice by problem (resolveBackendFor,
 * the auto backend, a command's --backend auto) on a machine that has no such engine: it
 * declines what `declines(p)` (and, for KV-cache calls, `declinesKVCache(p)`) names, refuses
 * those problems in forward, backward and forwardWithKVCache with E_UNSUPPORTED as real engines
 * do, and computes the rest with `inner`.
 */
import type { AttentionBackend, Support } from '../backend.js';
import type { DType } from '../dtype.js';
import { FAError } from '../errors.js';
import { describeKVCacheProblem, type KVCacheProblem } from '../kvcache.js';
import { describeProblem, type AttentionProblem } from '../problem.js';
import { referenceBackend } from './reference-backend.js';

export interface DecliningBackendOptions {
  /** Default "declining". */
  readonly name?: string;
  /** Default "test engine (declines some problems)". */
  readonly device?: string;
  /** The reason it declines `p`, or undefined when it computes it. */
  readonly declines: (p: AttentionProblem) => string | undefined;
  /** The reason it declines the KV-cache call `p`, or undefined when `inner` decides (default). */
  readonly declinesKVCache?: (p: KVCacheProblem) => string | undefined;
  /** What computes the accepted problems; default the float64 reference (host tensors only). */
  readonly inner?: AttentionBackend;
  /** Default: the inner engine's. */
  readonly dtypes?: readonly DType[];
}

export function decliningBackend(o: DecliningBackendOptions): AttentionBackend {
  const name = o.name ?? 'declining';
  const inner = o.inner ?? referenceBackend({ name });
  const supports = (p: AttentionProblem): Support => {
    const reason = o.declines(p);
    return reason === undefined ? inner.supports(p) : { ok: false, reason };
  };
  const supportsKVCache = (p: KVCacheProblem): Support => {
    const reason = o.declinesKVCache?.(p);
    return reason === undefined ? inner.supportsKVCache(p) : { ok: false, reason };
  };
  const refuse = (s: Support) => {
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `${name}: ${s.reason}`);
  };
  return {
    name,
    device: o.device ?? 'test engine (declines some problems)',
    dtypes: o.dtypes ?? inner.dtypes,
    supports,
    async forward(q, k, v, opts) {
      refuse(supports(describeProblem(q, k, v, opts)));
      return inner.forward(q, k, v, opts);
    },
    async backward(q, k, v, out, dOut, lse, opts) {
      refuse(supports(describeProblem(q, k, v, opts)));
      return inner.backward(q, k, v, out, dOut, lse, opts);
    },
    supportsKVCache,
    async forwardWithKVCache(q, kCache, vCache, opts) {
      refuse(supportsKVCache(describeKVCacheProblem(q, kCache, vCache, opts, inner.name)));
      return inner.forwardWithKVCache(q, kCache, vCache, opts);
    },
    uploadIndex: (data, shape) => inner.uploadIndex(data, shape),
    writeIndex: (t, data, offset) => inner.writeIndex(t, data, offset),
    upload: (t) => inner.upload(t),
    read: (t) => inner.read(t),
    disposeTensor: (t) => inner.disposeTensor(t),
    dispose: () => inner.dispose(),
  };
}
