/**
 * The model ops' matrix product (`backend.modelOps.gemm`, src/model-ops.ts over csrc/gemm.c) on the
 * native and wasm engines, against onnxruntime-node's CPU MatMul, in one process, on the products
 * of a transformer training step (d_model 256, MLP 1024, 1024 tokens) and a 512³ square:
 *
 *   nt (1024, 768, 256)   x · Wqkvᵀ          nt (1024, 256, 256)   attention out · Woᵀ
 *   nt (1024, 1024, 256)  MLP up             nt (1024, 256, 1024)  MLP down
 *   tn (768, 256, 1024)   a weight gradient (dW = dYᵀ · X)        nn (512, 512, 512)
 *
 * - Ours: GFLOP/s (2·M·N·K) of one synchronous call: native in place on 1 thread for every level
 *   this CPU runs and on 2 threads for the best one (the caller and a helper thread); the
 *   WebAssembly SIMD128 build on 1 thread, copies of a, b into the engine's memory and of c out
 *   included (Node 20's default; FA_BENCH_RELAXED=1 adds relaxed SIMD). Each is compared with ORT
 *   at the same number of threads.
 * - ORT: an ONNX model with one MatMul node per shape, built here (no onnx package needed), both
 *   operands graph inputs (weights change every step of training, so no prepacking), fed in the
 *   layout MatMul takes (op(A) M×K, op(B) K×N: the same products); 1 intra-op thread (ours runs on
 *   one) and 2. Also ORT's Gemm with transA/transB on our layouts, 1 thread.
 * - The TypeScript cpu engine (`cpuModelOps` from @fa/core) on one shape, for reference.
 *
 * Engines alternate, REPS rounds (FA_BENCH_REPS, default 9), after 300 ms of warm-up calls each;
 * in each round an engine makes two calls back to back and the second is timed (as the products
 * of a training step follow each other); the median is reported (and the best). ORT's intra-op threads spin
 * for a while after a run (allow_spinning) and would take the cores from the next engine, so
 * after ORT's 2-thread session the next call waits FA_BENCH_GAP_MS (default 100).
 * Peers: bash bench/install-peers.sh.
 * Prints a markdown table.
 */
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { cpuModelOps, gemmFlops } from '@fa/core';
import { createRng, randomValues } from '@fa/core/testing';
import { createWasmBackend, nativeTarget } from '../dist/index.js';

const here = fileURLToPath(new URL('.', import.meta.url));
const peers = createRequire(`${here}peers/`);
const env = process.env;
const REPS = Number(env.FA_BENCH_REPS ?? 9);
const GAP_MS = Number(env.FA_BENCH_GAP_MS ?? 100);
const gap = () => (GAP_MS > 0 ? new Promise((r) => setTimeout(r, GAP_MS)) : undefined);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const load = () => loadavg().map((x) => x.toFixed(2)).join(', ');

const SHAPES = [
  { name: 'qkv', form: 'nt', M: 1024, N: 768, K: 256 },
  { name: 'attn out', form: 'nt', M: 1024, N: 256, K: 256 },
  { name: 'MLP up', form: 'nt', M: 1024, N: 1024, K: 256 },
  { name: 'MLP down', form: 'nt', M: 1024, N: 256, K: 1024 },
  { name: 'weight grad', form: 'tn', M: 768, N: 256, K: 1024 },
  { name: 'square', form: 'nn', M: 512, N: 512, K: 512 },
];

const randn = (n, seed) => randomValues(createRng(seed), n, 0.5);

/** rows × cols row-major → cols × rows. */
function transpose(x, rows, cols) {
  const y = new Float32Array(x.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) y[c * rows + r] = x[r * cols + c];
  return y;
}

// ---- a minimal ONNX (protobuf) writer: just what a one-node graph needs ----
const varint = (n) => {
  const out = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
};
const field = (no, wire, payload) => [...varint((no << 3) | wire), ...payload];
const int = (no, v) => field(no, 0, varint(v));
const bytes = (no, b) => field(no, 2, [...varint(b.length), ...b]);
const str = (no, s) => bytes(no, [...Buffer.from(s, 'utf8')]);
const FLOAT = 1, ATTR_INT = 2;

/** ValueInfoProto: a float tensor input/output of fixed shape. */
const valueInfo = (name, dims) => {
  const shape = dims.flatMap((d) => bytes(1, int(1, d))); // TensorShapeProto.dim { dim_value }
  const tensorType = [...int(1, FLOAT), ...bytes(2, shape)]; // TypeProto.Tensor
  return [...str(1, name), ...bytes(2, bytes(1, tensorType))];
};

/** A model with one node `op` (MatMul or Gemm) of inputs a, b and output c. */
function onnxModel(op, aDims, bDims, cDims, attrs = {}) {
  const node = [...str(1, 'a'), ...str(1, 'b'), ...str(2, 'c'), ...str(3, 'n0'), ...str(4, op),
    ...Object.entries(attrs).flatMap(([k, v]) => bytes(5, [...str(1, k), ...int(3, v), ...int(20, ATTR_INT)]))];
  const graph = [...bytes(1, node), ...str(2, 'g'), ...bytes(11, valueInfo('a', aDims)), ...bytes(11, valueInfo('b', bDims)), ...bytes(12, valueInfo('c', cDims))];
  return Uint8Array.from([...int(1, 8), ...str(2, 'fa-wasm-bench'), ...bytes(7, graph), ...bytes(8, [...str(1, ''), ...int(2, 17)])]);
}

async function loadOrt() {
  try {
    const ort = peers('onnxruntime-node');
    return { ort, version: peers('onnxruntime-node/package.json').version };
  } catch (e) {
    console.error(`bench: onnxruntime-node unavailable (bash bench/install-peers.sh): ${e.message.split('\n')[0]}`);
    return undefined;
  }
}

const ortP = await loadOrt();
const engines = [];
const nt = await nativeTarget();
const levels = nt.level === 'x86-64-v4' ? ['x86-64-v4', 'x86-64-v3'] : nt.level ? [nt.level] : [];
for (const level of levels) {
  const b = await createWasmBackend({ native: true, nativeLevel: level, threads: 0 });
  engines.push({ key: `native ${level.slice(-2)}`, label: `native ${level}`, b, threads: 1 });
}
if (levels.length) engines.push({ key: `native ${levels[0].slice(-2)} ×2`, label: `native ${levels[0]}, 2 threads`, b: await createWasmBackend({ native: true, nativeLevel: levels[0], threads: 2 }), threads: 2 });
if (!levels.length) console.error(`bench: native engine unavailable: ${nt.why}`);
engines.push({ key: 'wasm', label: 'wasm SIMD128', b: await createWasmBackend({ threads: 0, relaxedSimd: false }), threads: 1 });
if (env.FA_BENCH_RELAXED === '1') engines.push({ key: 'relaxed', label: 'wasm relaxed SIMD', b: await createWasmBackend({ threads: 0, relaxedSimd: true }), threads: 1 });

const opts = (threads) => ({ intraOpNumThreads: threads, interOpNumThreads: 1, executionProviders: ['cpu'], graphOptimizationLevel: 'all' });
const rows = [];
console.log(`# @fa/wasm gemm benchmark — ${new Date().toISOString().slice(0, 10)}, ${cpus()[0]?.model ?? 'cpu'} ×${cpus().length}, Node ${process.versions.node}, load ${load()}`);
console.log(`# ours: ${engines.map((e) => `${e.label}: ${e.b.modelOps.kernel}`).join('; ')}`);
console.log(`# ORT ${ortP?.version ?? 'missing'} CPU MatMul (inputs in MatMul's layout), ${REPS} rounds, median`);

for (const s of SHAPES) {
  const { M, N, K } = s;
  const transA = s.form[0] === 't', transB = s.form[1] === 't';
  const a = randn(M * K, 1), b = randn(K * N, 2); // stored as the call says (K×M when transA, N×K when transB)
  const opA = transA ? transpose(a, K, M) : a; // M×K for MatMul
  const opB = transB ? transpose(b, N, K) : b; // K×N
  const flops = gemmFlops(s);
  const runs = [];
  for (const e of engines) {
    const c = new Float32Array(M * N);
    const g = { transA, transB, M, N, K, a, b, c };
    runs.push({ key: e.key, run: () => e.b.modelOps.gemm(g) });
  }
  if (ortP) {
    const { ort } = ortP;
    const mm = onnxModel('MatMul', [M, K], [K, N], [M, N]);
    const feedsMM = { a: new ort.Tensor('float32', opA, [M, K]), b: new ort.Tensor('float32', opB, [K, N]) };
    for (const t of [1, 2]) {
      const sess = await ort.InferenceSession.create(mm, opts(t));
      runs.push({ key: `ort${t}`, run: () => sess.run(feedsMM), spins: t > 1 });
    }
    const gemm = await ort.InferenceSession.create(onnxModel('Gemm', transA ? [K, M] : [M, K], transB ? [N, K] : [K, N], [M, N], { transA: transA ? 1 : 0, transB: transB ? 1 : 0 }), opts(1));
    const feedsG = { a: new ort.Tensor('float32', a, transA ? [K, M] : [M, K]), b: new ort.Tensor('float32', b, transB ? [N, K] : [K, N]) };
    runs.push({ key: 'ortGemm1', run: () => gemm.run(feedsG) });
  }
  const times = Object.fromEntries(runs.map((r) => [r.key, []]));
  // warm-up: V8 runs fresh wasm in its baseline compiler until TurboFan has the hot functions
  // (a function called a few times can stay there for the first calls): 300 ms of calls each
  for (const r of runs) for (let i = 0, t0 = performance.now(); i < 3 || performance.now() - t0 < 300; i++) await r.run();
  for (let rep = 0; rep < REPS; rep++) {
    for (const r of runs) {
      await r.run();
      const t0 = performance.now();
      await r.run();
      times[r.key].push(performance.now() - t0);
      if (r.spins) await gap();
    }
  }
  const gf = Object.fromEntries(Object.entries(times).map(([k, ts]) => [k, flops / median(ts) / 1e6]));
  const best = Object.fromEntries(Object.entries(times).map(([k, ts]) => [k, flops / Math.min(...ts) / 1e6]));
  rows.push({ ...s, gf, best });
  console.error(`  ${s.form} ${M}×${N}×${K}, median (best): ${Object.entries(gf).map(([k, v]) => `${k} ${v.toFixed(1)} (${best[k].toFixed(1)})`).join(', ')}`);
}

// the TypeScript cpu engine, one shape
const cpuShape = SHAPES[1];
{
  const { M, N, K } = cpuShape;
  const g = { transA: false, transB: true, M, N, K, a: randn(M * K, 1), b: randn(K * N, 2), c: new Float32Array(M * N) };
  cpuModelOps.gemm(g);
  const ts = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    cpuModelOps.gemm(g);
    ts.push(performance.now() - t0);
  }
  cpuShape.cpu = gemmFlops(cpuShape) / median(ts) / 1e6;
}

const f = (x) => (x === undefined ? '–' : x.toFixed(1));
const fb = (r, k) => (r.gf[k] === undefined ? '–' : `${f(r.gf[k])} (${f(r.best[k])})`);
const ratio = (r, e) => {
  const o = `ort${e.threads}`;
  return r.gf[e.key] === undefined || r.gf[o] === undefined ? '–' : `${(r.gf[e.key] / r.gf[o]).toFixed(2)}× (${(r.best[e.key] / r.best[o]).toFixed(2)}×)`;
};
const ours = engines.map((e) => e.key);
const head = ['form', 'M×N×K', ...engines.map((e) => e.label), 'ORT MatMul 1 thread', 'ORT MatMul 2 threads', 'ORT Gemm (trans flags) 1 thread', ...engines.map((e) => `${e.key} / ORT ${e.threads}t`)];
console.log(`\nGFLOP/s (2·M·N·K / wall time of one call): median of ${REPS} (best in parentheses); load at the end ${load()}\n`);
console.log(`| ${head.join(' | ')} |`);
console.log(`|${head.map(() => '---').join('|')}|`);
for (const r of rows) {
  const cells = [r.form, `${r.M}×${r.N}×${r.K}`, ...ours.map((k) => fb(r, k)), fb(r, 'ort1'), fb(r, 'ort2'), fb(r, 'ortGemm1'), ...engines.map((e) => ratio(r, e))];
  console.log(`| ${cells.join(' | ')} |`);
}
console.log(`\nTypeScript cpu engine (cpuModelOps: ${cpuModelOps.kernel}), ${cpuShape.form} ${cpuShape.M}×${cpuShape.N}×${cpuShape.K}: ${f(cpuShape.cpu)} GFLOP/s`);
for (const e of engines) await e.b.dispose();
