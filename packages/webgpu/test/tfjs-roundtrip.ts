/**
 * A tfjs-backend-webgpu program and our engine on tfjs's own GPUDevice, no copies: tfjs's q, k, v
 * (made by tfjs ops, so in tfjs's buffers) wrapped with wrapBuffer, our forward and backward on
 * them, our outputs exported back as zero-copy tfjs tensors that tfjs computes on. Shared by the
 * Node test (Dawn on lavapipe) and the headless-Chromium page; throws on the first mismatch.
 */
import { tensor, type Tensor } from '@fa/core';
import type * as TF from '@tensorflow/tfjs-core';
import { createWebGPUBackend } from '../dist/index.js';
import { randn, reference, relErr } from './ref.js';

export const TFJS_ROUNDTRIP = 'tfjs-backend-webgpu tensors through forward and backward, outputs back as tfjs tensors, no copies';

function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(what);
}

export async function tfjsRoundTrip(tf: typeof TF): Promise<string> {
  const device = (tf.backend() as unknown as { device: GPUDevice }).device;
  const fa = await createWebGPUBackend({ device });
  check(fa.gpuDevice === device, 'the engine is not on tfjs device');
  const shape = [2, 32, 4, 16] as [number, number, number, number];
  const size = shape.reduce((x, y) => x * y);
  const vals = [randn(size, 11), randn(size, 12), randn(size, 13), randn(size, 14)];
  const [tq, tk, tv, tdo] = vals.map((x) => tf.mul(tf.tensor4d(x, shape), 1));
  const gpu = [tq, tk, tv, tdo].map((t) => t.dataToGPU());
  const [q, k, v, dO] = await Promise.all(gpu.map((g) => fa.wrapBuffer(g.buffer!, { dtype: 'f32', shape })));
  const opts = { causal: true, windowLeft: 9 };
  const f = await fa.forward(q, k, v, opts);
  const g = await fa.backward(q, k, v, f.out, dO, f.lse, opts);
  const asTf = (t: Tensor) => {
    const e = fa.exportBuffer(t);
    return tf.tensor({ buffer: e.buffer, zeroCopy: true }, [...e.shape], 'float32');
  };
  const [out, dq, dk, dv] = [f.out, g.dq, g.dk, g.dv].map(asTf);
  const ref = reference(tensor(vals[0], shape), tensor(vals[1], shape), tensor(vals[2], shape), opts, tensor(vals[3], shape));
  const tOut = (await out.data()) as Float32Array;
  const errs = {
    out: relErr(tOut, ref.out),
    dq: relErr((await dq.data()) as Float32Array, ref.dq!),
    dk: relErr((await dk.data()) as Float32Array, ref.dk!),
    dv: relErr((await dv.data()) as Float32Array, ref.dv!),
  };
  check(errs.out < 1e-5, `out differs from the float64 reference by ${errs.out}`);
  for (const n of ['dq', 'dk', 'dv'] as const) check(errs[n] < 1e-4, `${n} differs from the float64 reference by ${errs[n]}`);
  // tfjs computes on our buffer, and our read of it agrees bit for bit
  const twice = (await tf.mul(out, 2).data()) as Float32Array;
  check(twice[5] === 2 * tOut[5], 'tfjs did not compute on our output');
  const ours = (await fa.read(f.out)).data as Float32Array;
  check(ours.every((x, i) => x === tOut[i]), "our read of out differs from tfjs's");
  tf.dispose([tq, tk, tv, tdo, out, dq, dk, dv, ...gpu.map((x) => x.tensorRef)]);
  await fa.dispose(); // a given device is not destroyed: tfjs runs on
  const after = (await tf.add(tf.tensor1d([1, 2]), 1).data()) as Float32Array;
  check(after[0] === 2 && after[1] === 3, 'tfjs broke after our engine was disposed');
  return `ok: out ${errs.out.toExponential(1)}, dq ${errs.dq.toExponential(1)}, dk ${errs.dk.toExponential(1)}, dv ${errs.dv.toExponential(1)} (rel. L2 to float64)`;
}
