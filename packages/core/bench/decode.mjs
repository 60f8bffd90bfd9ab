// KV-cache decode on the CPU engine against a copy loop over the same bytes, in the same run:
// `pnpm --filter @fa/core bench:decode` (after a build). Appends a dated section to
// BENCHMARKS.md unless FA_BENCH_NO_WRITE=1.
//
// Decode step: Tq = 1, one appended token, H query heads over Hkv kv heads, D = 128, a paged cache
// (blocks of 256, shuffled table) or a contiguous one. The attention reads every cached K and V
// row of every sequence once: bytes = 2·Σlen·Hkv·D·bytesPerElement (+ q, negligible).
// Peers, on the same cache buffers, with the same number of worker threads (2):
//   copy loop  a JavaScript loop `dst[i] = src[i]` over each cached row, walked through the same
//              block table, into a small per-worker buffer (so the stores stay in cache: the loop
//              measures what reading those bytes costs plain JavaScript);
//   memcpy     the same walk with TypedArray.prototype.set (the runtime's memcpy).
// Each element type (Float32Array, Uint16Array) gets its own copy workers, so that the copy loop's
// element accesses are compiled for that one type: workers that had run the f32 rows first made
// the 16-bit rows' loop polymorphic and ~15–20 % slower, which flattered the 16-bit ratios.
// Calls alternate (engine, copy, memcpy) and each figure is the best of FA_BENCH_REPS (default 7).
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { createCpuBackend, describeKVCacheProblem, zeros } from '../dist/index.js';

const env = process.env;
const reps = Number(env.FA_BENCH_REPS ?? 7);
const threads = Number(env.FA_BENCH_THREADS ?? 2);
const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const sh = (cmd, args) => {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8' }).trim();
  } catch {
    return '';
  }
};

const SHAPES = (env.FA_BENCH_SHAPES ?? 'B1:T32768:H32:K8:paged256:f32,B8:T4096:H32:K8:paged256:f32,B8:T4096:H32:K8:contig:f32,B8:T4096:H8:K8:paged256:f32,B8:T4096:H32:K8:paged256:bf16,B8:T4096:H32:K8:paged256:f16')
  .split(',')
  .map((s) => {
    const f = Object.fromEntries(s.split(':').map((x) => [x.replace(/[0-9]+$/, ''), x.match(/[0-9]+$/)?.[0]]));
    const dtype = s.split(':').pop();
    return { B: Number(f.B), T: Number(f.T), H: Number(f.H), Hkv: Number(f.K), bs: s.includes('paged') ? Number(f.paged) : 0, dtype, D: 128 };
  });

const COPY_WORKER = `
const { parentPort } = require('node:worker_threads');
parentPort.on('message', ({ id, k, v, table, lens, B, maxBlocks, bs, row, w, part, parts, useSet }) => {
  const dst = new (k.constructor)(64 * 1024 / k.BYTES_PER_ELEMENT);
  const n = dst.length;
  let o = 0;
  let sum = 0;
  // rows of every sequence, split into 'parts' contiguous slices of the token range
  for (let b = 0; b < B; b++) {
    const len = lens[b];
    const t0 = Math.floor((len * part) / parts), t1 = Math.floor((len * (part + 1)) / parts);
    for (const src of [k, v]) {
      for (let t = t0; t < t1; t++) {
        const blk = Math.floor(t / bs);
        const s = (table[b * maxBlocks + blk] * bs + (t - blk * bs)) * w;
        if (o + w > n) o = 0;
        if (useSet) dst.set(src.subarray(s, s + w), o);
        else for (let i = 0; i < w; i++) dst[o + i] = src[s + i];
        o += w;
      }
    }
  }
  sum += dst[0];
  parentPort.postMessage({ id, sum });
});`;

function copyPool(n) {
  const workers = Array.from({ length: n }, () => new Worker(COPY_WORKER, { eval: true }));
  let id = 0;
  return {
    run(args) {
      const my = ++id;
      return Promise.all(workers.map((wk, part) => new Promise((res) => {
        const on = (m) => {
          if (m.id === my) {
            wk.off('message', on);
            res(m.sum);
          }
        };
        wk.on('message', on);
        wk.postMessage({ ...args, id: my, part, parts: n });
      })));
    },
    close: () => Promise.all(workers.map((w) => w.terminate())),
  };
}

function makeCase(s) {
  const { B, T, H, Hkv, D, bs, dtype } = s;
  const w = Hkv * D;
  const lens = new Int32Array(B).fill(T - 1);
  let cacheShape, table, maxBlocks;
  if (bs) {
    maxBlocks = Math.ceil(T / bs);
    const nb = B * maxBlocks;
    const perm = Array.from({ length: nb }, (_, i) => i);
    for (let i = nb - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [perm[i], perm[j]] = [perm[j], perm[i]];
    }
    table = Int32Array.from(perm);
    cacheShape = [nb, bs, Hkv, D];
  } else {
    maxBlocks = 1;
    table = Int32Array.from({ length: B }, (_, b) => b);
    cacheShape = [B, T, Hkv, D];
  }
  const kCache = zeros(cacheShape, dtype);
  const vCache = zeros(cacheShape, dtype);
  const fill = (a) => {
    if (a instanceof Float32Array) for (let i = 0; i < a.length; i++) a[i] = Math.sin(i * 0.37);
    else for (let i = 0; i < a.length; i++) a[i] = dtype === 'bf16' ? 0x3f00 + (i % 128) : 0x3800 + (i % 512);
  };
  fill(kCache.data);
  fill(vCache.data);
  const q = zeros([B, 1, H, D], dtype);
  fill(q.data);
  const kNew = zeros([B, 1, Hkv, D], dtype);
  const vNew = zeros([B, 1, Hkv, D], dtype);
  fill(kNew.data);
  fill(vNew.data);
  const opts = { cacheSeqlens: lens, ...(bs ? { blockTable: table } : {}), kNew, vNew };
  const p = describeKVCacheProblem(q, kCache, vCache, opts);
  const bpe = dtype === 'f32' ? 4 : 2;
  const bytes = 2 * p.totalK * Hkv * D * bpe;
  const copyArgs = { k: kCache.data, v: vCache.data, table, lens: Int32Array.from(lens, (l) => l + 1), B, maxBlocks, bs: bs || T, w };
  return { q, kCache, vCache, opts, bytes, copyArgs };
}

const best = (xs) => Math.min(...xs);
const cpuModel = (sh('lscpu', []).match(/Model name:\s*(.+)/) ?? [])[1] ?? os.cpus()[0]?.model ?? 'unknown';
const commit = sh('git', ['rev-parse', '--short', 'HEAD']) || 'unknown';
const load0 = os.loadavg();
const be = await createCpuBackend({ threads });
await be.warm();
const pools = new Map(); // element type → copy workers (see the header)
const poolFor = (a) => {
  if (!pools.has(a.constructor.name)) pools.set(a.constructor.name, copyPool(threads));
  return pools.get(a.constructor.name);
};
const rows = [];
for (const s of SHAPES) {
  const c = makeCase(s);
  const pool = poolFor(c.copyArgs.k);
  const te = [], tc = [], tm = [];
  for (let r = 0; r < reps + 1; r++) {
    let t0 = performance.now();
    await be.forwardWithKVCache(c.q, c.kCache, c.vCache, c.opts);
    const e = performance.now() - t0;
    t0 = performance.now();
    await pool.run({ ...c.copyArgs, useSet: false });
    const cp = performance.now() - t0;
    t0 = performance.now();
    await pool.run({ ...c.copyArgs, useSet: true });
    const mc = performance.now() - t0;
    if (r > 0) {
      te.push(e);
      tc.push(cp);
      tm.push(mc);
    }
  }
  const gbs = (ms) => c.bytes / ms / 1e6;
  const row = { ...s, ms: best(te), copyMs: best(tc), memcpyMs: best(tm), gbs: gbs(best(te)), copyGbs: gbs(best(tc)), memcpyGbs: gbs(best(tm)), load: os.loadavg()[0] };
  rows.push(row);
  console.log(JSON.stringify(row));
}
for (const pool of pools.values()) await pool.close();
await be.dispose();

const load1 = os.loadavg();
const fmt = (x, n = 2) => x.toFixed(n);
const table = [
  '| B | Tk | H/Hkv | cache | dtype | MB read | @fa cpu ms | @fa GB/s | copy loop GB/s | memcpy GB/s | vs copy loop | vs memcpy | load |',
  '|---:|---:|---:|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...rows.map((r) => `| ${r.B} | ${r.T} | ${r.H}/${r.Hkv} | ${r.bs ? `paged ${r.bs}` : 'contiguous'} | ${r.dtype} | ${fmt(r.gbs * r.ms, 0)} | ${fmt(r.ms, 1)} | ${fmt(r.gbs)} | ${fmt(r.copyGbs)} | ${fmt(r.memcpyGbs)} | ${fmt((100 * r.gbs) / r.copyGbs, 0)} % | ${fmt((100 * r.gbs) / r.memcpyGbs, 0)} % | ${fmt(r.load, 1)} |`),
].join('\n');
const section = `
## KV-cache decode (forwardWithKVCache) against a copy loop over the same bytes

Generated by \`pnpm --filter @fa/core bench:decode\` (packages/core/bench/decode.mjs).

- Date: ${new Date().toISOString()}; commit ${commit}; ${cpuModel}, ${os.cpus().length} cores, Node ${process.version}
- Load average (1, 5, 15 min): ${load0.map((x) => x.toFixed(2)).join(', ')} at the start, ${load1.map((x) => x.toFixed(2)).join(', ')} at the end
- One decode step: Tq = 1, one token appended, D = 128, every sequence at length Tk − 1; the engine and
  both peers use ${threads} worker threads on the same SharedArrayBuffer caches; calls alternate; best of ${reps}.
- Bytes = the K and V rows the step must read (2·B·Tk·Hkv·D·bytes per element). "copy loop" is a JavaScript
  \`dst[i] = src[i]\` loop over the same rows (walked through the same block table) into a small buffer;
  "memcpy" the same walk with \`TypedArray.set\`. Each element type has its own copy workers (a
  monomorphic loop).

${table}
`;
if (env.FA_BENCH_NO_WRITE !== '1') {
  const path = here('../BENCHMARKS.md');
  const old = readFileSync(path, 'utf8');
  const marker = '\n## KV-cache decode (forwardWithKVCache)';
  const at = old.indexOf(marker);
  writeFileSync(path, (at >= 0 ? old.slice(0, at) : old.trimEnd() + '\n') + section);
}
console.log(table);
