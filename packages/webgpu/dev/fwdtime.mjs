import { tensor } from '@fa/core';
import { createWebGPUBackend } from '../dist/index.js';
const tile = process.argv[2] ? JSON.parse(process.argv[2]) : undefined;
const be = await createWebGPUBackend({ tile });
const [B,T,H,D] = [1, +(process.argv[3]||37), 2, +(process.argv[4]||16)];
const mk = () => tensor(Float32Array.from({length:B*T*H*D}, () => Math.random()), [B,T,H,D]);
const q = mk(), k = mk(), v = mk();
for (let i = 0; i < 3; i++) {
  const t0 = performance.now();
  await be.forward(q, k, v, { causal: true });
  console.log('fwd', JSON.stringify(be.lastSpecs[0].tile), (performance.now() - t0).toFixed(0), 'ms');
}
await be.dispose();
