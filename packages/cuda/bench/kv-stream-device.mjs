// One device call (issue 24): KV-cache calls that queue on the calling thread. The KV kit on
// cuda (host and device tensors), a device index that disagrees with its mirror reported at the
// next sync naming the call (then recovery), and decode timings through the public API: awaited,
// stream-ordered with fixed lengths, with a writeIndex per step, and a 32-layer decode step
// (one call a layer, one writeIndex, one sync). Writes $OUT/kv-stream-device.md; the torch peer
// measured the same ways is bench/peer_decode_stream.py.
import { runConformance, formatSummary } from '@fa/core/testing';
import { streamOf, tensor, encode } from '@fa/core';
import { createCudaBackend } from '@fa/cuda';
import { writeFileSync } from 'node:fs';

const lines = [];
const log = (s) => { console.log(s); lines.push(s); };
const rand = (n, seed) => { let x = seed >>> 0; const a = new Float32Array(n); for (let i = 0; i < n; i++) { x = (x * 1664525 + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const host = (shape, seed) => tensor(encode('bf16', rand(shape.reduce((a, b) => a * b, 1), seed)), shape, 'bf16');
const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const b = await createCudaBackend();
log(`${b.device}, ${new Date().toISOString()}`);
for (const upload of [false, true]) {
  const t0 = performance.now();
  const sum = await runConformance(b, { cases: [], kvCache: true, upload });
  log(`${formatSummary(sum)} (${upload ? 'device' : 'host'} tensors, ${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  for (const f of sum.failures ?? []) log(`  FAIL ${f.name}: ${f.message}`);
}
const s = streamOf(b);
{ // a device length its mirror does not know: the kernels skip it, the next sync names the call
  const [B, H, Hkv, D, cap] = [2, 4, 2, 64, 256];
  const kc = s.upload(host([B, cap, Hkv, D], 1)), vc = s.upload(host([B, cap, Hkv, D], 2));
  const q = s.upload(host([B, 1, H, D], 3)), kn = s.upload(host([B, 1, Hkv, D], 4)), vn = s.upload(host([B, 1, Hkv, D], 5));
  const lens = s.uploadIndex(Int32Array.of(10, 20));
  const ok1 = s.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn });
  await s.sync();
  await b.context.upload(lens.handle, Int32Array.of(10, 1 << 30)); // behind the mirror's back
  const bad = s.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn });
  let msg = 'no error';
  try { await s.sync(); } catch (e) { msg = `${e.code}: ${e.message}`; }
  log(`bad device index: ${msg}`);
  s.writeIndex(lens, [11, 21]);
  // (kc and vc stay failed: a failed call's outputs, the caches it appends to included)
  const kc2 = s.upload(host([B, cap, Hkv, D], 1)), vc2 = s.upload(host([B, cap, Hkv, D], 2));
  const ok2 = s.forwardWithKVCache(q, kc2, vc2, { cacheSeqlens: lens, kNew: kn, vNew: vn });
  const r = await s.read(ok2.out);
  log(`after it: the next call ran (${r.data.length} values, first ${r.data[0]}); ok1 read ${(await s.read(ok1.out)).data.length} values`);
  for (const t of [kc, vc, kc2, vc2, q, kn, vn, lens, ok1.out, ok1.lse, bad.out, bad.lse, ok2.out, ok2.lse]) s.disposeTensor(t);
}
log('');
log('| decode, bf16, 1 token appended (H32/Hkv8 D128) | awaited µs (median of 30) | stream, fixed lengths µs/call | stream + writeIndex a step µs/step | 32-layer step, stream µs |');
log('|---|---|---|---|---|');
for (const [B, Tk] of [[1, 32768], [8, 32768], [64, 4096], [1, 131072]]) {
  const [H, Hkv, D, cap] = [32, 8, 128, Tk + 64];
  const L = 32, N = 30;
  // Four cache pairs, each larger than the L2, cycled over the 32 layers: a layer's cache is never
  // still cached from the one before, as with 32 distinct ones, at an eighth of the upload.
  const hostCache = host([B, cap, Hkv, D], 10 + B);
  const pairs = Array.from({ length: 4 }, () => [s.upload(hostCache), s.upload(hostCache)]);
  const caches = Array.from({ length: L }, (_, l) => pairs[l % 4]);
  const q = s.upload(host([B, 1, H, D], 6)), kn = s.upload(host([B, 1, Hkv, D], 7)), vn = s.upload(host([B, 1, Hkv, D], 8));
  const lens = s.uploadIndex(new Int32Array(B).fill(Tk - 40));
  await s.sync();
  const [kc, vc] = caches[0];
  const aw = [];
  for (let i = 0; i < N + 5; i++) { const t0 = performance.now(); const r = await b.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn, causal: true }); if (i >= 5) aw.push(performance.now() - t0); b.disposeTensor(r.out); b.disposeTensor(r.lse); }
  const call = (c) => { const r = s.forwardWithKVCache(q, c[0], c[1], { cacheSeqlens: lens, kNew: kn, vNew: vn, causal: true }); s.disposeTensor(r.out); s.disposeTensor(r.lse); };
  for (let i = 0; i < 5; i++) call(caches[0]);
  await s.sync();
  let t0 = performance.now();
  for (let i = 0; i < N; i++) call(caches[0]);
  await s.sync();
  const fixed = (performance.now() - t0) / N;
  t0 = performance.now();
  for (let i = 0; i < N; i++) { call(caches[0]); s.writeIndex(lens, new Int32Array(B).fill(Tk - 40 + ((i + 1) % 16))); }
  await s.sync();
  const stepped = (performance.now() - t0) / N;
  const steps = [];
  for (let i = 0; i < 8; i++) {
    const t1 = performance.now();
    for (const c of caches) call(c);
    s.writeIndex(lens, new Int32Array(B).fill(Tk - 40 + (i % 16)));
    await s.sync();
    if (i >= 2) steps.push(performance.now() - t1);
  }
  log(`| B${B} Tk${Tk} | ${(med(aw) * 1000).toFixed(0)} | ${(fixed * 1000).toFixed(0)} | ${(stepped * 1000).toFixed(0)} | ${(med(steps) * 1000).toFixed(0)} |`);
  for (const c of pairs) for (const t of c) s.disposeTensor(t);
  for (const t of [q, kn, vn, lens]) s.disposeTensor(t);
  await s.sync();
}
await b.dispose();
if (process.env.OUT) writeFileSync(`${process.env.OUT}/kv-stream-device.md`, lines.join('\n') + '\n');
process.exit(0);
