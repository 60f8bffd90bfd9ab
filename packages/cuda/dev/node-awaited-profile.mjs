#!/usr/bin/env node
/**
 * Device probe: a CPU profile of awaited CudaBackend forwards (4K causal bench row, device tensors),
 * to see where the main thread's time goes between the binding's launch and its promise.
 *   node --cpu-prof --cpu-prof-dir=DIR .fa-device/run/node-awaited-profile.mjs
 */
import { createCudaBackend } from '@fa/cuda';

const b = await createCudaBackend();
const T = 4096, B = 4, H = 16, D = 128, n = B * T * H * D;
const hq = await b.upload({ kind: 'host', dtype: 'bf16', shape: [B, T, H, D], data: new Uint16Array(n).fill(0x3f80) });
const us = () => Number(process.hrtime.bigint()) / 1000;
const xs = [];
for (let i = 0; i < 3000; i++) {
  const t0 = us();
  const r = await b.forward(hq, hq, hq, { causal: true });
  b.disposeTensor(r.out); b.disposeTensor(r.lse);
  xs.push(us() - t0);
}
xs.sort((x, y) => x - y);
console.log(`awaited 4K causal forward through CudaBackend: median ${xs[xs.length >> 1].toFixed(1)} µs, p10 ${xs[xs.length / 10 | 0].toFixed(1)}, p90 ${xs[(xs.length * 9) / 10 | 0].toFixed(1)}`);
await b.dispose();
