/**
 * An engine that declines some problems, to test engine choice by problem (resolveBackendFor,
 * the auto backend, a command's --backend auto) on a machine that has no such engine: it
 * declines what `declines(p)` names, refuses those problems in forward and backward with
 * E_UNSUPPORTED as real engines do, and computes the rest with `inner`.
 */
import type { AttentionBackend, Support } from '../backend.js';
import type { DType } from '../dtype.js';
import { FAError } from '../errors.js';
import { describeProblem, type AttentionProblem } from '../problem.js';
import { referenceBackend } from './reference-backend.js';

export interface DecliningBackendOptions {
  /** Default "declining". */
  readonly name?: string;
  /** Default "test engine (declines some problems)". */
  readonly device?: string;
  /** The reason it declines `p`, or undefined when it computes it. */
  readonly declines: (p: AttentionProblem) => string | undefined;
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
  const refuse = (p: AttentionProblem) => {
    const s = supports(p);
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `${name}: ${s.reason}`);
  };
  return {
    name,
    device: o.device ?? 'test engine (declines some problems)',
    dtypes: o.dtypes ?? inner.dtypes,
    supports,
    async forward(q, k, v, opts) {
      refuse(describeProblem(q, k, v, opts));
      return inner.forward(q, k, v, opts);
    },
    async backward(q, k, v, out, dOut, lse, opts) {
      refuse(describeProblem(q, k, v, opts));
      return inner.backward(q, k, v, out, dOut, lse, opts);
    },
    upload: (t) => inner.upload(t),
    read: (t) => inner.read(t),
    disposeTensor: (t) => inner.disposeTensor(t),
    dispose: () => inner.dispose(),
  };
}
