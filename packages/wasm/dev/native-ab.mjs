// Two builds of the native addons (FA_DEV_NATIVE_PATHS=dirA,dirB: folders from build-native.sh),
// one thread each, alternating: CPU ms of the forward and backward at T (default 2048), H 8, D 64, f32.
import { tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';
const dirs = (process.env.FA_DEV_NATIVE_PATHS ?? '').split(',').filter(Boolean);
if (dirs.length < 2) throw new Error('FA_DEV_NATIVE_PATHS=dirA,dirB');
const T = Number(process.env.T ?? 2048), H = 8, D = 64, causal = process.env.CAUSAL === '1';
const r = (n, s) => { const a = new Float32Array(n); let x = s; for (let i = 0; i < n; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const n = T * H * D;
const q = tensor(r(n, 1), [1, T, H, D]), k = tensor(r(n, 2), [1, T, H, D]), v = tensor(r(n, 3), [1, T, H, D]), dO = tensor(r(n, 4), [1, T, H, D]);
const bes = [];
for (const d of dirs) bes.push(await createWasmBackend({ native: true, nativePath: d, threads: 0, inlineBelowFlops: 0 }));
const f = await bes[0].forward(q, k, v, { causal });
const cpu = async (fn) => { const c0 = process.cpuUsage(); await fn(); const c = process.cpuUsage(c0); return (c.user + c.system) / 1e3; };
const fw = dirs.map(() => []), bw = dirs.map(() => []);
for (let rep = 0; rep < 7; rep++) for (const [i, be] of bes.entries()) { fw[i].push(await cpu(() => be.forward(q, k, v, { causal }))); bw[i].push(await cpu(() => be.backward(q, k, v, f.out, dO, f.lse, { causal }))); }
const med = (x) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)];
for (const [i, d] of dirs.entries()) console.log(`${d}: forward ${med(fw[i]).toFixed(1)} ms, backward ${med(bw[i]).toFixed(1)} ms (CPU, median of 7)`);
for (const be of bes) await be.dispose();
