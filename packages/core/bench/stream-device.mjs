// One device call: the kit's extra checks (the stream-order check among them) on cuda and webgpu,
// host and device tensors, then the cost per call of awaited calls against stream-ordered ones
// (forward bf16/f32, and a one-token KV-cache decode step), wall clock through the public API.
import { runConformance, formatSummary } from '@fa/core/testing';
import { streamOf, tensor, encode } from '@fa/core';
import { createCudaBackend } from '@fa/cuda';
import { createWebGPUBackend } from '@fa/webgpu';
import { create, globals } from 'webgpu';
import { writeFileSync } from 'node:fs';

Object.assign(globalThis, globals);
const lines = [];
const log = (s) => { console.log(s); lines.push(s); };
const rand = (n, seed) => { let x = seed >>> 0; const a = new Float32Array(n); for (let i = 0; i < n; i++) { x = (x * 1664525 + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const host = (shape, dtype, seed) => { const n = shape.reduce((a, b) => a * b, 1); const f = rand(n, seed); return dtype === 'f32' ? tensor(f, shape, 'f32') : tensor(encode(dtype, f), shape, dtype); };
const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

async function engines() {
  const out = [];
  try { out.push(await createCudaBackend()); } catch (e) { log(`cuda: ${e.message}`); }
  try {
    const gpu = create(['enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia']);
    globalThis.navigator = { gpu, userAgent: 'node' };
    out.push(await createWebGPUBackend({ gpu }));
  } catch (e) { log(`webgpu: ${e.message}`); }
  return out;
}

async function timeCalls(b, label, dtype, shape, opts) {
  const s = streamOf(b);
  const [q, k, v] = await Promise.all([1, 2, 3].map((i) => b.upload(host(shape, dtype, i))));
  for (let i = 0; i < 5; i++) { const r = await b.forward(q, k, v, opts); b.disposeTensor(r.out); b.disposeTensor(r.lse); }
  const N = 30, aw = [];
  for (let i = 0; i < N; i++) { const t0 = performance.now(); const r = await b.forward(q, k, v, opts); aw.push(performance.now() - t0); b.disposeTensor(r.out); b.disposeTensor(r.lse); }
  let t0 = performance.now();
  const rs = [];
  for (let i = 0; i < N; i++) rs.push(b.forward(q, k, v, opts));
  for (const r of await Promise.all(rs)) { b.disposeTensor(r.out); b.disposeTensor(r.lse); }
  const pip = (performance.now() - t0) / N;
  await s.sync();
  t0 = performance.now();
  const issue = [];
  for (let i = 0; i < N; i++) { const t1 = performance.now(); const r = s.forward(q, k, v, opts); issue.push(performance.now() - t1); s.disposeTensor(r.out); s.disposeTensor(r.lse); }
  await s.sync();
  const st = (performance.now() - t0) / N;
  log(`| ${b.name} | ${label} | ${(med(aw) * 1000).toFixed(0)} | ${(pip * 1000).toFixed(0)} | ${(st * 1000).toFixed(0)} | ${(med(issue) * 1000).toFixed(1)} |`);
  for (const t of [q, k, v]) b.disposeTensor(t);
}

async function timeDecode(b, dtype, B, Tk) {
  const H = 32, Hkv = 8, D = 128, s = streamOf(b);
  const kc = await b.upload(host([B, Tk + 64, Hkv, D], dtype, 4)), vc = await b.upload(host([B, Tk + 64, Hkv, D], dtype, 5));
  const q = await b.upload(host([B, 1, H, D], dtype, 6)), kn = await b.upload(host([B, 1, Hkv, D], dtype, 7)), vn = await b.upload(host([B, 1, Hkv, D], dtype, 8));
  const lens = await b.uploadIndex(new Int32Array(B).fill(Tk - 40));
  const N = 30, aw = [];
  for (let i = 0; i < N + 5; i++) { const t0 = performance.now(); const r = await b.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn, causal: true }); if (i >= 5) aw.push(performance.now() - t0); b.disposeTensor(r.out); b.disposeTensor(r.lse); }
  const sl = s.uploadIndex(new Int32Array(B).fill(Tk - 40));
  await s.sync();
  const t0 = performance.now();
  for (let i = 0; i < N; i++) { const r = s.forwardWithKVCache(q, kc, vc, { cacheSeqlens: sl, kNew: kn, vNew: vn, causal: true }); s.disposeTensor(r.out); s.disposeTensor(r.lse); }
  await s.sync();
  const st = (performance.now() - t0) / N;
  log(`| ${b.name} | decode ${dtype} B${B} Tk${Tk} | ${(med(aw) * 1000).toFixed(0)} | — | ${(st * 1000).toFixed(0)} | — |`);
  for (const t of [kc, vc, q, kn, vn, lens]) b.disposeTensor(t);
  s.disposeTensor(sl);
}

for (const b of await engines()) {
  for (const upload of [false, true]) {
    const sum = await runConformance(b, { cases: [], kvCache: false, upload });
    log(formatSummary(sum) + (upload ? ' (device tensors)' : ' (host tensors)'));
    for (const f of sum.failures ?? []) log(`  FAIL ${f.name}: ${f.message}`);
  }
}
log('');
log('| engine | call | awaited µs (median) | issued together, awaited at the end µs/call | stream µs/call (sync at the end) | stream issue µs (median) |');
log('|---|---|---|---|---|---|');
for (const b of await engines()) {
  try {
    await timeCalls(b, 'forward bf16 D128 T4K B4 H16', b.name === 'webgpu' ? 'f16' : 'bf16', [4, 4096, 16, 128], {});
    await timeCalls(b, 'forward causal B16 T1K H16 D128', b.name === 'webgpu' ? 'f16' : 'bf16', [16, 1024, 16, 128], { causal: true });
    for (const [B, Tk] of [[1, 32768], [8, 32768]]) await timeDecode(b, b.name === 'webgpu' ? 'f16' : 'bf16', B, Tk);
  } catch (e) { log(`${b.name}: ${e.message}`); }
  await b.dispose();
}
if (process.env.OUT) writeFileSync(`${process.env.OUT}/stream-device.md`, lines.join('\n') + '\n');
process.exit(0);
