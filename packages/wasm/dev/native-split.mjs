// One-thread forward and backward of the native engine (or FA_DEV_WASM=1: the wasm engine), T = 2048, H = 8, D = 64, f32:
// CPU ms and GFLOP/s for non-causal and causal; for the kernel notes.
import { tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';
const T = Number(process.env.T ?? 2048), H = 8, D = 64;
const be = await createWasmBackend({ native: process.env.FA_DEV_WASM !== '1', threads: Number(process.env.THREADS ?? 0), inlineBelowFlops: 0 });
const r = (n, s) => { const a = new Float32Array(n); let x = s; for (let i = 0; i < n; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const n = T * H * D;
const q = tensor(r(n, 1), [1, T, H, D], 'f32'), k = tensor(r(n, 2), [1, T, H, D], 'f32'), v = tensor(r(n, 3), [1, T, H, D], 'f32'), dO = tensor(r(n, 4), [1, T, H, D], 'f32');
for (const causal of [false, true]) {
  const flops = (4 * H * T * T * D) / (causal ? 2 : 1);
  let best = Infinity, bbest = Infinity;
  let f;
  for (let i = 0; i < 5; i++) { const c0 = process.cpuUsage(); f = await be.forward(q, k, v, { causal }); const c = process.cpuUsage(c0); best = Math.min(best, (c.user + c.system) / 1e3); }
  if (process.env.BWD) for (let i = 0; i < 3; i++) { const c0 = process.cpuUsage(); await be.backward(q, k, v, f.out, dO, f.lse, { causal }); const c = process.cpuUsage(c0); bbest = Math.min(bbest, (c.user + c.system) / 1e3); }
  console.log(`${be.device} T=${T} ${causal ? 'causal' : 'full  '}: forward ${best.toFixed(1)} ms CPU = ${(flops / best / 1e6).toFixed(1)} GFLOP/s${process.env.BWD ? `; backward ${bbest.toFixed(1)} ms = ${((2.5 * flops) / bbest / 1e6).toFixed(1)} GFLOP/s` : ''}`);
}
await be.dispose();
