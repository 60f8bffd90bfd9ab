// The WebGPU engine's host cost per call (issue 24, "WebGPU per call"): what a call costs the
// calling thread beyond the GPU's work, through the public API, on whatever adapter Dawn finds
// (the H200 through the NVIDIA Vulkan driver on the GPU machine; lavapipe here).
//
//   - tiny problems (B1 H1 T16 D64 f32, and a decode step: one query over a 64-key f16 cache),
//     so the GPU's work is microseconds and the wall time is the host's;
//   - awaited: each call awaited before the next (device tensors in and out, nothing read back);
//     pipelined: N calls issued back to back, then one sync(); and sync() alone after one call;
//   - what a call does on the device, counted and timed by wrapping the GPUDevice and queue
//     methods: createBuffer, createBindGroup, writeBuffer, submit, push/popErrorScope (the pops'
//     promise time is what an awaited call waits for).
//   - on a hardware adapter (or FA_BENCH_DECODE=1): the decode step, H 32 over Hkv 8,
//     D 128, f16 cache, one token appended: one call a layer × 32 layers, awaited each, and
//     pipelined (issued back to back, one sync at the end), at B1 Tk32K and B8 Tk32K.
// FA_BENCH_WEBGPU names another build of the package to measure (e.g. @fa/webgpu-old: the
// commit before, for the before/after table in one run). Prints markdown tables; --json for the
// numbers. On the GPU machine:
//   source .fa-device/on-device.sh && node .fa-device/run/per-call.mjs
import { encode, tensor } from '@fa/core';

const pkg = process.env.FA_BENCH_WEBGPU ?? '@fa/webgpu';
const { createWebGPUBackend } = await import(pkg);
const N = Number(process.env.FA_BENCH_CALLS ?? 300);
const b = await createWebGPUBackend();
const dev = b.gpuDevice;

// ---- counting the device work of a call
const counts = new Map();
const add = (k, ms) => {
  const c = counts.get(k) ?? { n: 0, ms: 0 };
  c.n++;
  c.ms += ms;
  counts.set(k, c);
};
function wrap(obj, name, asyncResult = false) {
  const f = obj[name];
  obj[name] = function (...a) {
    const t0 = performance.now();
    const r = f.apply(this, a);
    if (asyncResult && r && typeof r.then === 'function') return r.finally(() => add(`${name} (until it resolves)`, performance.now() - t0));
    add(name, performance.now() - t0);
    return r;
  };
}
for (const m of ['createBuffer', 'createBindGroup', 'createCommandEncoder', 'pushErrorScope']) wrap(dev, m);
wrap(dev, 'popErrorScope', true);
wrap(dev.queue, 'writeBuffer');
wrap(dev.queue, 'submit');

const rand = (n) => Float32Array.from({ length: n }, () => Math.random() - 0.5);
const dense = async () => {
  const [B, T, H, D] = [1, 16, 1, 64];
  const q = await b.upload(tensor(rand(B * T * H * D), [B, T, H, D]));
  const k = await b.upload(tensor(rand(B * T * H * D), [B, T, H, D]));
  const v = await b.upload(tensor(rand(B * T * H * D), [B, T, H, D]));
  return { name: 'forward B1 T16 H1 D64 f32', call: async () => { const r = await b.forward(q, k, v, { causal: true }); return r; } };
};
const decode = async () => {
  const [B, Hq, Hkv, D, cap] = [1, 4, 1, 64, 64];
  const f16 = (n) => tensor(rand(n), [n]).data;
  const kc = await b.upload({ kind: 'host', dtype: 'f32', shape: [B, cap, Hkv, D], data: rand(B * cap * Hkv * D) });
  const vc = await b.upload({ kind: 'host', dtype: 'f32', shape: [B, cap, Hkv, D], data: rand(B * cap * Hkv * D) });
  const q = await b.upload(tensor(rand(B * Hq * D), [B, 1, Hq, D]));
  const kn = await b.upload(tensor(rand(B * Hkv * D), [B, 1, Hkv, D]));
  const vn = await b.upload(tensor(rand(B * Hkv * D), [B, 1, Hkv, D]));
  const lens = await b.uploadIndex(Int32Array.of(40));
  void f16;
  return { name: 'KV decode B1 H4/1 D64 f32, 40 cached', call: () => b.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn }) };
};

const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const rows = [];
for (const make of [dense, decode]) {
  const c = await make();
  const free = (r) => { b.disposeTensor(r.out); b.disposeTensor(r.lse); };
  for (let i = 0; i < 30; i++) free(await c.call());
  await b.sync();
  // awaited, one at a time
  counts.clear();
  const aw = [];
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    free(await c.call());
    aw.push(performance.now() - t0);
  }
  const per = [...counts].map(([k, v]) => `${k} ${(v.n / N).toFixed(0)}× ${((1000 * v.ms) / N).toFixed(0)} µs`).join(', ');
  await b.sync();
  // pipelined: issued back to back (each promise awaited only for its handles), one sync at the end
  const t1 = performance.now();
  const pending = [];
  for (let i = 0; i < N; i++) pending.push(c.call());
  const outs = await Promise.all(pending);
  await b.sync();
  const pipe = (performance.now() - t1) / N;
  outs.forEach(free);
  // sync() after one call
  const sy = [];
  for (let i = 0; i < 30; i++) {
    free(await c.call());
    const t0 = performance.now();
    await b.sync();
    sy.push(performance.now() - t0);
  }
  rows.push({ name: c.name, awaited: 1000 * median(aw), pipelined: 1000 * pipe, sync: 1000 * median(sy), per });
}
console.log(`# ${pkg} per-call host cost — ${new Date().toISOString().slice(0, 10)}, adapter: ${b.device}, ${N} calls`);
console.log('| call | awaited (median) | pipelined (mean) | sync() after one call | device work per awaited call |');
console.log('|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.name} | ${r.awaited.toFixed(0)} µs | ${r.pipelined.toFixed(0)} µs | ${r.sync.toFixed(0)} µs | ${r.per} |`);

// ---- the 32-layer decode step (one shared cache: every layer reads as many bytes)
const decodeRows = [];
if (/nvidia|amd|intel|apple/i.test(b.device) || process.env.FA_BENCH_DECODE === '1') {
  const small = process.env.FA_BENCH_DECODE === '1' && !/nvidia/i.test(b.device);
  for (const [B, Tk] of small ? [[1, 512]] : [[1, 32768], [8, 32768]]) {
    const [H, Hkv, D, L] = [32, 8, 128, 32];
    const cap = Tk;
    const f16 = (n) => ({ kind: 'host', dtype: 'f16', data: encode('f16', rand(n)) });
    const kc = await b.upload({ ...f16(B * cap * Hkv * D), shape: [B, cap, Hkv, D] });
    const vc = await b.upload({ ...f16(B * cap * Hkv * D), shape: [B, cap, Hkv, D] });
    const q = await b.upload({ ...f16(B * H * D), shape: [B, 1, H, D] });
    const kn = await b.upload({ ...f16(B * Hkv * D), shape: [B, 1, Hkv, D] });
    const vn = await b.upload({ ...f16(B * Hkv * D), shape: [B, 1, Hkv, D] });
    const lens = await b.uploadIndex(new Int32Array(B).fill(Tk - 1));
    const call = () => b.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn });
    const free = (r) => { b.disposeTensor(r.out); b.disposeTensor(r.lse); };
    for (let i = 0; i < 10; i++) free(await call());
    await b.sync();
    const awaitedSteps = [], pipeSteps = [];
    for (let rep = 0; rep < 7; rep++) {
      let t0 = performance.now();
      for (let l = 0; l < L; l++) free(await call());
      await b.sync();
      awaitedSteps.push(performance.now() - t0);
      t0 = performance.now();
      const outs = [];
      for (let l = 0; l < L; l++) outs.push(call());
      (await Promise.all(outs)).forEach(free);
      await b.sync();
      pipeSteps.push(performance.now() - t0);
    }
    decodeRows.push({ B, Tk, awaited: median(awaitedSteps), pipelined: median(pipeSteps) });
    for (const t of [kc, vc, q, kn, vn, lens]) b.disposeTensor(t);
  }
  console.log(`\n32-layer decode step (H 32 / Hkv 8, D 128, f16 cache, one token appended a call, one call a layer; median of 7 steps):`);
  console.log('| shape | awaited each call | pipelined, one sync |');
  console.log('|---|---|---|');
  for (const r of decodeRows) console.log(`| B${r.B} Tk${r.Tk / 1024}K | ${r.awaited.toFixed(2)} ms | ${r.pipelined.toFixed(2)} ms |`);
}
if (process.argv.includes('--json')) console.log(JSON.stringify({ rows, decodeRows }));
await b.dispose();
