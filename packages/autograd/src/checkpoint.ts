/**
 * checkpoint(fn, ...inputs): activation checkpointing. The forward runs fn with recording off,
 * so nothing inside fn is kept; the tape holds one node that saves only fn's inputs. Backward
 * runs fn again with recording on (from the saved inputs) and backpropagates through that
 * fresh graph, which is freed as soon as it has been used. Parameters fn closes over receive
 * their gradients from the recomputation.
 *
 * fn must compute the same thing when called again (no fresh randomness between the calls).
 * FlashAttention's backward is the same trade at the scale of one op: keep Q, K, V, O and the
 * LSE, recompute the probabilities.
 */
import { FAError } from '@fa/core';
import { deviceZeros } from './device.js';
import { backward } from './backward.js';
import { enableGrad, isGradEnabled, noGrad } from './grad-mode.js';
import { Node, edgeOf, setProbe, type BackwardFn, type GradProbe, type Saved } from './node.js';
import { Tensor, alloc, type Data } from './tensor.js';

type Outputs = Tensor | readonly Tensor[];

interface SavedInput {
  data: Data;
  shape: readonly number[];
}

function asList(r: Outputs, what: string): readonly Tensor[] {
  const list = r instanceof Tensor ? [r] : r;
  if (!Array.isArray(list) || list.length === 0 || !list.every((t) => t instanceof Tensor)) {
    throw new FAError('E_ARG', `checkpoint: ${what} must return a Tensor or a non-empty array of Tensors`);
  }
  return list;
}

function checkpointBackward(fn: (...xs: Tensor[]) => Outputs | Promise<Outputs>, inputs: readonly SavedInput[]): BackwardFn {
  return async (grads, needs) => {
    const xs = inputs.map((s, i) => new Tensor(s.data as Data, s.shape, { requiresGrad: needs[i] }));
    const outs = asList(await enableGrad(() => fn(...xs)), 'the recomputed function');
    if (outs.length !== grads.length) throw new FAError('E_ARG', `checkpoint: the function returned ${outs.length} tensors when recomputed, ${grads.length} the first time`);
    const roots: Tensor[] = [];
    const seeds: Data[] = [];
    outs.forEach((o, i) => {
      if (o.requiresGrad) {
        roots.push(o);
        seeds.push(grads[i]);
      }
    });
    if (roots.length > 0) await backward(roots, seeds);
    // (an input the recomputation gave no gradient gets zeros, on its device when it lives on one)
    return xs.map((x, i) => (needs[i] ? ((x.grad?.storage as Data | undefined) ?? (x.device ? (deviceZeros(x.device.engine, x.size) as unknown as Data) : alloc(x.precision, x.size))) : null));
  };
}

export async function checkpoint<A extends Tensor[], R extends Outputs>(fn: (...inputs: A) => R | Promise<R>, ...inputs: A): Promise<R> {
  if (typeof fn !== 'function') throw new FAError('E_ARG', 'checkpoint(fn, ...inputs): fn must be a function');
  inputs.forEach((t, i) => {
    if (!(t instanceof Tensor)) throw new FAError('E_ARG', `checkpoint: input ${i} must be a Tensor (pass other values through the closure)`);
  });
  if (!isGradEnabled()) return fn(...inputs);

  const probe: GradProbe = { hit: false };
  const prev = setProbe(probe);
  let result: R;
  try {
    result = await noGrad(() => fn(...inputs));
  } finally {
    setProbe(prev);
  }
  const outs = asList(result, 'fn');
  const needsGrad = probe.hit || inputs.some((t) => t.requiresGrad);
  if (!needsGrad) return result;

  const saved: Saved[] = inputs.map((t, i) => ({ what: `input ${i}`, data: t.storage as ArrayBufferView, leaf: t.isLeaf }));
  const node = new Node(
    'checkpoint',
    inputs.map((t) => edgeOf(t)),
    outs.map((o) => [...o.shape]),
    outs[0].precision,
    saved,
    checkpointBackward(fn as unknown as (...xs: Tensor[]) => Outputs | Promise<Outputs>, inputs.map((t) => ({ data: t.storage as Data, shape: t.shape }))),
  );
  if (outs[0].device) node.outputDevice = outs[0].device.engine;
  const wrapped = outs.map((o, i) => new Tensor(o.storage, o.shape, {}, node, i));
  return (result instanceof Tensor ? wrapped[0] : wrapped) as unknown as R;
}
