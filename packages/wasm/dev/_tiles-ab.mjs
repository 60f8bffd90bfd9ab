// one native build (FA_DEV_NATIVE_PATH), one thread, CPU ms of the forward per tile shape (TILES=brxbc,...)
import { tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';
const T = Number(process.env.T ?? 2048), H = 8, D = Number(process.env.D ?? 64);
const r = (n, s) => { const a = new Float32Array(n); let x = s; for (let i = 0; i < n; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const n = T * H * D;
const q = tensor(r(n, 1), [1, T, H, D]), k = tensor(r(n, 2), [1, T, H, D]), v = tensor(r(n, 3), [1, T, H, D]);
const shapes = (process.env.TILES ?? '128x64,64x64').split(',').map((s) => s.split('x').map(Number));
const bes = [];
for (const [br, bc] of shapes) bes.push(await createWasmBackend({ native: true, nativePath: process.env.FA_DEV_NATIVE_PATH, threads: 0, inlineBelowFlops: 0, tiles: { br, bc } }));
const cpu = async (fn) => { const c0 = process.cpuUsage(); await fn(); const c = process.cpuUsage(c0); return (c.user + c.system) / 1e3; };
const fw = bes.map(() => []);
for (let rep = 0; rep < 7; rep++) for (const [i, be] of bes.entries()) fw[i].push(await cpu(() => be.forward(q, k, v)));
const med = (x) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)];
const flops = 4 * H * T * T * D;
for (const [i, s] of shapes.entries()) console.log(`${s.join('x')}: forward ${med(fw[i]).toFixed(1)} ms CPU = ${(flops / med(fw[i]) / 1e6).toFixed(1)} GFLOP/s`);
