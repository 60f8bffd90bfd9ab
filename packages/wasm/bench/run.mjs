#!/usr/bin/env node
/**
 * @fa/wasm against its CPU peers, in one process, alternating calls on the same inputs:
 *   - onnxruntime-node 1.30, CPU execution provider, its com.microsoft.MultiHeadAttention
 *     (bench/models/, made by make-models.py), 2 intra-op threads;
 *   - onnxruntime-web 1.30, ORT's own WebAssembly build (SIMD, 2 threads) running the same models:
 *     the peer with the same instruction set as ours;
 *   - tfjs-backend-wasm 4.22 (naive attention: matMul, softmax, matMul; its SIMD build);
 *   - @fa/core's TypeScript cpu engine (2 worker threads).
 * Forward f32, B = 1, H = 8, D = 64, T from FA_BENCH_T (default 1024,2048,4096), non-causal and
 * causal; then our backward at FA_BENCH_BWD_T (default 2048). FLOPs are DESIGN.md's useful FLOPs
 * (4·B·H·T²·D, half when causal) for every engine, whatever it computes. Each row: the median of
 * FA_BENCH_REPS (default 7) alternating rounds after one warm-up round, each call FA_BENCH_GAP_MS (100)
 * after the previous one (ORT's threads spin after a run); the 1-minute load average
 * before and after.
 *
 * Peers: bash bench/install-peers.sh (never part of the workspace install). A peer that is
 * missing is reported and skipped. Output: one line per row on stdout, JSON in bench/results/,
 * and BENCHMARKS.md rewritten with the tables when the ORT peer ran (FA_BENCH_WRITE=0 leaves it
 * alone).
 */
import { execSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { createCpuBackend, tensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';

const here = fileURLToPath(new URL('.', import.meta.url));

/** The CPU's vendor, family/model and widest vector unit, from /proc/cpuinfo (Linux; else empty). */
function cpuFacts() {
  let info = '';
  try {
    info = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    return 'no /proc/cpuinfo';
  }
  const field = (k) => new RegExp(`^${k}\\s*:\\s*(.*)$`, 'm').exec(info)?.[1]?.trim();
  const flags = ` ${field('flags') ?? ''} `;
  const isa = flags.includes(' avx512f ') ? 'AVX-512' : flags.includes(' avx2 ') ? 'AVX2' : 'no AVX2';
  return `${field('vendor_id') ?? '?'} family ${field('cpu family') ?? '?'} model ${field('model') ?? '?'}, ${isa}${flags.includes(' amx_tile ') ? ', AMX' : ''}`;
}
const peers = createRequire(`${here}peers/`);
const require = createRequire(import.meta.url);
const env = process.env;
const Ts = (env.FA_BENCH_T ?? '1024,2048,4096').split(',').map(Number);
const REPS = Number(env.FA_BENCH_REPS ?? 7);
const BWD_T = (env.FA_BENCH_BWD_T ?? '2048').split(',').filter(Boolean).map(Number);
const CAUSAL = (env.FA_BENCH_CAUSAL ?? '0,1').split(',').map((x) => x === '1');
const WITH_CPU = env.FA_BENCH_CPU !== '0';
// ORT's intra-op threads spin for a while after a run (its allow_spinning default), taking the cores
// from whatever runs next in the process: each call waits this long first, so none pays for another
// engine's spinning (without it, the engine after ORT measured ~30 % slower: KERNEL_NOTES.md)
const GAP_MS = Number(env.FA_BENCH_GAP_MS ?? 100);
const gap = () => (GAP_MS > 0 ? new Promise((r) => setTimeout(r, GAP_MS)) : undefined);
const H = 8, D = 64;

const load = () => loadavg()[0].toFixed(2);
const loads = () => loadavg().map((x) => x.toFixed(2)).join(', ');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const gflops = (flops, ms) => flops / ms / 1e6;

function randn(n, seed) {
  const a = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    a[i] = s / 2 ** 32 - 0.5;
  }
  return a;
}

async function loadOrt() {
  try {
    const ort = peers('onnxruntime-node');
    const sessions = {};
    for (const causal of [false, true]) {
      sessions[causal] = await ort.InferenceSession.create(`${here}models/mha-h${H}${causal ? '-causal' : ''}.onnx`, { intraOpNumThreads: 2, interOpNumThreads: 1, executionProviders: ['cpu'], graphOptimizationLevel: 'all' });
    }
    const version = peers('onnxruntime-node/package.json').version;
    return { ort, sessions, version };
  } catch (e) {
    console.error(`bench: onnxruntime-node unavailable (bash bench/install-peers.sh): ${e.message.split('\n')[0]}`);
    return undefined;
  }
}

async function loadOrtWeb() {
  try {
    const ort = require(peers.resolve('onnxruntime-web'));
    ort.env.wasm.numThreads = 2;
    ort.env.logLevel = 'error';
    const sessions = {};
    for (const causal of [false, true]) {
      sessions[causal] = await ort.InferenceSession.create(`${here}models/mha-h${H}${causal ? '-causal' : ''}.onnx`, { executionProviders: ['wasm'], graphOptimizationLevel: 'all' });
    }
    return { ort, sessions, version: ort.env.versions?.web ?? ort.env.versions?.common ?? '?' };
  } catch (e) {
    console.error(`bench: onnxruntime-web unavailable (bash bench/install-peers.sh): ${e.message.split('\n')[0]}`);
    return undefined;
  }
}

async function loadTfjsWasm() {
  try {
    const tf = peers('@tensorflow/tfjs-core');
    const wasm = peers('@tensorflow/tfjs-backend-wasm');
    const dir = `${peers.resolve('@tensorflow/tfjs-backend-wasm/package.json').replace(/package\.json$/, '')}dist/`;
    wasm.setWasmPaths(dir);
    await tf.setBackend('wasm');
    await tf.ready();
    return { tf, version: peers('@tensorflow/tfjs-backend-wasm/package.json').version };
  } catch (e) {
    console.error(`bench: tfjs-backend-wasm unavailable: ${e.message.split('\n')[0]}`);
    return undefined;
  }
}

/** Naive attention in tfjs: softmax(Q Kᵀ · scale [+ causal mask]) V, heads as a batch. */
function tfjsAttention(tf, q, k, v, T, causal) {
  return tf.tidy(() => {
    const tq = tf.transpose(tf.reshape(q, [T, H, D]), [1, 0, 2]);
    const tk = tf.transpose(tf.reshape(k, [T, H, D]), [1, 0, 2]);
    const tv = tf.transpose(tf.reshape(v, [T, H, D]), [1, 0, 2]);
    let s = tf.mul(tf.matMul(tq, tk, false, true), 1 / Math.sqrt(D));
    if (causal) s = tf.add(s, tf.mul(tf.sub(1, tf.linalg.bandPart(tf.ones([T, T]), -1, 0)), -1e9));
    return tf.matMul(tf.softmax(s), tv);
  });
}

const rows = [];
const ortP = await loadOrt();
const ortW = env.FA_BENCH_ORT_WEB === '0' ? undefined : await loadOrtWeb();
const tfw = await loadTfjsWasm();
const wasm = await createWasmBackend();
await wasm.warm();
// the same engine over the x86-64 build of its kernels (Node on Linux x86-64), when it runs here
const native = env.FA_BENCH_NATIVE === '0' ? undefined : await createWasmBackend({ native: true }).catch((e) => console.error(`bench: native engine unavailable: ${e.message}`));
if (native) await native.warm();
const cpu = WITH_CPU ? await createCpuBackend() : undefined;
if (cpu) await cpu.warm();
const startLoad = load();
const startLoads = loads();
const started = new Date().toISOString();
console.log(`# @fa/wasm benchmark — ${new Date().toISOString().slice(0, 10)}, ${cpus()[0]?.model ?? 'cpu'} ×${cpus().length}, Node ${process.versions.node}`);
console.log(`# ours: ${wasm.device}${native ? `, ${native.device}` : ''}; ORT ${ortP?.version ?? 'missing'} (MultiHeadAttention, 2 intra-op threads); tfjs-backend-wasm ${tfw?.version ?? 'missing'}; load ${startLoad}`);

for (const causal of CAUSAL) {
  for (const T of Ts) {
    const n = T * H * D;
    const qd = randn(n, 1), kd = randn(n, 2), vd = randn(n, 3);
    const q = tensor(qd, [1, T, H, D], 'f32'), k = tensor(kd, [1, T, H, D], 'f32'), v = tensor(vd, [1, T, H, D], 'f32');
    const flops = (4 * H * T * T * D) / (causal ? 2 : 1);
    const engines = [['wasm', () => wasm.forward(q, k, v, { causal })]];
    if (native) engines.push(['native', () => native.forward(q, k, v, { causal })]);
    if (ortP) {
      const mk = (d) => new ortP.ort.Tensor('float32', d, [1, T, H * D]);
      const feeds = { q: mk(qd), k: mk(kd), v: mk(vd) };
      engines.push(['ort', () => ortP.sessions[causal].run(feeds)]);
    }
    if (ortW) {
      const mk = (d) => new ortW.ort.Tensor('float32', d, [1, T, H * D]);
      const feeds = { q: mk(qd), k: mk(kd), v: mk(vd) };
      engines.push(['ort-web', () => ortW.sessions[causal].run(feeds)]);
    }
    if (tfw && T <= Number(env.FA_BENCH_TFJS_MAX_T ?? 2048)) {
      const { tf } = tfw;
      const tq = tf.tensor(qd, [T, H * D]), tk = tf.tensor(kd, [T, H * D]), tv = tf.tensor(vd, [T, H * D]);
      engines.push(['tfjs-wasm', async () => { const o = tfjsAttention(tf, tq, tk, tv, T, causal); await o.data(); o.dispose(); }]);
    }
    if (cpu && T <= 2048) engines.push(['cpu', () => cpu.forward(q, k, v, { causal })]);
    const times = Object.fromEntries(engines.map(([name]) => [name, []]));
    const failed = {}; // a peer that throws (ORT web at T = 4K: its score matrix overflows wasm32 sizes) drops out of the row
    const l0 = load();
    for (let rep = -1; rep < REPS; rep++) {
      for (const [name, run] of engines) {
        if (failed[name]) continue;
        await gap();
        const t0 = performance.now();
        try {
          await run();
        } catch (e) {
          if (name === 'wasm' || name === 'native') throw e;
          failed[name] = String(e?.message ?? e).split('\n')[0].replace(/^.*ERROR_MESSAGE: (\S*\/)?/, '').slice(0, 120);
          continue;
        }
        const ms = performance.now() - t0;
        if (rep >= 0) times[name].push(ms);
      }
    }
    const row = { pass: 'forward', T, causal, load: `${l0}→${load()}`, ms: {}, gflops: {}, failed };
    for (const [name] of engines) {
      if (failed[name]) continue;
      row.ms[name] = median(times[name]);
      row.gflops[name] = gflops(flops, row.ms[name]);
    }
    for (const [name, why] of Object.entries(failed)) console.log(`# ${name} failed at T=${T}${causal ? ' causal' : ''}: ${why}`);
    rows.push(row);
    if (env.FA_BENCH_VERBOSE) console.log(JSON.stringify(times));
    const r = row.gflops;
    console.log(`forward T=${T} ${causal ? 'causal' : 'full  '} | native ${r.native?.toFixed(1) ?? '-'} | native/ort ${r.native && r.ort ? (r.native / r.ort).toFixed(2) : '-'} | wasm ${r.wasm.toFixed(1)} | ort ${r.ort?.toFixed(1) ?? '-'} | ort-web ${r['ort-web']?.toFixed(1) ?? '-'} | tfjs-wasm ${r['tfjs-wasm']?.toFixed(1) ?? '-'} | cpu ${r.cpu?.toFixed(1) ?? '-'} GFLOP/s | wasm/ort ${r.ort ? (r.wasm / r.ort).toFixed(2) : '-'} | wasm/ort-web ${r['ort-web'] ? (r.wasm / r['ort-web']).toFixed(2) : '-'} | load ${row.load}`);
  }
}

for (const T of BWD_T) {
  for (const causal of CAUSAL) {
    const n = T * H * D;
    const q = tensor(randn(n, 1), [1, T, H, D], 'f32'), k = tensor(randn(n, 2), [1, T, H, D], 'f32'), v = tensor(randn(n, 3), [1, T, H, D], 'f32'), dO = tensor(randn(n, 4), [1, T, H, D], 'f32');
    const f = await wasm.forward(q, k, v, { causal });
    const flops = (2.5 * 4 * H * T * T * D) / (causal ? 2 : 1);
    const engines = [['wasm', () => wasm.backward(q, k, v, f.out, dO, f.lse, { causal })]];
    if (native) engines.push(['native', () => native.backward(q, k, v, f.out, dO, f.lse, { causal })]);
    if (cpu && T <= 2048) engines.push(['cpu', () => cpu.backward(q, k, v, f.out, dO, f.lse, { causal })]);
    const times = Object.fromEntries(engines.map(([name]) => [name, []]));
    const l0 = load();
    for (let rep = -1; rep < Math.max(3, Math.ceil(REPS / 2)); rep++) {
      for (const [name, run] of engines) {
        await gap();
        const t0 = performance.now();
        await run();
        if (rep >= 0) times[name].push(performance.now() - t0);
      }
    }
    const row = { pass: 'backward', T, causal, load: `${l0}→${load()}`, ms: {}, gflops: {} };
    for (const [name] of engines) {
      row.ms[name] = median(times[name]);
      row.gflops[name] = gflops(flops, row.ms[name]);
    }
    rows.push(row);
    console.log(`backward T=${T} ${causal ? 'causal' : 'full  '} | native ${row.gflops.native?.toFixed(1) ?? '-'} | wasm ${row.gflops.wasm.toFixed(1)} | cpu ${row.gflops.cpu?.toFixed(1) ?? '-'} GFLOP/s | load ${row.load}`);
  }
}

await wasm.dispose();
if (native) await native.dispose();
if (cpu) await cpu.dispose();
mkdirSync(`${here}results`, { recursive: true });
const file = `${here}results/run-${new Date().toISOString().replace(/[:.]/g, '-')}.json`;
writeFileSync(file, JSON.stringify({ date: new Date().toISOString(), node: process.versions.node, cpu: cpus()[0]?.model, device: wasm.device, native: native?.device, ort: ortP?.version, ortWeb: ortW?.version, tfjsWasm: tfw?.version, loadStart: startLoad, loadEnd: load(), rows }, null, 1));
console.log(`# load ${startLoad} → ${load()}; raw: ${file}`);

if (env.FA_BENCH_WRITE !== '0' && !ortP) console.log('# BENCHMARKS.md left as it is: its table needs the ORT peer (bash bench/install-peers.sh)');
if (env.FA_BENCH_WRITE !== '0' && ortP) {
  const git = (c) => { try { return execSync(`git ${c}`, { cwd: here, encoding: 'utf8' }).trim(); } catch { return '?'; } };
  const dirty = git('status --porcelain -- .') ? ' (with uncommitted changes in packages/wasm)' : '';
  const f1 = (x) => (x === undefined ? '–' : x.toFixed(1));
  const ratio = (a, b) => (a === undefined || b === undefined ? '–' : `${(a / b).toFixed(2)}×`);
  const fwd = rows.filter((r) => r.pass === 'forward');
  const bwd = rows.filter((r) => r.pass === 'backward');
  const md = [
    '# @fa/wasm — benchmark against CPU peers',
    '',
    'Generated by `pnpm --filter @fa/wasm bench` (packages/wasm/bench/run.mjs; peers from `bash bench/install-peers.sh`); rerun it to refresh this file.',
    '',
    `- Date: ${started}`,
    `- Commit: ${git('rev-parse --short HEAD')}${dirty}`,
    `- Load average (1, 5, 15 min) when the run started: ${startLoads}; when it ended: ${loads()} (the run itself accounts for ~2)`,
    `- Machine: ${cpus()[0]?.model ?? 'cpu'} (${cpuFacts()}), ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB RAM, Node ${process.versions.node}`,
    `- Engines: backend "wasm", ${wasm.device}; backend "native" (the same engine and kernels compiled for x86-64, its matrix micro-kernels on 512-bit registers), ${native?.device ?? '(did not run)'}; default tiles`,
    `- Peers, same process, same inputs, calls alternating: onnxruntime-node ${ortP?.version ?? '(missing)'} CPU execution provider, \`com.microsoft.MultiHeadAttention\` (bench/models/, \`unidirectional=1\` for causal), 2 intra-op threads; onnxruntime-web ${ortW?.version ?? '(missing)'} (ORT's WebAssembly build, SIMD, 2 threads) on the same models; tfjs-backend-wasm ${tfw?.version ?? '(missing)'} naive attention (matMul, softmax, matMul); @fa/core's TypeScript cpu engine (2 worker threads)`,
    '',
    `Problem: f32, B = 1, H = 8, D = 64, T = Tq = Tk. FLOPs per DESIGN.md for every engine: forward 4·B·H·T²·D, half when causal (the useful work; ORT computes the full matrix and masks it), backward 2.5× forward. Each cell: the median of ${REPS} rounds (forward; backward ${Math.max(3, Math.ceil(REPS / 2))}) after one warm-up round, GFLOP/s; every call starts ${GAP_MS} ms after the previous one ends (ORT's threads spin after a run and would otherwise slow whichever engine comes next).`,
    '',
    '| T | causal | @fa native | ORT MultiHeadAttention (native) | native / ORT | @fa wasm | wasm / ORT | ORT web (WebAssembly) | wasm / ORT web | tfjs-backend-wasm | @fa cpu | load |',
    '|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    ...fwd.map((r) => `| ${r.T} | ${r.causal ? 'yes' : 'no'} | ${f1(r.gflops.native)} | ${f1(r.gflops.ort)} | ${ratio(r.gflops.native, r.gflops.ort)} | ${f1(r.gflops.wasm)} | ${ratio(r.gflops.wasm, r.gflops.ort)} | ${r.failed?.['ort-web'] ? 'fails¹' : f1(r.gflops['ort-web'])} | ${ratio(r.gflops.wasm, r.gflops['ort-web'])} | ${f1(r.gflops['tfjs-wasm'])} | ${f1(r.gflops.cpu)} | ${r.load} |`),
    ...(fwd.some((r) => r.failed?.['ort-web']) ? ['', `¹ ORT web threw: ${fwd.find((r) => r.failed?.['ort-web']).failed['ort-web']} (a size computation overflowed: WebAssembly has a 32-bit address space, and its attention path sizes buffers by T², not checked further). This engine's extra memory is O(T).`] : []),
    '',
    'Backward (no CPU peer has one):',
    '',
    '| T | causal | @fa native bwd | @fa wasm bwd | @fa cpu bwd | load |',
    '|---:|:---:|---:|---:|---:|---|',
    ...bwd.map((r) => `| ${r.T} | ${r.causal ? 'yes' : 'no'} | ${f1(r.gflops.native)} | ${f1(r.gflops.wasm)} | ${f1(r.gflops.cpu)} | ${r.load} |`),
    '',
    '## Reading the ORT column',
    '',
    "On this CPU, ORT's MLAS kernels run AVX-512: ~200 GFLOP/s a core non-causal is ~50 flop/cycle, which only 512-bit fused multiply-adds give. **In Node, the `native` engine is the answer to that column**: the same engine, plans and kernels, compiled for x86-64 with its matrix micro-kernels on 512-bit registers (8×32 blocks, 16 accumulators; AVX2 6×16 on CPUs without AVX-512), picked by the CPU's flags. WebAssembly vectors are 128 bits wide, a quarter of that, and the wasm engine's product kernel already runs at the 128-bit peak (~15 flop/cycle, KERNEL_NOTES.md), so its non-causal ratio is bounded near 0.25–0.3× here. Causal, ORT computes and masks the full matrix while this engine skips masked tiles, so the ratios roughly double. The ORT web column is ORT's own WebAssembly build running the same two models: the same 128-bit instruction set as the wasm engine, so its ratio is the one that compares kernels rather than vector widths (and it is what a browser page would get from ONNX Runtime).",
    '',
  ];
  // this run's part of BENCHMARKS.md ends where the decode benchmark's section (bench:decode) begins
  const path = `${here}../BENCHMARKS.md`;
  let rest = '';
  try {
    const old = readFileSync(path, 'utf8');
    const at = old.indexOf('\n## KV-cache decode');
    if (at >= 0) rest = old.slice(at + 1);
  } catch {
    /* no file yet */
  }
  writeFileSync(path, md.join('\n') + (rest ? `\n${rest}` : ''));
  console.log('# wrote BENCHMARKS.md');
}
