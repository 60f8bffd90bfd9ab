// The WebGPU engine's KV-cache call on a real GPU (the H200 machine, Dawn + the NVIDIA Vulkan
// driver), one run:
//   1. the KV-cache part of the conformance kit: every KV case (99: 33 templates × f32/f16/bf16)
//      and the decode-loop and bad-argument checks, with host caches and index arrays, then again
//      with device caches (upload) — the gate; then once more with device caches on the tiled
//      kernel (the rule sends every kit case to the decode kernel);
//   2. decode: Tq = 1, one token appended per call, H = 32 over Hkv = 8, D = 128, every sequence at
//      Tk − 1 cached tokens; B = 8, Tk = 32K (and B = 1, Tk = 32K / 128K; B = 64, Tk = 4K: the
//      issue's shapes); f32 and packed f16 (and bf16), paged (blocks of 256, shuffled table) and
//      contiguous; caches, q, kNew/vNew and index tensors on the device; wall time per call over
//      back-to-back calls ended by one queue drain (what a decode loop sees), and the GPU time of
//      each pass (append, attend, combine) from timestamp queries where the adapter has them;
//      the default kernel (decode) and the tiled one side by side; a small sweep of the decode
//      kernel's split target and keys in flight; Tq = 2, 4, 8 (speculative) on both kernels; the
//      per-call time of a tiny problem (host work);
//   3. the peer, on the same adapter in the same run: a plain WGSL copy kernel (vec4<u32>, grid-
//      stride) copying the same K and V cache bytes into a second buffer; its bandwidth counts
//      bytes read + bytes written. Target (issue 12): decode ≥ 60 % of it at B = 8, Tk = 32K.
// Writes $OUT/kv.json and $OUT/kv.log; prints the tables last.
// FA_BENCH_SMALL=1 (the default without $OUT): a dry run on a software driver with tiny sizes.
//
// --variants (issue 12): instead of the above, the decode kernel's variants (VARIANTS below: 8-byte
// chunks for 16-bit rows, q in workgroup memory, lazy rescale, keys per step) on B = 8, Tk = 32K
// and B = 1, Tk = 32K / 128K, f32 and packed f16, each timed alternately with the copy kernel
// (GPU time of both from timestamps, rounds in alternating order); the split target swept on each
// shape's fastest variant; then the KV kit with device caches on every variant (fastest first)
// and with host caches on the fastest — so whichever becomes the default was checked on this
// adapter. Writes $OUT/kv-variants.{json,log}; small by default on CPU adapters only. Timing stops
// starting shapes after FA_BENCH_BUDGET_S (default 160 here), the kit 50 s later (fastest
// variants first); FA_VARIANTS=lazy,c8,… times only those (and base).
// --variants4 (issue 12, round 4): the same for VARIANTS4 in h200-kv-variants.mjs (loads in flight:
// prefetch, table lookups ahead, the spread softmax, rows and threads per workgroup) beside base
// and KV-3's best, on B = 8, Tk = 32K and B = 1, Tk = 128K, f32 and f16; then the KV kit (device
// caches) on the two fastest new variants. Writes $OUT/kv-variants4.{json,log}. ~3 minutes:
//   source .fa-device/on-device.sh && OUT=$OUT node .fa-device/run/h200-kv.mjs --variants4
// Locally (lavapipe) it runs small; FA_BENCH_CODEGEN=specialised forces the specialised kernels
// (the ones real GPUs run; slow to compile here, so with FA_BENCH_SKIP=kit).
//   on the GPU machine, after scripts/device-verify.sh --prepare:
//   source .fa-device/on-device.sh && node .fa-device/run/h200-kv.mjs --variants
// FA_BENCH_SKIP=kit,decode,sweep,tq skips parts. FA_BENCH_BUDGET_S (default 150) stops the
// optional parts (sweep, Tq, the later shapes) once the run has taken that long.
//
// Run (from the repository root here):
//   pnpm build && bash ../shared/device/prepare.sh --webgpu --run packages/webgpu/bench/h200-kv.mjs
//   then on the GPU machine: source .fa-device/on-device.sh && OUT=$OUT node .fa-device/run/h200-kv.mjs
import { appendFileSync, writeFileSync } from 'node:fs';
import { formatSummary, runConformance } from '@fa/core/testing';
import { createWebGPUBackend } from '@fa/webgpu';
import { create } from 'webgpu';

const OUT = process.env.OUT ?? '/tmp';
const VARIANTS4 = process.argv.includes('--variants4');
const VARIANTS = VARIANTS4 || process.argv.includes('--variants');
let SMALL = process.env.FA_BENCH_SMALL === '1' || (process.env.FA_BENCH_SMALL === undefined && !process.env.OUT);
const SKIP = new Set((process.env.FA_BENCH_SKIP ?? '').split(',').filter(Boolean));
const BUDGET_S = Number(process.env.FA_BENCH_BUDGET_S ?? 150);
const T0 = performance.now();
const elapsed = () => (performance.now() - T0) / 1000;
const NAME = VARIANTS4 ? 'kv-variants4' : VARIANTS ? 'kv-variants' : 'kv';
const LOG = `${OUT}/${NAME}.log`;
writeFileSync(LOG, '');
const log = (...a) => {
  const line = a.join(' ');
  console.log(line);
  appendFileSync(LOG, line + '\n');
};
const results = { date: new Date().toISOString(), small: SMALL, device: null, features: [], kit: {}, decode: [], sweep: [], tq: [], overhead: null, errors: [] };
const save = () => writeFileSync(`${OUT}/${NAME}.json`, JSON.stringify(results, null, 1));

// ---------------------------------------------------------------- the device, with timestamps
// Our own device (the backend takes it as given), with timestamp-query where the adapter has it
// and unquantised timestamps; a proxy adds timestampWrites to every compute pass while profiling.
const gpu = create(['disable-dawn-features=timestamp_quantization']);
const adapter = await gpu.requestAdapter();
const features = ['subgroups', 'shader-f16', 'timestamp-query'].filter((f) => adapter.features.has(f));
const limits = {};
for (const k of ['maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupStorageSize', 'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX', 'maxComputeWorkgroupsPerDimension', 'maxStorageBuffersPerShaderStage']) limits[k] = adapter.limits[k];
const dev = await adapter.requestDevice({ requiredFeatures: features, requiredLimits: limits });
const TS = features.includes('timestamp-query');
let profiling = null; // { qs, labels }
const MAX_Q = 4096;
const wrapEncoder = (enc) =>
  new Proxy(enc, {
    get(t, k) {
      if (k === 'beginComputePass')
        return (d = {}) => {
          if (!profiling || 2 * profiling.labels.length + 2 > MAX_Q) return t.beginComputePass(d);
          const i = profiling.labels.length;
          profiling.labels.push(d.label ?? '?');
          return t.beginComputePass({ ...d, timestampWrites: { querySet: profiling.qs, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 } });
        };
      const v = t[k];
      return typeof v === 'function' ? v.bind(t) : v;
    },
  });
const pdev = new Proxy(dev, {
  get(t, k) {
    if (k === 'createCommandEncoder') return (d) => wrapEncoder(t.createCommandEncoder(d));
    const v = t[k];
    return typeof v === 'function' ? v.bind(t) : v;
  },
});
const qset = TS ? dev.createQuerySet({ type: 'timestamp', count: MAX_Q }) : null;

/** Runs `body` with every compute pass timed; returns µs per label per call (median over calls). */
async function profile(calls, body) {
  if (!TS) return null;
  profiling = { qs: qset, labels: [] };
  for (let i = 0; i < calls; i++) await body();
  const labels = profiling.labels;
  profiling = null;
  const n = labels.length;
  const rb = dev.createBuffer({ size: 16 * n, usage: 0x200 | 0x4 });
  const mb = dev.createBuffer({ size: 16 * n, usage: 0x1 | 0x8 });
  const enc = dev.createCommandEncoder();
  enc.resolveQuerySet(qset, 0, 2 * n, rb, 0);
  enc.copyBufferToBuffer(rb, 0, mb, 0, 16 * n);
  dev.queue.submit([enc.finish()]);
  await mb.mapAsync(1);
  const ts = new BigInt64Array(mb.getMappedRange().slice(0));
  mb.unmap();
  rb.destroy();
  mb.destroy();
  const by = {};
  for (let i = 0; i < n; i++) (by[labels[i]] ??= []).push(Number(ts[2 * i + 1] - ts[2 * i]) / 1000);
  const med = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const out = {};
  let total = 0;
  for (const [k, v] of Object.entries(by)) {
    out[k] = med(v);
    total += out[k];
  }
  out.total = total;
  return out;
}

const be = await createWebGPUBackend({ device: pdev });
// --variants: full sizes on any real GPU (whether or not $OUT reached this process)
if (VARIANTS && process.env.FA_BENCH_SMALL === undefined) SMALL = be.generic;
results.small = SMALL;
results.device = be.device;
results.features = features;
log(`adapter: ${be.device}; features ${features.join(', ')}; generic=${be.generic}; small=${SMALL}`);
const variant = (o) => createWebGPUBackend({ device: pdev, ...(process.env.FA_BENCH_CODEGEN ? { codegen: process.env.FA_BENCH_CODEGEN } : {}), ...o });

// ---------------------------------------------------------------- 1. the kit (the gate)
if (!SKIP.has('kit') && !VARIANTS) {
  const forced = await variant({ kvKernel: 'tiled' });
  for (const [name, b, upload] of [['host caches', be, false], ['device caches', be, true], ['device caches, tiled kernel forced', forced, true]]) {
    const t0 = performance.now();
    const s = await runConformance(b, { cases: [], kvCache: true, upload, quick: SMALL });
    const line = `${formatSummary(s)} (${name})`;
    results.kit[name] = { summary: line, failures: s.failures, seconds: (performance.now() - t0) / 1000 };
    log(line);
    for (const f of s.failures.slice(0, 10)) log('  ' + f.message.split('\n').slice(0, 4).join(' | '));
    save();
  }
  await forced.dispose();
}

// ---------------------------------------------------------------- 2–3. decode and the copy peer
const COPY_WGSL = /* wgsl */ `
struct N { n: u32, stride: u32, a: u32, b: u32 }
@group(0) @binding(0) var<uniform> P: N;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  for (var i = gid.x; i < P.n; i = i + P.stride) { dst[i] = src[i]; }
}`;
const copyPipe = dev.createComputePipeline({ layout: 'auto', compute: { module: dev.createShaderModule({ code: COPY_WGSL }), entryPoint: 'main' } });

/**
 * The copy peer: `src` (a GPU buffer of `bytes`) into a fresh buffer, 16 bytes a thread in a
 * grid-stride loop. `encode(enc, label)` adds one pass to a command encoder; `destroy()` frees it.
 */
function copyPass(src, bytes) {
  const n = Math.floor(bytes / 16);
  const dst = dev.createBuffer({ size: n * 16, usage: 0x80 });
  const groups = Math.min(65535, Math.ceil(n / 256));
  const ub = dev.createBuffer({ size: 16, usage: 0x40 | 0x08 });
  dev.queue.writeBuffer(ub, 0, new Uint32Array([n, groups * 256, 0, 0]));
  const bg = dev.createBindGroup({ layout: copyPipe.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: ub } }, { binding: 1, resource: { buffer: src, size: n * 16 } }, { binding: 2, resource: { buffer: dst } }] });
  return {
    encode(enc, label) {
      const pass = enc.beginComputePass(label ? { label } : {});
      pass.setPipeline(copyPipe);
      pass.setBindGroup(0, bg);
      pass.dispatchWorkgroups(groups);
      pass.end();
    },
    destroy() {
      dst.destroy();
      ub.destroy();
    },
  };
}

/** Seconds per copy of `src` (a GPU buffer of `bytes`) into a fresh buffer, best of a few timed batches. */
async function copySeconds(src, bytes) {
  const copy = copyPass(src, bytes);
  const run = (k) => {
    const enc = dev.createCommandEncoder();
    for (let i = 0; i < k; i++) copy.encode(enc);
    dev.queue.submit([enc.finish()]);
    return dev.queue.onSubmittedWorkDone();
  };
  await run(2);
  let best = Infinity;
  const reps = SMALL ? 2 : 20;
  for (let t = 0; t < 3; t++) {
    const t0 = performance.now();
    await run(reps);
    best = Math.min(best, (performance.now() - t0) / 1000 / reps);
  }
  copy.destroy();
  return best;
}

function fill16(a, seed) {
  let s = seed >>> 0 || 1;
  for (let i = 0; i < a.length; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    a[i] = a instanceof Float32Array ? (s / 4294967296 - 0.5) * 2 : 0x3800 + (s % 1024);
  }
}

/** The device tensors of one decode shape (Tq queries appended per call, lengths T − Tq). */
async function decodeInputs({ B, T, H, Hkv, D, bs, dtype, Tq = 1 }) {
  const lens = new Int32Array(B).fill(T - Tq);
  let shape, table, maxBlocks;
  if (bs) {
    maxBlocks = Math.ceil(T / bs);
    const nb = B * maxBlocks;
    const perm = Array.from({ length: nb }, (_, i) => i);
    for (let i = nb - 1; i > 0; i--) {
      const j = (i * 7919 + 13) % (i + 1);
      [perm[i], perm[j]] = [perm[j], perm[i]];
    }
    table = Int32Array.from(perm);
    shape = [nb, bs, Hkv, D];
  } else {
    shape = [B, T, Hkv, D];
  }
  const host = (s, seed) => {
    const t = { kind: 'host', dtype, shape: s, data: dtype === 'f32' ? new Float32Array(s.reduce((a, b) => a * b, 1)) : new Uint16Array(s.reduce((a, b) => a * b, 1)) };
    fill16(t.data, seed);
    return t;
  };
  const kc = await be.upload(host(shape, 1));
  const vc = await be.upload(host(shape, 2));
  const q = await be.upload(host([B, Tq, H, D], 3));
  const kn = await be.upload(host([B, Tq, Hkv, D], 4));
  const vn = await be.upload(host([B, Tq, Hkv, D], 5));
  const li = await be.uploadIndex(lens);
  const ti = bs ? await be.uploadIndex(table, [B, maxBlocks]) : undefined;
  const opts = { cacheSeqlens: li, ...(ti ? { blockTable: ti } : {}), kNew: kn, vNew: vn, ...(Tq > 1 ? { causal: true } : {}) };
  const cacheBytes = shape.reduce((a, b) => a * b, 1) * (dtype === 'f32' ? 4 : 2);
  return { kc, vc, q, opts, cacheBytes, dispose: () => [kc, vc, q, kn, vn, li, ti].forEach((t) => t && be.disposeTensor(t)) };
}

/** Wall µs per call (best of 3 runs of `reps` back-to-back calls, one drain each) and per-pass GPU µs. */
async function timeCalls(b, x, reps, profiled = SMALL ? 2 : 10) {
  const call = async () => {
    const r = await b.forwardWithKVCache(x.q, x.kc, x.vc, x.opts);
    b.disposeTensor(r.out);
    b.disposeTensor(r.lse);
  };
  await call();
  await b.sync();
  let best = Infinity;
  for (let t = 0; t < 3; t++) {
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) await call();
    await b.sync();
    best = Math.min(best, (performance.now() - t0) / reps);
  }
  const gpuUs = await profile(profiled, call);
  await b.sync();
  return { us: best * 1000, gpu: gpuUs };
}

const fmtGpu = (g) => (g ? Object.entries(g).map(([k, v]) => `${k.replace('kv ', '')} ${v.toFixed(1)}`).join(', ') : 'n/a');

if (VARIANTS) {
  const { runVariants } = await import('./h200-kv-variants.mjs');
  await runVariants({ round4: VARIANTS4, skip: SKIP, be, dev, pdev, variant, profile, copyPass, copySeconds, decodeInputs, timeCalls, fmtGpu, log, save, results, SMALL, elapsed });
  log(`total ${elapsed().toFixed(0)} s`);
  save();
  await be.dispose();
  process.exit(results.errors.length ? 1 : 0);
}

const tiled = await variant({ kvKernel: 'tiled' });
if (!SKIP.has('decode')) {
  const shapes = SMALL
    ? [{ B: 2, T: 512, H: 4, Hkv: 2, D: 64, bs: 64, dtype: 'f32' }, { B: 2, T: 512, H: 4, Hkv: 2, D: 64, bs: 0, dtype: 'f16' }]
    : [
        ...['f32', 'f16', 'bf16'].flatMap((dtype) => [256, 0].map((bs) => ({ B: 8, T: 32768, H: 32, Hkv: 8, D: 128, bs, dtype }))),
        { B: 1, T: 32768, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16' },
        { B: 64, T: 4096, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16' },
        { B: 1, T: 131072, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16' },
        { B: 8, T: 32768, H: 32, Hkv: 8, D: 128, bs: 64, dtype: 'bf16' },
        { B: 1, T: 32768, H: 32, Hkv: 8, D: 128, bs: 0, dtype: 'bf16' },
        { B: 8, T: 32768, H: 32, Hkv: 8, D: 100, bs: 256, dtype: 'f32' },
      ];
  // the split target and keys in flight, on these shapes (index into shapes)
  const sweepOn = SMALL ? [0] : [0, 2, 6, 8];
  const sweep = SMALL
    ? [{ kvTargetWorkgroups: 64 }]
    : [{ kvKeysPerStep: 1 }, { kvKeysPerStep: 2 }, { kvKeysPerStep: 4 }, { kvPrefetch: true }, { kvTargetWorkgroups: 512 }, { kvTargetWorkgroups: 2048 }];
  for (const [si, s] of shapes.entries()) {
    if (si > 3 && elapsed() > BUDGET_S) {
      log(`(budget: skipped ${JSON.stringify(s)})`);
      continue;
    }
    try {
      const x = await decodeInputs(s);
      const bytes = 2 * s.B * s.T * s.Hkv * s.D * (s.dtype === 'f32' ? 4 : 2); // K and V rows one step reads
      // the copy just before and just after the decode calls (the GPU's state can drift)
      const copyBefore = (2 * x.cacheBytes) / (await copySeconds(x.kc.handle.buffer, x.cacheBytes)) / 1e9;
      const d = await timeCalls(be, x, SMALL ? 3 : 50);
      const copyAfter = (2 * x.cacheBytes) / (await copySeconds(x.kc.handle.buffer, x.cacheBytes)) / 1e9;
      const copyGbs = (copyBefore + copyAfter) / 2;
      const row = { ...s, cache: s.bs ? `paged ${s.bs}` : 'contiguous', copyGbs, copyBefore, copyAfter, plan: be.lastKVPlan };
      Object.assign(row, { us: d.us, gbs: bytes / d.us / 1e3, gpu: d.gpu, ratio: bytes / d.us / 1e3 / copyGbs });
      if (d.gpu) row.ratioGpu = bytes / d.gpu.total / 1e3 / copyGbs;
      const t = await timeCalls(tiled, x, SMALL ? 2 : 5);
      Object.assign(row, { tiledUs: t.us, tiledGpu: t.gpu });
      results.decode.push(row);
      log(`${JSON.stringify(s)}: decode ${d.us.toFixed(0)} µs (${row.gbs.toFixed(0)} GB/s, ${(100 * row.ratio).toFixed(0)} % of copy ${copyGbs.toFixed(0)}); GPU µs: ${fmtGpu(d.gpu)}; tiled ${t.us.toFixed(0)} µs, GPU: ${fmtGpu(t.gpu)}`);
      if (sweepOn.includes(si) && !SKIP.has('sweep') && elapsed() < BUDGET_S) {
        for (const o of sweep) {
          const b = await variant(o);
          const r = await timeCalls(b, x, SMALL ? 2 : 30);
          const e = { shape: s, opts: o, us: r.us, gpu: r.gpu, gbs: bytes / r.us / 1e3, plan: b.lastKVPlan };
          await b.dispose();
          results.sweep.push(e);
          log(`  sweep ${JSON.stringify(o)}: ${r.us.toFixed(0)} µs (${e.gbs.toFixed(0)} GB/s); GPU µs: ${fmtGpu(r.gpu)}`);
        }
      }
      x.dispose();
    } catch (e) {
      results.errors.push(`${JSON.stringify(s)}: ${e.message}`);
      log(`decode ${JSON.stringify(s)} failed: ${e.message}`);
    }
    save();
  }
}

// Tq > 1 (speculative verification, chunked prefill): rows per kv head 8 … 256 on both kernels
if (!SKIP.has('tq') && elapsed() < BUDGET_S) {
  const forced = await variant({ kvKernel: 'decode' });
  for (const Tq of SMALL ? [2, 8] : [2, 4, 8, 16, 32, 64]) {
    if (elapsed() > BUDGET_S + 15) break;
    const s = SMALL ? { B: 2, T: 512, H: 4, Hkv: 2, D: 64, bs: 64, dtype: 'bf16', Tq } : { B: 8, T: 32768, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16', Tq };
    try {
      const x = await decodeInputs(s);
      const bytes = 2 * s.B * s.T * s.Hkv * s.D * 2;
      const r = { ...s };
      const reps = SMALL ? 2 : Tq >= 16 ? 2 : 10;
      for (const [name, b] of [['auto', be], ['decode', forced], ['tiled', tiled], ['auto2', be]]) {
        const m = await timeCalls(b, x, reps, SMALL ? 2 : Tq >= 16 ? 2 : 5);
        r[name] = { us: m.us, gpu: m.gpu, gbs: bytes / m.us / 1e3, kernel: b.lastKVPlan?.kernel };
      }
      results.tq.push(r);
      log(`Tq ${Tq} (rows/kv head ${(s.H / s.Hkv) * Tq}): auto ${r.auto.us.toFixed(0)} µs (${r.auto.kernel}; again ${r.auto2.us.toFixed(0)}), decode ${r.decode.us.toFixed(0)} µs (GPU ${fmtGpu(r.decode.gpu)}), tiled ${r.tiled.us.toFixed(0)} µs (GPU ${fmtGpu(r.tiled.gpu)})`);
      x.dispose();
    } catch (e) {
      results.errors.push(`Tq ${Tq}: ${e.message}`);
      log(`Tq ${Tq} failed: ${e.message}`);
    }
    save();
  }
  await forced.dispose();
}

// per-call time of a tiny problem: the host's share of a call, and what a few Dawn calls cost
{
  const x = await decodeInputs({ B: 1, T: 256, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16' });
  const m = await timeCalls(be, x, SMALL ? 5 : 200);
  const n = SMALL ? 20 : 500;
  const per = async (f) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await f();
    return ((performance.now() - t0) / n) * 1000;
  };
  const host = {
    callResolves: await per(async () => {
      const r = await be.forwardWithKVCache(x.q, x.kc, x.vc, x.opts);
      be.disposeTensor(r.out);
      be.disposeTensor(r.lse);
    }),
    errorScopes: await per(async () => {
      dev.pushErrorScope('validation');
      dev.pushErrorScope('out-of-memory');
      await dev.popErrorScope();
      await dev.popErrorScope();
    }),
    tenBuffers: await per(async () => {
      const bs = Array.from({ length: 10 }, () => dev.createBuffer({ size: 4096, usage: 0x80 | 0x8 }));
      for (const b of bs) b.destroy();
    }),
    emptySubmit: await per(async () => dev.queue.submit([dev.createCommandEncoder().finish()])),
  };
  await be.sync();
  results.overhead = { ...m, host };
  log(`tiny call (B 1, Tk 256): ${m.us.toFixed(1)} µs per call wall; GPU µs: ${fmtGpu(m.gpu)}; host µs: ${Object.entries(host).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(', ')}`);
  x.dispose();
}
await tiled.dispose();

log('');
log(`| B | Tk | D | cache | dtype | µs/call | GB/s read | GPU µs (append + decode + combine) | copy GB/s (r+w; before / after) | decode / copy (wall) | (GPU) | tiled µs/call |`);
log('|---:|---:|---:|:---|:---|---:|---:|:---|---:|---:|---:|---:|');
for (const r of results.decode) {
  const g = r.gpu ? `${(r.gpu['kv append'] ?? 0).toFixed(1)} + ${(r.gpu['kv decode'] ?? r.gpu['kv attend'] ?? 0).toFixed(1)} + ${(r.gpu['kv combine'] ?? 0).toFixed(1)}` : 'n/a';
  log(`| ${r.B} | ${r.T} | ${r.D} | ${r.cache} | ${r.dtype} | ${r.us.toFixed(0)} | ${r.gbs.toFixed(1)} | ${g} | ${r.copyGbs.toFixed(0)} (${r.copyBefore.toFixed(0)} / ${r.copyAfter.toFixed(0)}) | ${(100 * r.ratio).toFixed(0)} % | ${r.ratioGpu ? (100 * r.ratioGpu).toFixed(0) + ' %' : ''} | ${r.tiledUs.toFixed(0)} |`);
}
if (results.tq.length) {
  log('');
  log('| Tq | rows / kv head | auto (kernel) µs | decode µs | tiled µs |');
  log('|---:|---:|---:|---:|---:|');
  for (const r of results.tq) log(`| ${r.Tq} | ${(r.H / r.Hkv) * r.Tq} | ${r.auto.us.toFixed(0)} (${r.auto.kernel}) | ${r.decode.us.toFixed(0)} | ${r.tiled.us.toFixed(0)} |`);
}
log(`total ${elapsed().toFixed(0)} s`);
save();
await be.dispose();
