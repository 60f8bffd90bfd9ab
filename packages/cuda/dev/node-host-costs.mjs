#!/usr/bin/env node
/**
 * Device probe: what the backend's forward() does on the host besides the binding's own call, on a
 * real CUDA context (µs per step, median of 2000): describeProblem + supports(), output allocation
 * and disposal (cudaMallocAsync / cudaFreeAsync from the pool, 4K bench row sizes), and an awaited
 * raw forward with its outputs allocated inside and outside the timed span.
 *   node .fa-device/run/node-host-costs.mjs
 */
import { describeProblem } from '@fa/core';
import { createCudaBackend, loadNative } from '@fa/cuda';

const native = loadNative();
if (!native.ok) throw new Error(native.reason);
const ctx = new native.binding.Context();
const b = await createCudaBackend();
const us = () => Number(process.hrtime.bigint()) / 1000;
const med = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const time = (f, n = 2000) => { const xs = []; for (let i = 0; i < n; i++) { const t0 = us(); f(); xs.push(us() - t0); } return med(xs).toFixed(2); };
const T = 4096, B = 4, H = 16, D = 128, n = B * T * H * D * 2;
const hq = await b.upload({ kind: 'host', dtype: 'bf16', shape: [B, T, H, D], data: new Uint16Array(n / 2).fill(0x3f80) });
const p = describeProblem(hq, hq, hq, { causal: true });
console.log(`describeProblem ${time(() => describeProblem(hq, hq, hq, { causal: true }))} µs, supports ${time(() => b.supports(p))} µs`);
console.log(`alloc+dispose ${n / 1e6} MB ${time(() => ctx.alloc(n).dispose())} µs; 1 MB ${time(() => ctx.alloc(1 << 20).dispose())} µs; out+lse ${time(() => { ctx.alloc(n).dispose(); ctx.alloc(B * T * H * 4).dispose(); })} µs`);
const [q, k, v] = [ctx.alloc(n), ctx.alloc(n), ctx.alloc(n)];
const cu = Int32Array.from({ length: B + 1 }, (_, i) => i * T);
const spec = () => ({ dtype: 'bf16', f32Path: 'auto', B, H, Hkv: H, d: D, totalQ: B * T, totalK: B * T, varlen: false, cuSeqlensQ: cu, cuSeqlensK: cu, alibi: null, scale: 0.088, softcap: 0, windowLeft: -1, windowRight: 0, deterministic: false, q, k, v, out: ctx.alloc(n), lse: ctx.alloc(B * T * H * 4) });
for (let i = 0; i < 5; i++) { const s = spec(); await ctx.forward(s); s.out.dispose(); s.lse.dispose(); }
const outside = [], inside = [], viaBackend = [];
for (let i = 0; i < 40; i++) {
  let s = spec();
  let t0 = us();
  await ctx.forward(s);
  outside.push(us() - t0);
  s.out.dispose(); s.lse.dispose();
  t0 = us();
  s = spec();
  await ctx.forward(s);
  s.out.dispose(); s.lse.dispose();
  inside.push(us() - t0);
  t0 = us();
  const r = await b.forward(hq, hq, hq, { causal: true });
  b.disposeTensor(r.out); b.disposeTensor(r.lse);
  viaBackend.push(us() - t0);
}
console.log(`awaited 4K causal forward: raw, outputs allocated outside the span ${med(outside).toFixed(1)} µs, inside ${med(inside).toFixed(1)} µs; through CudaBackend ${med(viaBackend).toFixed(1)} µs`);
await b.dispose();
ctx.dispose();
