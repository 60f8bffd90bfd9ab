#!/usr/bin/env node
/**
 * The binding's own cost per call, without a GPU: a dry-run context (the binding validates and
 * queues every call, its worker skips the CUDA work) behind the real CudaBackend, bf16 device
 * tensors of the 4K bench row. Prints µs per call awaited one by one and issued together: what
 * JavaScript, N-API and the two thread hops (main -> libuv worker -> main) cost before any CUDA
 * host work (KERNEL_NOTES "Calls through Node"). Run after `pnpm build`:
 *   node dev/node-overhead.mjs
 */
import { tensor } from '@fa/core';
import { CudaBackend } from '../dist/backend.js';
import { loadNative } from '../dist/native.js';

const native = loadNative();
if (!native.ok) {
  console.log(`node-overhead: the addon did not load (${native.reason})`);
  process.exit(0);
}
const b = new CudaBackend(new native.binding.Context({ dryRun: true }), { ok: true, driver: 0, runtime: 0, device: 'dry' });
const T = 4096, B = 4, H = 16, D = 128, N = 2000;
const host = tensor(new Uint16Array(B * T * H * D).fill(0x3f80), [B, T, H, D], 'bf16');
const [q, k, v] = [await b.upload(host), await b.upload(host), await b.upload(host)];
const dispose = (r) => { for (const t of Object.values(r)) b.disposeTensor(t); };
const perCall = async (call) => {
  for (let i = 0; i < 200; i++) dispose(await call());
  let t0 = performance.now();
  for (let i = 0; i < N; i++) dispose(await call());
  const awaited = ((performance.now() - t0) / N) * 1000;
  t0 = performance.now();
  (await Promise.all(Array.from({ length: N }, call))).forEach(dispose);
  return [awaited, ((performance.now() - t0) / N) * 1000];
};
const fwd = await b.forward(q, k, v, { causal: true });
for (const [name, call] of [
  ['forward', () => b.forward(q, k, v, { causal: true })],
  ['backward', () => b.backward(q, k, v, fwd.out, q, fwd.lse, { causal: true })],
]) {
  const [aw, tog] = await perCall(call);
  console.log(`dry ${name} (B ${B}, T ${T}, H ${H}, D ${D}, causal): ${aw.toFixed(1)} µs a call awaited, ${tog.toFixed(1)} µs issued together`);
}
await b.dispose();
