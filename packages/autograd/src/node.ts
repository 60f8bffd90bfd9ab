/**
 * A recorded op: what backward needs to turn output gradients into input gradients. A node
 * holds its saved buffers explicitly (`saved`), never the input tensors themselves, so that what
 * the graph keeps alive is exactly what memory accounting reports.
 */
import { FAError } from '@fa/core';
import { isGradEnabled } from './grad-mode.js';
import { Tensor, type Data } from './tensor.js';
import { DeviceArray, type DeviceEngine } from './device.js';

/** Where an input's gradient goes: another node's output, or a leaf's `.grad`. */
export type Edge = { readonly node: Node; readonly index: number } | { readonly leaf: Tensor };

/** One buffer a node keeps for backward. */
export interface Saved {
  /** What it is, for reports: "x", "weight", "lse", … */
  readonly what: string;
  readonly data: ArrayBufferView;
  /** True when the buffer belongs to a leaf (a parameter or an input the caller holds anyway). */
  readonly leaf: boolean;
}

/**
 * Computes input gradients from output gradients. `grads[i]` is the gradient of output i (zeros
 * when that output got none). Returns one entry per input; `needs[i]` says whether input i wants
 * one (return null where it does not).
 */
export type BackwardFn = (grads: Data[], needs: readonly boolean[]) => (Data | null)[] | Promise<(Data | null)[]>;

let nextId = 0;

export class Node {
  readonly id = nextId++;
  /** One per input; null where the input needs no gradient. */
  readonly next: readonly (Edge | null)[];
  saved: Saved[];
  fn: BackwardFn | null;
  /** Set once backward ran without retainGraph: the saved buffers are gone. */
  released = false;

  /** The engine whose device holds the outputs (their gradients live there too), or null. */
  outputDevice: DeviceEngine | null = null;

  constructor(
    readonly name: string,
    next: readonly (Edge | null)[],
    readonly outputShapes: readonly (readonly number[])[],
    readonly outputPrecision: 'float32' | 'float64',
    saved: Saved[],
    fn: BackwardFn,
  ) {
    this.next = next;
    this.saved = saved;
    this.fn = fn;
  }

  get needs(): boolean[] {
    return this.next.map((e) => e !== null);
  }

  /** Drops the saved buffers and the closure that captured them. */
  release(): void {
    this.saved = [];
    this.fn = null;
    this.released = true;
  }
}

export function edgeOf(t: Tensor): Edge | null {
  if (!t.requiresGrad) return null;
  return t.gradFn ? { node: t.gradFn, index: t.outputIndex } : { leaf: t };
}

/**
 * checkpoint() runs its function with recording off but needs to know whether any op inside
 * touched a tensor that requires grad (a parameter, say): it sets a probe that shouldRecord marks.
 */
export interface GradProbe {
  hit: boolean;
}
let probe: GradProbe | null = null;

export function setProbe(p: GradProbe | null): GradProbe | null {
  const prev = probe;
  probe = p;
  return prev;
}

/** Whether an op on these inputs records a node. */
export function shouldRecord(inputs: readonly (Tensor | null | undefined)[]): boolean {
  const any = inputs.some((t) => t != null && t.requiresGrad);
  if (!isGradEnabled()) {
    if (any && probe) probe.hit = true;
    return false;
  }
  return any;
}

/** A saved-buffer entry for a tensor (marked leaf when no op produced it). */
export function saveTensor(what: string, t: Tensor): Saved {
  return { what, data: t.storage as ArrayBufferView, leaf: t.isLeaf };
}

/** A saved-buffer entry for a buffer the op made (statistics, lse) or was given (token ids). */
export function saveBuffer(what: string, data: ArrayBufferView): Saved {
  return { what, data, leaf: false };
}

/**
 * Wraps an op's results into output tensors, recording a node when grad mode is on and an
 * input requires grad. `saved` lists every buffer `fn` keeps alive. To keep that list honest,
 * ops build `fn` in a separate top-level factory function that receives exactly the saved
 * buffers: a closure defined inside the op would share the op's scope and could pin its inputs.
 */
export function record(
  name: string,
  inputs: readonly (Tensor | null | undefined)[],
  outputs: readonly (readonly [Data, readonly number[]])[],
  saved: Saved[],
  fn: BackwardFn,
): Tensor[] {
  if (!shouldRecord(inputs)) return outputs.map(([d, s]) => new Tensor(d, s));
  const precision = outputs[0][0] instanceof Float64Array ? 'float64' : 'float32';
  const node = new Node(
    name,
    inputs.map((t) => (t == null ? null : edgeOf(t))),
    outputs.map(([, s]) => [...s]),
    precision,
    saved,
    fn,
  );
  const d0 = outputs[0][0] as unknown;
  if (d0 instanceof DeviceArray) node.outputDevice = d0.engine;
  return outputs.map(([d, s], i) => new Tensor(d, s, {}, node, i));
}

/** Like record() for an op with one output. */
export function record1(
  name: string,
  inputs: readonly (Tensor | null | undefined)[],
  out: Data,
  shape: readonly number[],
  saved: Saved[],
  fn: BackwardFn,
): Tensor {
  return record(name, inputs, [[out, shape]], saved, fn)[0];
}

export function releasedError(name: string): FAError {
  return new FAError(
    'E_ARG',
    `backward through ${name} a second time: its saved buffers were freed after the first backward; pass { retainGraph: true } to the first backward() to keep them`,
  );
}
