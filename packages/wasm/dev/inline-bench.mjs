#!/usr/bin/env node
/**
 * Single-thread speed of the wasm kernels inside the engine (threads: 0, everything inline), in
 * CPU time of this thread (process.cpuUsage), which other processes on a shared machine disturb
 * less than wall time. FA_DEV_T (default 2048), FA_DEV_D (64), FA_DEV_H (8), FA_DEV_REPS (5),
 * FA_DEV_RELAXED=1, FA_DEV_TILES=br,bc, FA_DEV_CAUSAL=1, FA_DEV_WASM_PATH=folder of an experimental build
 * (bash scripts/build-wasm.sh FOLDER after editing csrc/).
 */
import { tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';

const env = process.env;
const T = Number(env.FA_DEV_T ?? 2048), D = Number(env.FA_DEV_D ?? 64), H = Number(env.FA_DEV_H ?? 8);
const REPS = Number(env.FA_DEV_REPS ?? 5);
const causal = env.FA_DEV_CAUSAL === '1';
const tiles = env.FA_DEV_TILES ? { br: Number(env.FA_DEV_TILES.split(',')[0]), bc: Number(env.FA_DEV_TILES.split(',')[1]) } : undefined;
const be = await createWasmBackend({ threads: 0, relaxedSimd: env.FA_DEV_RELAXED === '1' ? true : false, ...(tiles ? { tiles } : {}), ...(env.FA_DEV_WASM_PATH ? { wasmPath: new URL(`file://${env.FA_DEV_WASM_PATH}/`) } : {}) });
const mk = (s) => { const a = new Float32Array(T * H * D); let x = s; for (let i = 0; i < a.length; i++) { x = (x * 1103515245 + 12345) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return tensor(a, [1, T, H, D], 'f32'); };
const q = mk(1), k = mk(2), v = mk(3), dO = mk(4);
const cpuMs = async (f) => { const c0 = process.cpuUsage(); await f(); const c = process.cpuUsage(c0); return (c.user + c.system) / 1000; };
const flops = (4 * H * T * T * D) / (causal ? 2 : 1);
let f = await be.forward(q, k, v, { causal });
const fw = [], bw = [];
for (let i = 0; i < REPS; i++) {
  fw.push(await cpuMs(async () => { f = await be.forward(q, k, v, { causal }); }));
  bw.push(await cpuMs(() => be.backward(q, k, v, f.out, dO, f.lse, { causal })));
}
const best = (xs) => Math.min(...xs);
console.log(`${be.device} T=${T} D=${D} H=${H}${causal ? ' causal' : ''} tiles=${JSON.stringify(be.tileSizes(D, 'forward'))}: forward ${(flops / best(fw) / 1e6).toFixed(1)} GFLOP/s (${best(fw).toFixed(0)} ms cpu), backward ${(2.5 * flops / best(bw) / 1e6).toFixed(1)} GFLOP/s (${best(bw).toFixed(0)} ms cpu)`);
await be.dispose();
