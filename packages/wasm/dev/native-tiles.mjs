// Tile sizes for the native engine's forward (f32, H 8, D 64, T from T=, default 4096; THREADS=, default 2):
// wall ms and GFLOP/s per (br, bc), alternating, median of 5 (KERNEL_NOTES "Native build").
import { tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';
const T = Number(process.env.T ?? 4096), H = 8, D = 64, threads = Number(process.env.THREADS ?? 2);
const causal = process.env.CAUSAL === '1';
const shapes = (process.env.TILES ?? '64x64,128x64,256x64,128x128,64x128').split(',').map((s) => s.split('x').map(Number));
const r = (n, s) => { const a = new Float32Array(n); let x = s; for (let i = 0; i < n; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const n = T * H * D;
const q = tensor(r(n, 1), [1, T, H, D], 'f32'), k = tensor(r(n, 2), [1, T, H, D], 'f32'), v = tensor(r(n, 3), [1, T, H, D], 'f32');
const engines = [];
for (const [br, bc] of shapes) { const be = await createWasmBackend({ native: true, threads, tiles: { br, bc } }); await be.warm(); engines.push([`${br}x${bc}`, be]); }
const times = Object.fromEntries(engines.map(([nm]) => [nm, []]));
for (let rep = -1; rep < 5; rep++) for (const [nm, be] of engines) { const t0 = performance.now(); await be.forward(q, k, v, { causal }); if (rep >= 0) times[nm].push(performance.now() - t0); }
const flops = (4 * H * T * T * D) / (causal ? 2 : 1);
for (const [nm, be] of engines) { const ms = times[nm].sort((a, b) => a - b)[2]; console.log(`T=${T}${causal ? ' causal' : ''} tiles ${nm}: ${ms.toFixed(1)} ms = ${(flops / ms / 1e6).toFixed(1)} GFLOP/s`); await be.dispose(); }
