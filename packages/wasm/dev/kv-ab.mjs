#!/usr/bin/env node
/**
 * A/B of KV-cache decode builds in one process: one decode step (Tq = 1, H 32 / Hkv 8, D 128) on
 * an uploaded cache, inline on this thread (threads: 0), alternating between the builds given in
 * FA_DEV_WASM_PATHS (comma-separated folders of `bash scripts/build-wasm.sh FOLDER`), in CPU time
 * of this thread. FA_DEV_T (default 8192: 32 MiB of f32 K and V), FA_DEV_DTYPES (f32,bf16,f16),
 * FA_DEV_REPS (7), FA_DEV_THREADS (0: inline; N: N workers, then wall time). Prints G elements/s of K and V read.
 */
import { tensor, zeros } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';

const env = process.env;
const T = Number(env.FA_DEV_T ?? 8192), H = 32, HKV = 8, D = 128, REPS = Number(env.FA_DEV_REPS ?? 7);
const paths = (env.FA_DEV_WASM_PATHS ?? '').split(',').filter(Boolean);
const THREADS = Number(env.FA_DEV_THREADS ?? 0);
const engines = await Promise.all((paths.length ? paths : [undefined]).map((p) => createWasmBackend({ threads: THREADS, inlineBelowFlops: 0, relaxedSimd: false, ...(p ? { wasmPath: new URL(`file://${p}/`) } : {}) })));
const cpuMs = async (f) => {
  if (THREADS > 0) { const t0 = performance.now(); await f(); return performance.now() - t0; }
  const c0 = process.cpuUsage(); await f(); const c = process.cpuUsage(c0); return (c.user + c.system) / 1000;
};
for (const dtype of (env.FA_DEV_DTYPES ?? 'f32,bf16,f16').split(',')) {
  const fill = (t) => { const a = t.data; if (a instanceof Float32Array) for (let i = 0; i < a.length; i++) a[i] = Math.sin(i * 0.37); else for (let i = 0; i < a.length; i++) a[i] = dtype === 'bf16' ? 0x3f00 + (i % 128) : 0x3800 + (i % 512); return t; };
  const lens = new Int32Array([T - 1]);
  const state = await Promise.all(engines.map(async (be) => ({
    be,
    q: fill(zeros([1, 1, H, D], dtype)),
    k: await be.upload(fill(zeros([1, T, HKV, D], dtype))),
    v: await be.upload(fill(zeros([1, T, HKV, D], dtype))),
    opts: { cacheSeqlens: lens, kNew: fill(zeros([1, 1, HKV, D], dtype)), vNew: fill(zeros([1, 1, HKV, D], dtype)) },
    ms: [],
  })));
  for (let r = 0; r < REPS + 2; r++) {
    for (const s of state) {
      const ms = await cpuMs(() => s.be.forwardWithKVCache(s.q, s.k, s.v, s.opts));
      if (r >= 2) s.ms.push(ms);
    }
  }
  const el = 2 * T * HKV * D;
  console.log(dtype, state.map((s, i) => `${paths[i] ?? 'shipped'}: ${(el / Math.min(...s.ms) / 1e6).toFixed(2)} G el/s`).join('  '));
  for (const s of state) { s.be.disposeTensor?.(s.k); s.be.disposeTensor?.(s.v); }
}
for (const be of engines) await be.dispose();
