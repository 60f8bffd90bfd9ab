// The WebGPU engine's KV-cache call on a real GPU (the H200 machine, Dawn + the NVIDIA Vulkan
// driver), one run:
//   1. the KV-cache part of the conformance kit: every KV case (99: 33 templates × f32/f16/bf16)
//      and the decode-loop and bad-argument checks, with host caches and index arrays, then again
//      with device caches (upload) — the gate;
//   2. decode: Tq = 1, one token appended per call, H = 32 over Hkv = 8, D = 128, every sequence at
//      Tk − 1 cached tokens; B = 8, Tk = 32K (and B = 1, Tk = 32K / 128K; B = 64, Tk = 4K: the
//      issue's shapes); f32 and packed f16 (and bf16), paged (blocks of 256, shuffled table) and
//      contiguous; caches, q, kNew/vNew and index tensors on the device; wall time per call over
//      back-to-back calls ended by one queue drain (what a decode loop sees);
//   3. the peer, on the same adapter in the same run: a plain WGSL copy kernel (vec4<u32>, grid-
//      stride) copying the same K and V cache bytes into a second buffer; its bandwidth counts
//      bytes read + bytes written. Target (issue 12): decode ≥ 60 % of it at B = 8, Tk = 32K.
// Writes $OUT/kv.json and $OUT/kv.log; prints the table last.
// FA_BENCH_SMALL=1 (the default without $OUT): a dry run on a software driver with tiny sizes.
// FA_BENCH_SKIP=kit,decode skips parts.
//
// Run (the lead, on the device machine; from the repository root here):
//   pnpm build && ../shared/device/prepare.sh --webgpu --run packages/webgpu/bench/h200-kv.mjs
//   then on the GPU machine: source .fa-device/on-device.sh && node .fa-device/run/h200-kv.mjs
import { appendFileSync, writeFileSync } from 'node:fs';
import { zeros } from '@fa/core';
import { formatSummary, runConformance } from '@fa/core/testing';
import { createWebGPUBackend } from '@fa/webgpu';

const OUT = process.env.OUT ?? '/tmp';
const SMALL = process.env.FA_BENCH_SMALL === '1' || (process.env.FA_BENCH_SMALL === undefined && !process.env.OUT);
const SKIP = new Set((process.env.FA_BENCH_SKIP ?? '').split(',').filter(Boolean));
const LOG = `${OUT}/kv.log`;
writeFileSync(LOG, '');
const log = (...a) => {
  const line = a.join(' ');
  console.log(line);
  appendFileSync(LOG, line + '\n');
};
const results = { date: new Date().toISOString(), small: SMALL, device: null, kit: {}, decode: [], copy: [], errors: [] };
const save = () => writeFileSync(`${OUT}/kv.json`, JSON.stringify(results, null, 1));

const be = await createWebGPUBackend({});
results.device = be.device;
log(`adapter: ${be.device}; small=${SMALL}`);

// ---------------------------------------------------------------- 1. the kit
if (!SKIP.has('kit')) {
  for (const upload of [false, true]) {
    const t0 = performance.now();
    const s = await runConformance(be, { cases: [], kvCache: true, upload, quick: SMALL });
    const line = `${formatSummary(s)} (${upload ? 'device caches' : 'host caches'})`;
    results.kit[upload ? 'device' : 'host'] = { summary: line, failures: s.failures, seconds: (performance.now() - t0) / 1000 };
    log(line);
    for (const f of s.failures.slice(0, 10)) log('  ' + f.message.split('\n').slice(0, 4).join(' | '));
    save();
  }
}

// ---------------------------------------------------------------- 2–3. decode and the copy peer
const dev = be.gpuDevice;
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

/** Seconds per copy of `src` (a GPU buffer of `bytes`) into a fresh buffer, best of a few timed batches. */
async function copySeconds(src, bytes) {
  const n = Math.floor(bytes / 16);
  const dst = dev.createBuffer({ size: n * 16, usage: 0x80 });
  const groups = Math.min(65535, Math.ceil(n / 256));
  const ub = dev.createBuffer({ size: 16, usage: 0x40 | 0x08 });
  dev.queue.writeBuffer(ub, 0, new Uint32Array([n, groups * 256, 0, 0]));
  const bg = dev.createBindGroup({ layout: copyPipe.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: ub } }, { binding: 1, resource: { buffer: src, size: n * 16 } }, { binding: 2, resource: { buffer: dst } }] });
  const run = (k) => {
    const enc = dev.createCommandEncoder();
    for (let i = 0; i < k; i++) {
      const pass = enc.beginComputePass();
      pass.setPipeline(copyPipe);
      pass.setBindGroup(0, bg);
      pass.dispatchWorkgroups(groups);
      pass.end();
    }
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
  dst.destroy();
  ub.destroy();
  return best;
}

function fill16(a, seed) {
  let s = seed >>> 0 || 1;
  for (let i = 0; i < a.length; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    a[i] = a instanceof Float32Array ? (s / 4294967296 - 0.5) * 2 : 0x3800 + (s % 1024);
  }
}

async function decodeCase({ B, T, H, Hkv, D, bs, dtype }) {
  const bpe = dtype === 'f32' ? 4 : 2;
  const lens = new Int32Array(B).fill(T - 1);
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
  const q = await be.upload(host([B, 1, H, D], 3));
  const kn = await be.upload(host([B, 1, Hkv, D], 4));
  const vn = await be.upload(host([B, 1, Hkv, D], 5));
  const li = await be.uploadIndex(lens);
  const ti = bs ? await be.uploadIndex(table, [B, maxBlocks]) : undefined;
  const opts = { cacheSeqlens: li, ...(ti ? { blockTable: ti } : {}), kNew: kn, vNew: vn };
  const call = async () => {
    const r = await be.forwardWithKVCache(q, kc, vc, opts);
    be.disposeTensor(r.out);
    be.disposeTensor(r.lse);
  };
  await call();
  await be.sync();
  const reps = SMALL ? 3 : 50;
  let best = Infinity;
  for (let t = 0; t < 3; t++) {
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) await call();
    await be.sync();
    best = Math.min(best, (performance.now() - t0) / 1000 / reps);
  }
  const bytes = 2 * B * T * Hkv * D * bpe; // the K and V rows one step reads (T − 1 cached + 1 new)
  const cacheBytes = shape.reduce((a, b) => a * b, 1) * bpe;
  const copyS = await copySeconds(kc.handle.buffer, cacheBytes);
  const row = {
    B, T, H, Hkv, D, dtype, cache: bs ? `paged ${bs}` : 'contiguous',
    us: best * 1e6, gbs: bytes / best / 1e9,
    copyGbs: (2 * cacheBytes) / copyS / 1e9,
  };
  row.ratio = row.gbs / row.copyGbs;
  for (const t of [kc, vc, q, kn, vn, li, ti]) if (t) be.disposeTensor(t);
  return row;
}

if (!SKIP.has('decode')) {
  const shapes = SMALL
    ? [{ B: 2, T: 512, H: 4, Hkv: 2, D: 64, bs: 64, dtype: 'f32' }, { B: 2, T: 512, H: 4, Hkv: 2, D: 64, bs: 0, dtype: 'f16' }]
    : [
        ...['f32', 'f16', 'bf16'].flatMap((dtype) => [256, 0].map((bs) => ({ B: 8, T: 32768, H: 32, Hkv: 8, D: 128, bs, dtype }))),
        { B: 1, T: 32768, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16' },
        { B: 64, T: 4096, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16' },
        { B: 1, T: 131072, H: 32, Hkv: 8, D: 128, bs: 256, dtype: 'bf16' },
        { B: 8, T: 32768, H: 32, Hkv: 8, D: 128, bs: 64, dtype: 'bf16' },
      ];
  for (const s of shapes) {
    try {
      const r = await decodeCase(s);
      results.decode.push(r);
      log(JSON.stringify(r));
    } catch (e) {
      results.errors.push(`${JSON.stringify(s)}: ${e.message}`);
      log(`decode ${JSON.stringify(s)} failed: ${e.message}`);
    }
    save();
  }
  log('');
  log('| B | Tk | H/Hkv | cache | dtype | µs/call | GB/s read | copy GB/s (r+w) | decode / copy |');
  log('|---:|---:|---:|:---|:---|---:|---:|---:|---:|');
  for (const r of results.decode) log(`| ${r.B} | ${r.T} | ${r.H}/${r.Hkv} | ${r.cache} | ${r.dtype} | ${r.us.toFixed(0)} | ${r.gbs.toFixed(1)} | ${r.copyGbs.toFixed(1)} | ${(100 * r.ratio).toFixed(0)} % |`);
}
save();
await be.dispose();
