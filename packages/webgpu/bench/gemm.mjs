// The WebGPU engine's matrix product against tfjs-backend-webgpu's matMul on the same adapter and
// device, in one process (issue 25: "measure each against the library a user would pick"): the
// products of the WebGPU model (4 layers, d_model 256, T 1024, B 2: M = 2048 rows) and a
// large square one. f32; each side issues N products back to back, then waits for the queue
// (ours: sync(); tfjs: its queue flushed, then onSubmittedWorkDone). Also checks one product
// of ours against tfjs's (max |diff| / max |ref|). On the GPU machine (after pack-tfjs.mjs):
//   source .fa-device/on-device.sh && node .fa-device/run/gemm.mjs
import { tensor } from '@fa/core';

const N = Number(process.env.FA_BENCH_CALLS ?? 20);
let tf;
const { create, globals } = await import('webgpu');
Object.assign(globalThis, globals);
globalThis.navigator ??= { gpu: create([]), userAgent: 'node' };
try {
  tf = (await import('./tfjs.bundle.mjs')).default;
} catch {
  tf = await import('@tensorflow/tfjs-core');
  await import('@tensorflow/tfjs-backend-webgpu');
}
tf.env().set('WEBGPU_CPU_FORWARD', false);
await tf.setBackend('webgpu');
await tf.ready();
const device = tf.backend().device;
const { createWebGPUBackend } = await import('@fa/webgpu');
const fa = await createWebGPUBackend({ device }); // one device for both: the same queue and clocks
const rand = (n, s) => { let x = s >>> 0 || 1; return Float32Array.from({ length: n }, () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5)); };
const shapes = (process.env.FA_BENCH_SHAPES ?? '2048x768x256,2048x256x256,2048x1024x256,2048x256x1024,2048x256x256t,4096x4096x4096').split(',');
console.log(`# WebGPU gemm vs tfjs matMul, ${fa.device}, ${new Date().toISOString()}, ${N} products back to back`);
console.log('| M×N×K | ours ms | ours GFLOP/s | tfjs ms | tfjs GFLOP/s | ours / tfjs | max diff / max |');
console.log('|---|---|---|---|---|---|---|');
for (const s of shapes) {
  const tB = s.endsWith('t');
  const [M, Nn, K] = s.replace('t', '').split('x').map(Number);
  const a = rand(M * K, 1), b = rand(K * Nn, 2);
  const flops = 2 * M * Nn * K;
  // ours
  const da = await fa.upload(tensor(a, [M * K])), db = await fa.upload(tensor(b, [K * Nn])), dc = await fa.upload(tensor(new Float32Array(M * Nn), [M * Nn]));
  const call = () => fa.gemm({ transA: false, transB: tB, M, N: Nn, K, a: da, b: db, c: dc });
  await call(); await fa.sync();
  let t0 = performance.now();
  const issued = [];
  for (let i = 0; i < N; i++) issued.push(call()); // (stream-ordered: resolves once encoded)
  await Promise.all(issued);
  await fa.sync();
  const ours = (performance.now() - t0) / N;
  const mine = (await fa.read(dc)).data;
  // tfjs
  const ta = tf.tensor2d(a, [M, K]), tb = tB ? tf.tensor2d(b, [Nn, K]) : tf.tensor2d(b, [K, Nn]);
  const mm = () => tf.matMul(ta, tb, false, tB);
  let r = mm(); await r.data(); r.dispose();
  t0 = performance.now();
  for (let i = 0; i < N; i++) { r = mm(); if (i < N - 1) r.dispose(); }
  // (tfjs batches its commands: dataToGPU submits them, with one copy of the last product)
  const g = r.dataToGPU();
  await device.queue.onSubmittedWorkDone();
  g.tensorRef.dispose();
  const theirs = (performance.now() - t0) / N;
  const ref = await r.data();
  r.dispose();
  let md = 0, mr = 0;
  for (let i = 0; i < ref.length; i++) { md = Math.max(md, Math.abs(mine[i] - ref[i])); mr = Math.max(mr, Math.abs(ref[i])); }
  console.log(`| ${M}×${Nn}×${K}${tB ? ' (Bᵀ)' : ''} | ${ours.toFixed(3)} | ${(flops / ours / 1e6).toFixed(0)} | ${theirs.toFixed(3)} | ${(flops / theirs / 1e6).toFixed(0)} | ${(theirs / ours).toFixed(2)} | ${(md / mr).toExponential(1)} |`);
  tf.dispose([ta, tb]);
  for (const t of [da, db, dc]) fa.disposeTensor(t);
}
await fa.dispose();
