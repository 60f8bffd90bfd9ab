// Device script for the KV-cache call (issue 12), run on the GPU machine through .fa-device:
//  1. the conformance kit's KV-cache cases and checks on cuda, host tensors then device tensors
//     (every dtype and head dim of the kit: f32 and head dim 1 included; the goal is 0 skipped);
//  2. the binding fuzz (dense and cache calls) on a real context, the caches checked unchanged,
//     and a device index copy that disagrees with its host copy (refused, E_ARG, no fault);
//  3. decode through Node at the issue's shapes (bf16, Tq 1, H 32 / Hkv 8, D 128, contiguous,
//     device tensors and index tensors): wall clock per awaited call, median; and a decode loop
//     (append one token, advance the lengths with writeIndex) per step; f32 at two of the shapes.
// Writes kv-node.json under $OUT.
import { formatSummary, KV_EXTRA_CHECKS, runConformance } from '@fa/core/testing';
import { createCudaBackend, loadNative } from '@fa/cuda';
import { writeFileSync } from 'node:fs';
import { fuzzBinding, KV_FUZZ_BASES, validKvSpec } from './fuzz-lib.mjs';

const out = {};
const b = await createCudaBackend();
console.log(`cuda backend on ${b.device}`);
const skipOnly = process.argv.includes('--timing-only');

if (!skipOnly) {
  for (const [label, opts] of [['host tensors', {}], ['device tensors', { upload: true }]]) {
    const s = await runConformance(b, {
      ...opts,
      cases: [],
      kvCache: true,
      extras: false,
      onResult: (r) => {
        if (!r.pass) console.log(`FAIL ${r.name}: ${r.message}`);
      },
    });
    const extras = [];
    for (const x of KV_EXTRA_CHECKS) {
      const r = await x.run(b, opts);
      extras.push({ name: x.name, pass: r.pass, message: r.message });
      console.log(`${r.pass ? 'ok  ' : 'FAIL'} ${x.name}: ${r.message.split('\n').slice(0, 6).join(' | ')}`);
    }
    console.log(`KV kit, ${label}: ${formatSummary(s)}; extras ${extras.filter((e) => e.pass).length}/${extras.length} passed; skipped ${s.skipped.length}${s.skipped.length ? ` (${[...new Set(s.skipped.map((x) => x.reason))].join('; ')})` : ''}`);
    out[label] = { passed: s.passed, failed: s.failed, skipped: s.skipped.length, failures: s.failures, skippedReasons: [...new Set(s.skipped.map((x) => x.reason))], extras };
  }

  const n = loadNative();
  const ctx = new n.binding.Context();
  const other = new n.binding.Context();
  const f = await fuzzBinding(n.binding, ctx, other, 10000, 3);
  console.log(`binding fuzz on the GPU: ${f.calls} calls, ${f.threw} JS errors, ${f.resolved} resolved, ${f.notErrors} non-Errors, KV caches changed by refused calls: ${f.kvCacheChanged ? 'YES' : 'no'}`);
  out.fuzz = { calls: f.calls, threw: f.threw, resolved: f.resolved, kvCacheChanged: f.kvCacheChanged };
  // a device length / block index the host copy does not have: the kernels' range checks refuse it
  // (both kernels: bf16 d 64 on the tensor cores, f32 d 13 on FFMA)
  out.mismatch = [];
  for (const base of KV_FUZZ_BASES) {
    const s = validKvSpec(ctx, base);
    for (const [lens, table] of [[Int32Array.from([-7, 2]), s.blockTable], [s.cacheSeqlens, Int32Array.from([0, 1, 2, 99, 4, 5])]]) {
      await ctx.upload(s.cacheSeqlensBuf, lens);
      await ctx.upload(s.blockTableBuf, table);
      let mismatch;
      try {
        await ctx.kvForward(s);
        mismatch = 'resolved (expected E_ARG)';
      } catch (e) {
        mismatch = `${e.code}: ${e.message}`;
      }
      await ctx.upload(s.cacheSeqlensBuf, s.cacheSeqlens);
      await ctx.upload(s.blockTableBuf, s.blockTable);
      const after = await ctx.kvForward(s).then(() => 'ok', (e) => `FAILED ${e.code} ${e.message}`);
      console.log(`device/host index mismatch (${base.dtype} d=${base.d}): ${mismatch}; a valid call after it: ${after}`);
      out.mismatch.push({ base, result: mismatch, after });
    }
    for (const x of Object.values(s)) if (x && typeof x.dispose === 'function') x.dispose();
  }
}

// ---- timing through Node ------------------------------------------------------------------------
const H = 32, HKV = 8, D = 128;
const runs = [...[[1, 32768], [8, 32768], [64, 4096], [1, 131072]].map(([B, T]) => ['bf16', B, T]), ['f32', 1, 32768], ['f32', 8, 32768]];
const maxElems = Math.max(...runs.map(([, B, T]) => B * T * HKV * D));
const pool16 = new Uint16Array(maxElems);
for (let i = 0; i < 4096; i++) pool16[i] = 0x3c00 + ((i * 37) % 256) - 128; // small bf16 values, never zero
for (let filled = 4096; filled < maxElems; filled *= 2) pool16.copyWithin(filled, 0, Math.min(filled, maxElems - filled));
let pool32;  // made on first use (f32 rows)
const host = (dtype, shape) => {
  const n = shape.reduce((a, x) => a * x, 1);
  if (dtype === 'bf16') return { kind: 'host', dtype, shape, data: pool16.subarray(0, n) };
  if (!pool32) {
    pool32 = new Float32Array(maxElems);
    for (let i = 0; i < 4096; i++) pool32[i] = 0.01 * (((i * 37) % 256) - 127.5);
    for (let filled = 4096; filled < maxElems; filled *= 2) pool32.copyWithin(filled, 0, Math.min(filled, maxElems - filled));
  }
  return { kind: 'host', dtype, shape, data: pool32.subarray(0, n) };
};
const median = (xs) => [...xs].sort((a, c) => a - c)[xs.length >> 1];
out.timing = [];
for (const [dtype, B, T] of runs) {
  const q = await b.upload(host(dtype, [B, 1, H, D]));
  const kc = await b.upload(host(dtype, [B, T, HKV, D]));
  const vc = await b.upload(host(dtype, [B, T, HKV, D]));
  const lens = await b.uploadIndex(new Int32Array(B).fill(T));
  const call = () => b.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens });
  for (let i = 0; i < 5; i++) {
    const r = await call();
    b.disposeTensor(r.out);
    b.disposeTensor(r.lse);
  }
  const ts = [];
  for (let i = 0; i < 40; i++) {
    const t0 = performance.now();
    const r = await call();
    ts.push((performance.now() - t0) * 1000);
    b.disposeTensor(r.out);
    b.disposeTensor(r.lse);
  }
  // a decode loop: one appended token per step, the lengths advanced with writeIndex (no readback)
  const len0 = T - 64;
  await b.writeIndex(lens, new Int32Array(B).fill(len0));
  const kn = await b.upload(host(dtype, [B, 1, HKV, D]));
  const vn = await b.upload(host(dtype, [B, 1, HKV, D]));
  const steps = [];
  for (let s = 0; s < 24; s++) {
    const t0 = performance.now();
    const r = await b.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn });
    await b.writeIndex(lens, new Int32Array(B).fill(len0 + s + 1));
    steps.push((performance.now() - t0) * 1000);
    b.disposeTensor(r.out);
    b.disposeTensor(r.lse);
  }
  const row = { dtype, B, Tk: T, nodeUs: +median(ts).toFixed(1), minUs: +Math.min(...ts).toFixed(1), loopStepUs: +median(steps.slice(4)).toFixed(1) };
  console.log(`node: ${dtype} B=${B} Tk=${T}: ${row.nodeUs} us per awaited call (min ${row.minUs}); decode loop (append + attend + writeIndex) ${row.loopStepUs} us per step`);
  out.timing.push(row);
  for (const t of [q, kc, vc, kn, vn, lens]) b.disposeTensor(t);
}
if (process.env.OUT) writeFileSync(`${process.env.OUT}/kv-node.json`, JSON.stringify(out, null, 1));
await b.dispose();
