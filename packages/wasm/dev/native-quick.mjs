#!/usr/bin/env node
/**
 * A quick look at one shape against ORT (bench/run.mjs is the full table): f32, B 1, H 8, D 64,
 * T from T= (default 2048), non-causal then causal; the native engine, the wasm engine (NOWASM=1
 * leaves it out) and ORT's MultiHeadAttention (bench/install-peers.sh), calls alternating,
 * median of 7, GFLOP/s. GAP_MS= waits before every call: ORT's threads spin for a while after a
 * run and slow whichever engine runs next (0.61 against 0.88 of ORT with GAP_MS=100 here).
 * BWD=1 adds the native backward.
 */
import { createRequire } from 'node:module';
import { tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';

const env = process.env;
const H = 8, D = 64, T = Number(env.T ?? 2048), GAP = Number(env.GAP_MS ?? 0);
const peers = createRequire(new URL('../bench/peers/', import.meta.url));
const ort = peers('onnxruntime-node');
const model = (causal) => new URL(`../bench/models/mha-h${H}${causal ? '-causal' : ''}.onnx`, import.meta.url).pathname;
const sessions = {};
for (const causal of [false, true]) sessions[causal] = await ort.InferenceSession.create(model(causal), { intraOpNumThreads: 2, interOpNumThreads: 1, executionProviders: ['cpu'], graphOptimizationLevel: 'all' });

const native = await createWasmBackend({ native: true });
await native.warm();
const wasm = env.NOWASM ? undefined : await createWasmBackend();
if (wasm) await wasm.warm();

const rand = (n) => Float32Array.from({ length: n }, () => Math.random() - 0.5);
const n = T * H * D;
const [qd, kd, vd] = [rand(n), rand(n), rand(n)];
const [q, k, v] = [qd, kd, vd].map((d) => tensor(d, [1, T, H, D], 'f32'));
const median = (x) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)];

for (const causal of [false, true]) {
  const flops = (4 * H * T * T * D) / (causal ? 2 : 1);
  const feeds = Object.fromEntries([['q', qd], ['k', kd], ['v', vd]].map(([name, d]) => [name, new ort.Tensor('float32', d, [1, T, H * D])]));
  const engines = [['native', () => native.forward(q, k, v, { causal })], ['ort', () => sessions[causal].run(feeds)]];
  if (wasm) engines.push(['wasm', () => wasm.forward(q, k, v, { causal })]);
  const times = Object.fromEntries(engines.map(([name]) => [name, []]));
  for (let rep = -1; rep < 7; rep++) {
    for (const [name, run] of engines) {
      if (GAP) await new Promise((r) => setTimeout(r, GAP));
      const t0 = performance.now();
      await run();
      if (rep >= 0) times[name].push(performance.now() - t0);
    }
  }
  const rates = Object.entries(times).map(([name, t]) => `${name} ${(flops / median(t) / 1e6).toFixed(1)}`);
  console.log(`T=${T} ${causal ? 'causal' : 'full  '} | ${rates.join(' | ')} GFLOP/s | native/ort ${(median(times.ort) / median(times.native)).toFixed(2)}`);
}

if (env.BWD) {
  const f = await native.forward(q, k, v, {});
  const dO = tensor(rand(n), [1, T, H, D], 'f32');
  const t = [];
  for (let i = 0; i < 4; i++) {
    const t0 = performance.now();
    await native.backward(q, k, v, f.out, dO, f.lse, {});
    t.push(performance.now() - t0);
  }
  console.log(`native backward T=${T}: ${((10 * H * T * T * D) / Math.min(...t) / 1e6).toFixed(1)} GFLOP/s`);
}
await native.dispose();
if (wasm) await wasm.dispose();
