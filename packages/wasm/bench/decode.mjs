#!/usr/bin/env node
/**
 * KV-cache decode on the wasm engine against copy loops over the same bytes, in the same run:
 * `pnpm --filter @fa/wasm bench:decode` (after a build). Writes bench/results/decode-*.json and
 * the "KV-cache decode" section of BENCHMARKS.md (FA_BENCH_WRITE=0 leaves it alone).
 *
 * One decode step: Tq = 1, one token appended, H query heads over Hkv kv heads, D = 128, every
 * sequence at length Tk - 1 so that the step attends to Tk keys; a paged cache (blocks of 256,
 * shuffled table) or a contiguous one, uploaded once (device tensors in the engine's memory:
 * read and appended in place). Bytes = the K and V rows the step reads, 2·B·Tk·Hkv·D·bytes per
 * element; the caches hold exactly Tk rows per sequence, so these are every byte of them.
 * Peers on the same threads (FA_BENCH_THREADS, default 2) over the same bytes:
 *   simd copy   the engine's copyLoop(): a SIMD128 loop of v128 loads and stores (64 bytes an
 *               iteration) over every byte of both caches, into a 64 KiB per-thread buffer;
 *   memory.copy the same walk with memory.copy;
 *   @fa cpu     core's TypeScript engine on the same problem (its host caches in shared memory).
 * FA_BENCH_RELAXED=1 runs the engine's relaxed-SIMD binary (Node 20: sets V8's flag); FA_BENCH_NATIVE=1 the
 * native engine (the kernels and the copy loops compiled for x86-64), into a section of its own
 * (FA_BENCH_NATIVE_LEVEL=x86-64-v3 forces the AVX2 build).
 * Calls alternate (engine, simd copy, memory.copy, cpu) after FA_BENCH_WARMUP (8) warm-up rounds;
 * each figure is the best of FA_BENCH_REPS (9) (the cpu engine's of 3).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { allocHost, createCpuBackend, encode, tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';

const env = process.env;
const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const REPS = Number(env.FA_BENCH_REPS ?? 9);
const WARMUP = Number(env.FA_BENCH_WARMUP ?? 8);
const THREADS = Number(env.FA_BENCH_THREADS ?? 2);
const WITH_CPU = env.FA_BENCH_CPU !== '0';
const SHAPES = (env.FA_BENCH_SHAPES ?? 'B1:T32768:H32:K8:paged256:f32,B1:T32768:H32:K8:paged256:bf16,B1:T32768:H32:K8:paged256:f16,B8:T4096:H32:K8:contig:f32,B8:T4096:H32:K8:paged256:bf16,B8:T4096:H8:K8:paged256:f32')
  .split(',')
  .map((s) => {
    const f = Object.fromEntries(s.split(':').map((x) => [x.replace(/[0-9]+$/, ''), x.match(/[0-9]+$/)?.[0]]));
    return { B: Number(f.B), T: Number(f.T), H: Number(f.H), Hkv: Number(f.K), bs: s.includes('paged') ? Number(f.paged) : 0, dtype: s.split(':').pop(), D: 128 };
  });
const sh = (cmd, args) => {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8' }).trim();
  } catch {
    return '';
  }
};
const load1 = () => loadavg()[0];

function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 2 ** 32 - 0.5;
  };
}

/** Host data of n random values in dtype (shared memory, for the cpu engine's workers). */
function values(n, dtype, next) {
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = next();
  const out = allocHost(dtype, n);
  if (dtype === 'f32') out.set(f);
  else encode(dtype, f, out);
  return out;
}

/** The inputs of one decode step: caches with Tk rows per sequence, Tk - 1 of them cached. */
function inputs(s, seed) {
  const next = rng(seed);
  const w = s.Hkv * s.D;
  const paged = s.bs > 0;
  const blocksPer = paged ? s.T / s.bs : 1;
  const cacheShape = paged ? [s.B * blocksPer, s.bs, s.Hkv, s.D] : [s.B, s.T, s.Hkv, s.D];
  const n = s.B * s.T * w;
  const order = Array.from({ length: s.B * blocksPer }, (_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor((next() + 0.5) * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return {
    q: tensor(values(s.B * s.H * s.D, s.dtype, next), [s.B, 1, s.H, s.D], s.dtype),
    kCache: tensor(values(n, s.dtype, next), cacheShape, s.dtype),
    vCache: tensor(values(n, s.dtype, next), cacheShape, s.dtype),
    kNew: tensor(values(s.B * w, s.dtype, next), [s.B, 1, s.Hkv, s.D], s.dtype),
    vNew: tensor(values(s.B * w, s.dtype, next), [s.B, 1, s.Hkv, s.D], s.dtype),
    cacheSeqlens: new Int32Array(s.B).fill(s.T - 1),
    ...(paged ? { blockTable: Int32Array.from(order) } : {}),
    bytes: 2 * n * (s.dtype === 'f32' ? 4 : 2),
  };
}

async function time(f) {
  const t0 = performance.now();
  await f();
  return (performance.now() - t0) / 1e3;
}

// FA_BENCH_NATIVE=1: the native engine (the same kernels compiled for x86-64; its copy loops too)
const NATIVE = env.FA_BENCH_NATIVE === '1';
const wasm = await createWasmBackend({ threads: THREADS, relaxedSimd: env.FA_BENCH_RELAXED === '1', native: NATIVE, ...(NATIVE && env.FA_BENCH_NATIVE_LEVEL ? { nativeLevel: env.FA_BENCH_NATIVE_LEVEL } : {}) });
await wasm.warm();
const cpu = WITH_CPU ? await createCpuBackend({ threads: THREADS }) : undefined;
const commit = sh('git', ['rev-parse', '--short', 'HEAD']);
const dirty = sh('git', ['status', '--porcelain', '--', '.']) !== '';
const started = { date: new Date().toISOString(), load: loadavg() };
const rows = [];
for (const s of SHAPES) {
  const x = inputs(s, 7 + rows.length);
  const opts = { cacheSeqlens: x.cacheSeqlens, ...(x.blockTable ? { blockTable: x.blockTable } : {}), kNew: x.kNew, vNew: x.vNew };
  const [q, kc, vc, kn, vn] = await Promise.all([x.q, x.kCache, x.vCache, x.kNew, x.vNew].map((t) => wasm.upload(t)));
  const dOpts = { ...opts, kNew: kn, vNew: vn };
  const best = { wasm: Infinity, simd: Infinity, memcpy: Infinity, cpu: Infinity };
  const l0 = load1();
  const step = async () => {
    const r = await wasm.forwardWithKVCache(q, kc, vc, dOpts);
    wasm.disposeTensor(r.out);
    wasm.disposeTensor(r.lse);
  };
  // warm-up: V8 runs new wasm code in its baseline compiler until dynamic tiering has compiled
  // the hot functions with TurboFan, in every worker
  for (let i = 0; i < WARMUP; i++) {
    await step();
    await wasm.copyLoop([kc, vc], 'simd');
    await wasm.copyLoop([kc, vc], 'memcpy');
  }
  for (let r = 0; r < REPS; r++) {
    best.wasm = Math.min(best.wasm, await time(step));
    best.simd = Math.min(best.simd, (await wasm.copyLoop([kc, vc], 'simd')).seconds);
    best.memcpy = Math.min(best.memcpy, (await wasm.copyLoop([kc, vc], 'memcpy')).seconds);
    if (cpu && r < 3) best.cpu = Math.min(best.cpu, await time(() => cpu.forwardWithKVCache(x.q, x.kCache, x.vCache, opts)));
  }
  for (const t of [q, kc, vc, kn, vn]) wasm.disposeTensor(t);
  const gbs = (sec) => x.bytes / sec / 1e9;
  const row = {
    ...s, mb: x.bytes / 1e6, ms: best.wasm * 1e3,
    wasmGBs: gbs(best.wasm), simdGBs: gbs(best.simd), memcpyGBs: gbs(best.memcpy), cpuGBs: cpu ? gbs(best.cpu) : null,
    vsSimd: best.simd / best.wasm, vsMemcpy: best.memcpy / best.wasm, load: [l0, load1()],
  };
  rows.push(row);
  const f = (v) => v.toFixed(2);
  console.log(`B${s.B} T${s.T} H${s.H}/${s.Hkv} ${s.bs ? `paged${s.bs}` : 'contig'} ${s.dtype}: ${f(row.mb)} MB, wasm ${f(row.ms)} ms = ${f(row.wasmGBs)} GB/s; simd copy ${f(row.simdGBs)} (${Math.round(100 * row.vsSimd)} %), memory.copy ${f(row.memcpyGBs)} (${Math.round(100 * row.vsMemcpy)} %)${cpu ? `, @fa cpu ${f(row.cpuGBs)}` : ''}; load ${f(l0)}→${f(load1())}`);
}
await wasm.dispose();
if (cpu) await cpu.dispose();
const ended = { date: new Date().toISOString(), load: loadavg() };
const cpuName = cpus()[0]?.model?.trim() ?? 'unknown CPU';
const machine = `${cpuName}, ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB RAM, Node ${process.version}`;
const result = { started, ended, commit, dirty, machine, engine: wasm.device, threads: THREADS, reps: REPS, rows };
mkdirSync(here('results'), { recursive: true });
writeFileSync(here(`results/decode-${started.date.replace(/[:.]/g, '-')}.json`), JSON.stringify(result, null, 2));

if (env.FA_BENCH_WRITE !== '0') {
  const f2 = (v) => v.toFixed(2);
  const l = (xs) => xs.map((v) => v.toFixed(2)).join(', ');
  const heading = NATIVE ? '## KV-cache decode, native engine' : '## KV-cache decode (';
  const copies = NATIVE
    ? '"simd copy" is the engine\'s `copyLoop()`: csrc/copy.c\'s loop of 16-byte loads and stores (64 bytes an iteration) compiled for x86-64, over the same bytes into a 64 KiB per-thread buffer, on the same 2 worker threads; "memory.copy" the same walk with the C library\'s memcpy; "@fa cpu" core\'s TypeScript engine on the same problem (2 workers).'
    : '"simd copy" is the engine\'s `copyLoop()`, a WebAssembly SIMD128 loop of `v128.load`/`v128.store` (64 bytes an iteration) over the same bytes into a 64 KiB per-thread buffer, on the same 2 worker threads; "memory.copy" the same walk with `memory.copy`; "@fa cpu" core\'s TypeScript engine on the same problem (2 workers).';
  const section = [
    NATIVE ? '## KV-cache decode, native engine (forwardWithKVCache against copy loops over the same bytes)' : '## KV-cache decode (forwardWithKVCache) against copy loops over the same bytes',
    '',
    `Generated by \`${NATIVE ? 'FA_BENCH_NATIVE=1 ' : ''}pnpm --filter @fa/wasm bench:decode\` (packages/wasm/bench/decode.mjs); rerun it to refresh this section.`,
    '',
    `- Date: ${started.date}; commit ${commit}${dirty ? ' (with uncommitted changes in packages/wasm)' : ''}; ${machine}`,
    `- Load average (1, 5, 15 min): ${l(started.load)} at the start, ${l(ended.load)} at the end`,
    `- Engine: ${wasm.device}; one decode step: Tq = 1, one token appended, D = 128, every sequence at length Tk − 1, caches uploaded once (read and appended in place); best of ${REPS}, calls alternating.`,
    `- Bytes = the K and V rows the step reads (2·B·Tk·Hkv·D·bytes per element: every byte of both caches). ${copies}`,
    '',
    `| B | Tk | H/Hkv | cache | dtype | MB read | @fa ${wasm.name} ms | @fa ${wasm.name} GB/s | simd copy GB/s | memory.copy GB/s | vs simd copy | vs memory.copy | @fa cpu GB/s | load |`,
    '|---:|---:|---:|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map((r) => `| ${r.B} | ${r.T} | ${r.H}/${r.Hkv} | ${r.bs ? `paged ${r.bs}` : 'contiguous'} | ${r.dtype} | ${Math.round(r.mb)} | ${r.ms.toFixed(1)} | ${f2(r.wasmGBs)} | ${f2(r.simdGBs)} | ${f2(r.memcpyGBs)} | ${Math.round(100 * r.vsSimd)} % | ${Math.round(100 * r.vsMemcpy)} % | ${r.cpuGBs === null ? '–' : f2(r.cpuGBs)} | ${f2(r.load[0])} |`),
    '',
  ].join('\n');
  const path = here('../BENCHMARKS.md');
  const md = readFileSync(path, 'utf8');
  const start = md.indexOf(heading);
  const next = start < 0 ? -1 : md.indexOf('\n## ', start + 1);
  const notes = start < 0 ? '' : md.slice(start, next < 0 ? undefined : next + 1).split('\n<!-- notes -->\n')[1] ?? '';
  const body = notes ? `${section}\n<!-- notes -->\n${notes}` : section;
  writeFileSync(path, start < 0 ? `${md.trimEnd()}\n\n${body}` : md.slice(0, start) + body + (next < 0 ? '' : md.slice(next + 1)));
}
