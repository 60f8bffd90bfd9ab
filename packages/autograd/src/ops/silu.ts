/**
 * silu(x) = x·σ(x), and swiglu(a, b) = silu(a)·b (the gated MLP of LLaMA-style models, fused:
 * one pass forward, one backward, no silu(a) tensor kept). Float32 runs on the model engine
 * (engine.ts); float64 (gradcheck's twin) on core's cpu kernels in float64 arrays.
 */
import { FAError, siluBackwardCpu, siluCpu, type SiluBackwardCall, type SiluCall } from '@fa/core';
import { Tensor, alloc, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn, type Saved } from '../node.js';
import { checkTensors, dataAs, promote, sameShape, shapeStr } from './util.js';
import { modelEngine } from '../engine.js';
import { DeviceArray, deviceZeros, engineOf, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

function siluBackwardDevice(e: DeviceEngine, x: DeviceArray, gate: DeviceArray | null): BackwardFn {
  return ([gh], needs) => {
    const dx = deviceZeros(e, x.length, true);
    const dgate = gate && needs[1] ? deviceZeros(e, x.length, true) : null;
    runOnDevice(e, 'siluBackward', { x, gate, dy: onEngine(e, gh), dx, dgate });
    return (gate ? [needs[0] ? dx : null, dgate] : [dx]) as unknown as (Data | null)[];
  };
}

function siluDevice(name: 'silu' | 'swiglu', a: Tensor, b: Tensor | null): Tensor {
  const e = engineOf(name, a.storage, b?.storage)!;
  const x = a.storage as DeviceArray, gate = (b?.storage ?? null) as DeviceArray | null;
  const out = deviceZeros(e, a.size, true);
  runOnDevice(e, 'silu', { x, gate, y: out });
  const saved: Saved[] = [{ what: b ? 'a' : 'x', data: x as unknown as ArrayBufferView, leaf: a.isLeaf }];
  if (gate) saved.push({ what: 'b', data: gate as unknown as ArrayBufferView, leaf: b!.isLeaf });
  return record1(name, b ? [a, b] : [a], out as unknown as Data, a.shape, saved, siluBackwardDevice(e, x, gate));
}

type F = Float32Array;

function run(call: SiluCall, p: Precision): void {
  if (p === 'float32') modelEngine().silu(call);
  else siluCpu(call);
}

function siluBackward(x: Data, gate: Data | null, p: Precision): BackwardFn {
  return ([g], needs) => {
    const dx = needs[0] ? alloc(p, x.length) : null;
    const dgate = gate && needs[1] ? alloc(p, x.length) : null;
    // the call always writes dx: a scratch one when only the gate's gradient is asked for
    const call = { x: x as F, gate: gate as F | null, dy: g as F, dx: (dx ?? alloc(p, x.length)) as F, dgate: dgate as F | null } satisfies SiluBackwardCall;
    if (p === 'float32') modelEngine().siluBackward(call);
    else siluBackwardCpu(call);
    return gate ? [dx, dgate] : [dx];
  };
}

export function silu(x: Tensor): Tensor {
  checkTensors('silu', ['x', x]);
  if (x.onDevice) return siluDevice('silu', x, null);
  const p = x.precision;
  const out = alloc(p, x.size);
  run({ x: x.data as F, gate: null, y: out as F }, p);
  return record1('silu', [x], out, x.shape, [{ what: 'x', data: x.data, leaf: x.isLeaf }], siluBackward(x.data, null, p));
}

/** silu(a)·b, a and b of one shape. */
export function swiglu(a: Tensor, b: Tensor): Tensor {
  checkTensors('swiglu', ['a', a], ['b', b]);
  if (!sameShape(a.shape, b.shape)) throw new FAError('E_SHAPE', `swiglu: a ${shapeStr(a.shape)} and b ${shapeStr(b.shape)} must have one shape`);
  if (a.onDevice || b.onDevice) return siluDevice('swiglu', a, b);
  const p = promote(a, b);
  const ad = dataAs(a, p), bd = dataAs(b, p);
  const out = alloc(p, a.size);
  run({ x: ad as F, gate: bd as F, y: out as F }, p);
  const saved: Saved[] = [
    { what: 'a', data: ad, leaf: a.isLeaf && ad === a.data },
    { what: 'b', data: bd, leaf: b.isLeaf && bd === b.data },
  ];
  return record1('swiglu', [a, b], out, a.shape, saved, siluBackward(ad, bd, p));
}
