/**
 * The reverse sweep: from one or more roots, visit every recorded node after all of its
 * consumers (Kahn's order over the reachable graph), call its backward, route input gradients
 * to the producing nodes or into leaves' `.grad`, and free each node's saved buffers as soon as
 * it ran (unless `retainGraph`).
 */
import { FAError } from '@fa/core';
import { Node, releasedError } from './node.js';
import { Tensor, alloc, castData, shapeStr, type Data } from './tensor.js';
import { DeviceArray, deviceZeros, runOnDevice, settle, type DeviceEngine } from './device.js';

export interface BackwardOptions {
  /** Keep saved buffers so backward can run through the graph again. */
  retainGraph?: boolean;
}

interface Pending {
  data: Data;
  owned: boolean;
}

/** A device gradient's copy (a gradient may reach two inputs: each gets its own). */
function deviceCopy(g: DeviceArray): DeviceArray {
  const c = deviceZeros(g.engine, g.length, true);
  runOnDevice(g.engine, 'axpy', { n: g.length, alpha: 1, x: g, beta: 0, y: c });
  return c;
}
/** acc += g on the device. */
function deviceAdd(acc: DeviceArray, g: DeviceArray): void {
  runOnDevice(acc.engine, 'axpy', { n: g.length, alpha: 1, x: g, beta: 1, y: acc });
}
function mixedError(where: string): FAError {
  return new FAError('E_ARG', `backward: a gradient on the host met one on a device (${where}); keep a model's tensors on one engine`);
}

function accumulateLeaf(leaf: Tensor, g: Data): void {
  const gdev = g as unknown;
  if (gdev instanceof DeviceArray) {
    if (leaf.grad === null) leaf.grad = new Tensor(deviceCopy(gdev), leaf.shape);
    else if (leaf.grad.device) deviceAdd(leaf.grad.device, gdev);
    else throw mixedError(`the gradient of ${leaf.name ?? 'a leaf'}`);
    return;
  }
  if (leaf.grad?.device) throw mixedError(`the gradient of ${leaf.name ?? 'a leaf'}`);
  const gd = castData(g, leaf.precision);
  if (leaf.grad === null) {
    leaf.grad = new Tensor(gd === g ? gd.slice() : gd, leaf.shape);
  } else {
    const acc = leaf.grad.data;
    for (let i = 0; i < acc.length; i++) acc[i] += gd[i];
  }
}

function addPending(slots: (Pending | null)[], index: number, g: Data): void {
  const cur = slots[index];
  if (cur === null) {
    slots[index] = { data: g, owned: false };
    return;
  }
  const gdev = g as unknown, cdev = cur.data as unknown;
  if (gdev instanceof DeviceArray || cdev instanceof DeviceArray) {
    if (!(gdev instanceof DeviceArray) || !(cdev instanceof DeviceArray)) throw mixedError('two gradients of one output');
    const acc = cur.owned ? cdev : deviceCopy(cdev);
    deviceAdd(acc, gdev);
    slots[index] = { data: acc as unknown as Data, owned: true };
    return;
  }
  if (!cur.owned) {
    const sum = cur.data.slice();
    for (let i = 0; i < sum.length; i++) sum[i] += g[i];
    slots[index] = { data: sum, owned: true };
  } else {
    const acc = cur.data;
    for (let i = 0; i < acc.length; i++) acc[i] += g[i];
  }
}

function seedOf(root: Tensor, g: Tensor | Data | undefined): Data {
  if (g === undefined) {
    if (root.size !== 1) {
      throw new FAError('E_ARG', `backward() without a gradient needs a scalar; this tensor has shape ${shapeStr(root.shape)} (pass a gradient of that shape)`);
    }
    const one = alloc(root.precision, 1);
    one[0] = 1;
    return one;
  }
  const data = g instanceof Tensor ? g.data : g;
  if (data.length !== root.size) {
    throw new FAError('E_SHAPE', `backward(): the gradient has ${data.length} elements, the tensor ${shapeStr(root.shape)} has ${root.size}`);
  }
  return castData(data, root.precision);
}

/** Runs reverse mode from `roots`, seeding each with `grads[i]` (ones for a scalar when omitted). */
export async function backward(roots: readonly Tensor[], grads?: readonly (Tensor | Data | undefined)[], options: BackwardOptions = {}): Promise<void> {
  const retain = options.retainGraph === true;
  const engines = new Set<DeviceEngine>();
  const pending = new Map<Node, (Pending | null)[]>();
  const slotsOf = (n: Node): (Pending | null)[] => {
    let s = pending.get(n);
    if (!s) {
      s = n.outputShapes.map(() => null);
      pending.set(n, s);
    }
    return s;
  };

  const starts: Node[] = [];
  roots.forEach((root, i) => {
    if (!(root instanceof Tensor)) throw new FAError('E_ARG', 'backward() roots must be @fa/autograd Tensors');
    if (!root.requiresGrad) {
      throw new FAError('E_ARG', 'backward(): this tensor does not require grad (no input of the ops that made it has requiresGrad, or it was computed under noGrad)');
    }
    const seed = seedOf(root, grads?.[i]);
    if (root.gradFn === null) accumulateLeaf(root, seed);
    else {
      addPending(slotsOf(root.gradFn), root.outputIndex, seed);
      starts.push(root.gradFn);
    }
  });

  // Count, for every reachable node, the edges that point at it from reachable nodes.
  const deps = new Map<Node, number>();
  const seen = new Set<Node>();
  const stack = [...starts];
  for (const s of starts) seen.add(s);
  while (stack.length > 0) {
    const n = stack.pop()!;
    for (const e of n.next) {
      if (e === null || !('node' in e)) continue;
      deps.set(e.node, (deps.get(e.node) ?? 0) + 1);
      if (!seen.has(e.node)) {
        seen.add(e.node);
        stack.push(e.node);
      }
    }
  }

  const ready = [...new Set(starts)].filter((n) => (deps.get(n) ?? 0) === 0);
  while (ready.length > 0) {
    const node = ready.pop()!;
    const slots = pending.get(node);
    pending.delete(node);
    if (slots && slots.some((s) => s !== null)) {
      if (node.fn === null) throw releasedError(node.name);
      const dev = node.outputDevice;
      const outGrads = slots.map((s, i) => (s !== null ? s.data : dev ? (deviceZeros(dev, sizeOfShape(node.outputShapes[i])) as unknown as Data) : alloc(node.outputPrecision, sizeOfShape(node.outputShapes[i]))));
      if (dev) engines.add(dev);
      const inGrads = await node.fn(outGrads, node.needs);
      if (inGrads.length !== node.next.length) {
        throw new FAError('E_ARG', `internal: backward of ${node.name} returned ${inGrads.length} gradients for ${node.next.length} inputs`);
      }
      node.next.forEach((e, i) => {
        const g = inGrads[i];
        if (e === null || g === null || g === undefined) return;
        if ('leaf' in e) {
          if (g.length !== e.leaf.size) throw new FAError('E_SHAPE', `internal: backward of ${node.name} gave input ${i} a gradient of ${g.length} elements, the input has ${e.leaf.size}`);
          accumulateLeaf(e.leaf, g);
        } else {
          const want = sizeOfShape(e.node.outputShapes[e.index]);
          if (g.length !== want) throw new FAError('E_SHAPE', `internal: backward of ${node.name} gave input ${i} a gradient of ${g.length} elements, the input has ${want}`);
          addPending(slotsOf(e.node), e.index, (g as unknown) instanceof DeviceArray ? g : castData(g, e.node.outputPrecision));
        }
      });
      if (!retain) node.release();
    }
    for (const e of node.next) {
      if (e === null || !('node' in e)) continue;
      const left = deps.get(e.node)! - 1;
      deps.set(e.node, left);
      if (left === 0) ready.push(e.node);
    }
  }
  // (device work is issued, not awaited: a failure the engine has reported by now is thrown here)
  for (const e of engines) settle(e);
}

function sizeOfShape(s: readonly number[]): number {
  let n = 1;
  for (const x of s) n *= x;
  return n;
}
