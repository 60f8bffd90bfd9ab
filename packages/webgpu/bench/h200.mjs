// The WebGPU engine on a real GPU (the H200 machine, Dawn + the NVIDIA Vulkan driver), one run:
//   1. sanity: a small problem against a float64 reference;
//   2. probe: the adapter's features with and without Dawn's allow_unsafe_apis, its subgroup
//      matrix configurations, whether shader-f16 appears (printed only);
//   3. sweep: forward tile variants at T = 4K (D = 64 and 128) and backward variants, f32;
//   4. the conformance kit (320 cases + extra checks) with the winners — the gate: a tile becomes
//      a default only if the kit passed with it here; the forward runner-up gets a forward-only kit;
//   5. tfjs-backend-webgpu naive attention (f32) on the same adapter and inputs;
//   6. the table: forward and backward TFLOP/s, D ∈ {64,128}, T ∈ 1K…16K, B·T = 16K, hidden 2048,
//      f32 and packed-f16, with the winning tiles;
//   7. one head, T = 100 000, D = 128, f32 forward: 64 sampled rows against float64, extra memory.
// Writes $OUT/bench.json and $OUT/bench.log; prints a compact table last.
// FA_BENCH_SMALL=1: a local dry run on a software driver (small tiles, sizes and case counts).
// FA_BENCH_SKIP=probe,sweep,kit,tfjs,table,long skips parts (without the sweep: the package's
// default tiles); FA_BENCH_T=4096 and FA_BENCH_DTYPES=f32 narrow the table and tfjs.
import { appendFileSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tensor } from '@fa/core';
import { runConformance, formatSummary, conformanceCases, checkCase, EXTRA_CHECKS, summarize } from '@fa/core/testing';
import { createWebGPUBackend } from '@fa/webgpu';

const OUT = process.env.OUT ?? '/tmp';
const SMALL = process.env.FA_BENCH_SMALL === '1' || (process.env.FA_BENCH_SMALL === undefined && !process.env.OUT && !process.env.FA_BENCH_FULL);
const SKIP = new Set((process.env.FA_BENCH_SKIP ?? '').split(',').filter(Boolean));
const T0 = performance.now();
const LOG = `${OUT}/bench.log`;
writeFileSync(LOG, '');
const log = (...a) => {
  const line = a.join(' ');
  console.log(line);
  appendFileSync(LOG, line + '\n');
};
const DEADLINE = Number(process.env.FA_BENCH_DEADLINE_S ?? 270);
const left = () => DEADLINE - (performance.now() - T0) / 1000;
const elapsed = () => ((performance.now() - T0) / 1000).toFixed(0) + 's';
const results = { date: new Date().toISOString(), small: SMALL, sanity: null, probe: null, sweep: [], chosen: null, conformance: null, conformanceRunnerUp: null, tfjs: [], table: [], long: null, errors: [] };
const save = () => writeFileSync(`${OUT}/bench.json`, JSON.stringify(results, null, 1));

// ---------------------------------------------------------------- data
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
}
function randn(n, seed, scale = 1) {
  const u = rng(seed);
  const a = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(u())) * scale, t = 2 * Math.PI * u();
    a[i] = r * Math.cos(t);
    if (i + 1 < n) a[i + 1] = r * Math.sin(t);
  }
  return a;
}
// float32 → f16 bits, round to nearest even (normal, subnormal, overflow, NaN).
const f32b = new Float32Array(1), u32b = new Uint32Array(f32b.buffer);
function f16bits(x) {
  f32b[0] = x;
  const b = u32b[0];
  const sign = (b >>> 16) & 0x8000;
  const e = (b >>> 23) & 0xff, m = b & 0x7fffff;
  if (e === 0xff) return sign | 0x7c00 | (m ? 0x200 : 0);
  let ee = e - 127 + 15;
  if (ee >= 0x1f) return sign | 0x7c00;
  if (ee <= 0) {
    if (ee < -10) return sign;
    const mm = m | 0x800000, shift = 14 - ee;
    let r = mm >>> shift;
    const rem = mm & ((1 << shift) - 1), half = 1 << (shift - 1);
    if (rem > half || (rem === half && (r & 1))) r++;
    return sign | r;
  }
  let r = (ee << 10) | (m >>> 13);
  const rem = m & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (r & 1))) r++;
  return sign | r;
}
function toF16(a) {
  const o = new Uint16Array(a.length);
  for (let i = 0; i < a.length; i++) o[i] = f16bits(a[i]);
  return o;
}

const TOKENS = SMALL ? 512 : 16384;
const HIDDEN = SMALL ? 128 : 2048;
const TS = process.env.FA_BENCH_T ? process.env.FA_BENCH_T.split(',').map(Number) : SMALL ? [128, 256, 512] : [1024, 2048, 4096, 8192, 16384];
const DTYPES = (process.env.FA_BENCH_DTYPES ?? 'f32,f16').split(',');
const DS = SMALL ? [32, 64] : [64, 128];
const T_SWEEP = SMALL ? 256 : 4096;
const N = TOKENS * HIDDEN;
log(`[${elapsed()}] generating inputs: 4 × ${N} floats`);
const host = { q: randn(N, 1), k: randn(N, 2), v: randn(N, 3), dO: randn(N, 4) };
const host16 = {};
for (const [k, a] of Object.entries(host)) host16[k] = toF16(a);
log(`[${elapsed()}] inputs ready`);

function smi() {
  const r = spawnSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.trim().split('\n')[0]) : NaN;
}

async function timeCall(be, fn, minSeconds = SMALL ? 0.05 : 0.25) {
  await fn();
  await be.sync();
  let t = performance.now();
  await fn();
  await be.sync();
  const once = (performance.now() - t) / 1000;
  const iters = Math.max(1, Math.min(20, Math.ceil(minSeconds / Math.max(once, 1e-4))));
  const samples = [];
  for (let r = 0; r < 3; r++) {
    t = performance.now();
    for (let i = 0; i < iters; i++) await fn();
    await be.sync();
    samples.push((performance.now() - t) / 1000 / iters);
  }
  samples.sort((a, b) => a - b);
  return samples[1];
}

async function upload(be, dtype, shape) {
  const src = dtype === 'f32' ? host : host16;
  const n = shape.reduce((a, b) => a * b, 1);
  const t = {};
  for (const k of ['q', 'k', 'v', 'dO']) t[k] = await be.upload(tensor(src[k].subarray(0, n), shape, dtype));
  return t;
}
function free(be, ...ts) {
  for (const t of ts) if (t) be.disposeTensor(t);
}

async function measure(be, dtype, D, T, { fwd = true, bwd = true } = {}) {
  const H = HIDDEN / D, B = TOKENS / T;
  const shape = [B, T, H, D];
  const t = await upload(be, dtype, shape);
  const flops = 4 * B * H * T * T * D;
  const row = { dtype, D, T, B, H };
  try {
    if (fwd) {
      const sFwd = await timeCall(be, async () => {
        const r = await be.forward(t.q, t.k, t.v, {});
        free(be, r.out, r.lse);
      });
      row.fwdMs = sFwd * 1e3;
      row.fwdTflops = flops / sFwd / 1e12;
      row.fwdTile = be.lastSpecs[0]?.tile;
    }
    if (bwd) {
      const f = await be.forward(t.q, t.k, t.v, {});
      const sBwd = await timeCall(be, async () => {
        const g = await be.backward(t.q, t.k, t.v, f.out, t.dO, f.lse, {});
        free(be, g.dq, g.dk, g.dv);
      });
      row.bwdMs = sBwd * 1e3;
      row.bwdTflops = (2.5 * flops) / sBwd / 1e12;
      row.bwdTiles = be.lastSpecs.map((s) => s.tile);
      free(be, f.out, f.lse);
    }
  } finally {
    free(be, t.q, t.k, t.v, t.dO);
  }
  return row;
}

// ---------------------------------------------------------------- float64 rows (sanity, long)
function refRows(q, k, v, T, D, rows, scale) {
  const out = [], lse = [];
  const s = new Float64Array(T);
  for (const i of rows) {
    let m = -Infinity;
    for (let j = 0; j < T; j++) {
      let d = 0;
      for (let x = 0; x < D; x++) d += q[i * D + x] * k[j * D + x];
      s[j] = d * scale;
      if (s[j] > m) m = s[j];
    }
    let l = 0;
    for (let j = 0; j < T; j++) l += (s[j] = Math.exp(s[j] - m));
    const o = new Float64Array(D);
    for (let j = 0; j < T; j++) {
      const p = s[j] / l;
      for (let x = 0; x < D; x++) o[x] += p * v[j * D + x];
    }
    out.push(o);
    lse.push(m + Math.log(l));
  }
  return { out, lse };
}
function rowsErr(got, D, rows, ref) {
  let num = 0, den = 0, lseMax = 0;
  rows.forEach((i, r) => {
    for (let x = 0; x < D; x++) {
      const e = got.out[i * D + x] - ref.out[r][x];
      num += e * e;
      den += ref.out[r][x] ** 2;
    }
    lseMax = Math.max(lseMax, Math.abs(got.lse[i] - ref.lse[r]));
  });
  return { rel: Math.sqrt(num / den), lseMaxAbs: lseMax };
}

// ---------------------------------------------------------------- tile variants
// Full-size variants (H200); FA_BENCH_SMALL shrinks each to a 4× smaller tile of the same shape
// so that the dry run compiles the same code paths in seconds.
const FWD_VARIANTS = {
  A: { nr: 64, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16 },
  V1: { nr: 64, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1 },
  S1: { nr: 64, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1 },
  P1: { nr: 64, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1, pf: 1 },
  P1d8: { nr: 64, nc: 64, tr: 16, tc: 16, dk: 8, kc: 8, vec: 1, sw: 1, pf: 1 },
  P1d32: { nr: 64, nc: 64, tr: 16, tc: 16, dk: 32, kc: 32, vec: 1, sw: 1, pf: 1 },
  S2: { nr: 128, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1 },
  P2d8: { nr: 128, nc: 64, tr: 16, tc: 16, dk: 8, kc: 8, vec: 1, sw: 1, pf: 1 },
  P3: { nr: 64, nc: 64, tr: 8, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1, pf: 1 },
  P4: { nr: 64, nc: 32, tr: 16, tc: 8, dk: 16, kc: 16, vec: 1, sw: 1, pf: 1 },
};
const BWD_VARIANTS = {
  A: FWD_VARIANTS.A,
  V2: { nr: 128, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1 },
  S2: FWD_VARIANTS.S2,
  P2d8: FWD_VARIANTS.P2d8,
};
const shrink = (t) => (SMALL ? { ...t, nr: t.nr / 4, nc: t.nc / 4, tr: t.tr / 4, tc: t.tc / 4, dk: Math.min(t.dk, 8), kc: Math.min(t.kc, 4) } : t);
const pick = (env, all) => (process.env[env] ? Object.fromEntries(process.env[env].split(',').map((k) => [k, all[k]])) : all);
const fwdVariants = pick('FA_BENCH_FWD', FWD_VARIANTS);
const bwdVariants = pick('FA_BENCH_BWD', BWD_VARIANTS);
const CODEGEN = SMALL ? { codegen: 'specialised' } : {};
// Candidates tried first, falling back to the built-in list where they do not fit (D = 256):
// exactly how a default behaves, so the kit below tests what the default would be.
const tilesOf = (fwd, bwd) => ({ ...CODEGEN, preferredTiles: { fwd: [shrink(fwd)], dkdv: [shrink(bwd)], dq: [shrink(bwd)] } });

// ---------------------------------------------------------------- 1. sanity
let be = await createWebGPUBackend({});
log(`[${elapsed()}] adapter: ${be.device}; features: ${[...be.features].join(', ')}; generic=${be.generic}; nativeF16=${be.nativeF16}`);
{
  const T = SMALL ? 200 : 1000, D = 128;
  const q = host.q.subarray(0, T * D), k = host.k.subarray(0, T * D), v = host.v.subarray(0, T * D);
  const r = await be.forward(tensor(q, [1, T, 1, D]), tensor(k, [1, T, 1, D]), tensor(v, [1, T, 1, D]), {});
  const rows = [0, 1, T / 2, T - 2, T - 1];
  const e = rowsErr({ out: r.out.data, lse: r.lse.data }, D, rows, refRows(q, k, v, T, D, rows, 1 / Math.sqrt(D)));
  results.sanity = { ...e, spec: be.lastSpecs[0] };
  log(`[${elapsed()}] sanity T=${T} D=128 f32: rel err ${e.rel.toExponential(2)}, lse max abs ${e.lseMaxAbs.toExponential(2)}, tile ${JSON.stringify(be.lastSpecs[0].tile)} subgroups=${be.lastSpecs[0].subgroups}`);
  save();
}
await be.dispose();

// ---------------------------------------------------------------- 2. probe
if (!SKIP.has('probe')) {
  try {
    const { create } = await import('webgpu');
    const probe = {};
    for (const [name, flags] of [['default', []], ['allow_unsafe_apis', ['enable-dawn-features=allow_unsafe_apis']]]) {
      const gpu = create(flags);
      const a = await gpu.requestAdapter();
      if (!a) { probe[name] = 'no adapter'; continue; }
      const info = a.info ?? {};
      const cfgs = info.subgroupMatrixConfigs ? [...info.subgroupMatrixConfigs].map((c) => ({ componentType: c.componentType, resultComponentType: c.resultComponentType, M: c.M, N: c.N, K: c.K })) : null;
      probe[name] = {
        features: [...a.features].sort(),
        shaderF16: a.features.has('shader-f16'),
        subgroupMatrix: a.features.has('chromium-experimental-subgroup-matrix'),
        subgroupMatrixConfigs: cfgs,
        subgroupMinSize: info.subgroupMinSize, subgroupMaxSize: info.subgroupMaxSize,
        vendor: info.vendor, architecture: info.architecture, description: info.description,
        maxComputeWorkgroupStorageSize: a.limits.maxComputeWorkgroupStorageSize,
      };
      log(`[${elapsed()}] probe (${name}): shader-f16=${probe[name].shaderF16}, subgroup-matrix=${probe[name].subgroupMatrix}, configs=${JSON.stringify(cfgs)}; features: ${probe[name].features.join(' ')}`);
    }
    results.probe = probe;
  } catch (e) {
    results.probe = { error: String(e?.message ?? e) };
    log(`[${elapsed()}] probe failed: ${e?.message ?? e}`);
  }
  save();
}

// ---------------------------------------------------------------- 3. sweep
const geo = (xs) => Math.exp(xs.reduce((a, x) => a + Math.log(x), 0) / xs.length);
// null: the package's default tiles (no sweep).
let bestF = null, bestB = null, runnerF;
const chosenTiles = () => (bestF ? tilesOf(FWD_VARIANTS[bestF], BWD_VARIANTS[bestB]) : CODEGEN);
if (!SKIP.has('sweep')) {
  (bestF = 'A'), (bestB = 'A');
  const scoreF = {}, scoreB = {};
  for (const [kind, variants, scores] of [['fwd', fwdVariants, scoreF], ['bwd', bwdVariants, scoreB]]) {
    for (const [name, tile] of Object.entries(variants)) {
      const xs = [];
      for (const D of DS) {
        if (left() < 195) { log(`[${elapsed()}] sweep: no time left for ${kind} ${name}`); break; }
        let b2;
        try {
          b2 = await createWebGPUBackend(kind === 'fwd' ? tilesOf(tile, FWD_VARIANTS.A) : tilesOf(FWD_VARIANTS.A, tile));
          const row = await measure(b2, 'f32', D, T_SWEEP, { fwd: kind === 'fwd', bwd: kind === 'bwd' });
          const tf = kind === 'fwd' ? row.fwdTflops : row.bwdTflops;
          xs.push(tf);
          results.sweep.push({ kind, name, tile, ...row });
          log(`[${elapsed()}] sweep ${kind} ${name} D=${D} T=${T_SWEEP}: ${tf.toFixed(2)} TFLOP/s  ${JSON.stringify(kind === 'fwd' ? row.fwdTile : row.bwdTiles[0])}`);
        } catch (e) {
          results.sweep.push({ kind, name, tile, D, error: String(e?.message ?? e) });
          log(`[${elapsed()}] sweep ${kind} ${name} D=${D} failed: ${e?.message ?? e}`);
        } finally {
          await b2?.dispose();
        }
        save();
      }
      if (xs.length === DS.length) scores[name] = geo(xs);
    }
  }
  const rank = (sc) => Object.entries(sc).sort((a, b) => b[1] - a[1]).map(([n]) => n);
  const rf = rank(scoreF), rb = rank(scoreB);
  if (rf.length) (bestF = rf[0]), (runnerF = rf.find((n) => n !== bestF && n !== 'A'));
  if (rb.length) bestB = rb[0];
  log(`[${elapsed()}] forward ranking (geo-mean TFLOP/s over D): ${rf.map((n) => `${n} ${scoreF[n].toFixed(2)}`).join(', ')}`);
  log(`[${elapsed()}] backward ranking: ${rb.map((n) => `${n} ${scoreB[n].toFixed(2)}`).join(', ')}`);
}
results.chosen = { fwd: bestF, fwdTile: FWD_VARIANTS[bestF], bwd: bestB, bwdTile: BWD_VARIANTS[bestB], runnerUpFwd: runnerF };
save();

// ---------------------------------------------------------------- 4. the kit with the winners (the gate)
async function kit(opts, cases, { extras = true, budget }) {
  const b = await createWebGPUBackend(opts);
  try {
    const res = [], failures = [];
    const tk = performance.now();
    let stopped = 0;
    for (const c of cases) {
      if ((performance.now() - tk) / 1000 > budget) { stopped = cases.length - res.length; break; }
      const r = await checkCase(b, c);
      res.push(r);
      if (!r.pass) failures.push(r.message);
    }
    if (!stopped && extras) for (const x of EXTRA_CHECKS) { const r = await x.run(b); res.push(r); if (!r.pass) failures.push(r.message); }
    const s = summarize(b, res, performance.now() - tk);
    const specs = new Set(res.length ? b.lastSpecs.map((x) => JSON.stringify(x.tile)) : []);
    return { summary: formatSummary(s) + (stopped ? ` (time budget: ${stopped} cases not run)` : ''), passed: s.passed, failed: s.failed, skipped: s.skipped.length, notRun: stopped, failures: failures.slice(0, 20), lastTiles: [...specs], b };
  } catch (e) {
    await b.dispose();
    throw e;
  }
}
if (!SKIP.has('kit')) {
  try {
    const r = await kit(chosenTiles(), conformanceCases({ count: SMALL ? 8 : 320, seed: 1 }), { budget: Math.min(Number(process.env.FA_BENCH_KIT_S ?? 110), left() - 100) });
    log(`[${elapsed()}] kit with fwd ${bestF}, bwd ${bestB}: ${r.summary}`);
    for (const f of r.failures.slice(0, 8)) log('  ' + f.split('\n').slice(0, 3).join(' | '));
    if (!r.notRun && left() > 130) {
      const s2 = await runConformance(r.b, { count: SMALL ? 4 : 24, seed: 5, upload: true, extras: false });
      log(`[${elapsed()}] device tensors: ${formatSummary(s2)}`);
      r.upload = formatSummary(s2);
    }
    await r.b.dispose();
    delete r.b;
    results.conformance = r;
  } catch (e) {
    results.conformance = { error: String(e?.message ?? e) };
    log(`[${elapsed()}] kit threw: ${e?.message ?? e}`);
  }
  save();
  if (runnerF && left() > 120) {
    try {
      const r = await kit(tilesOf(FWD_VARIANTS[runnerF], FWD_VARIANTS.A), conformanceCases({ count: SMALL ? 4 : 320, seed: 1, backward: false }), { extras: false, budget: 30 });
      await r.b.dispose();
      delete r.b;
      log(`[${elapsed()}] forward-only kit with runner-up ${runnerF}: ${r.summary}`);
      results.conformanceRunnerUp = { name: runnerF, ...r };
    } catch (e) {
      results.conformanceRunnerUp = { name: runnerF, error: String(e?.message ?? e) };
    }
    save();
  }
}

// ---------------------------------------------------------------- 5. tfjs peer
if (!SKIP.has('tfjs')) {
  be = await createWebGPUBackend(chosenTiles());
  try {
    const { create, globals } = await import('webgpu');
    Object.assign(globalThis, globals);
    globalThis.navigator = { gpu: create([]), userAgent: 'node' };
    // On the GPU machine: the bundle bench/pack-tfjs.mjs made; here: the devDependencies.
    let tf;
    try {
      tf = (await import('./tfjs.bundle.mjs')).default;
    } catch {
      tf = await import('@tensorflow/tfjs-core');
      await import('@tensorflow/tfjs-backend-webgpu');
    }
    await tf.setBackend('webgpu');
    await tf.ready();
    log(`[${elapsed()}] tfjs ${tf.version_core} backend ${tf.getBackend()}`);
    for (const D of DS) {
      for (const T of TS) {
        const H = HIDDEN / D, B = TOKENS / T, BH = B * H;
        const row = { D, T, B, H };
        if (left() < 45) { row.error = 'not run: time budget'; results.tfjs.push(row); continue; }
        try {
          // [B,T,H,D] → [B·H, T, D] once, outside the timing.
          const prep = (a) => tf.tidy(() => tf.reshape(tf.transpose(tf.tensor4d(a.subarray(0, B * T * H * D), [B, T, H, D]), [0, 2, 1, 3]), [BH, T, D]));
          const q = prep(host.q), k = prep(host.k), v = prep(host.v);
          // Chunks of (batch·head) slices and of query rows: one score matrix ≤ 2^28 entries (1 GiB).
          const CAP = Number(process.env.FA_BENCH_TFJS_CAP ?? 2 ** 28);
          const rowsPer = Math.max(1, Math.min(T, Math.floor(CAP / T)));
          const per = Math.max(1, Math.min(BH, Math.floor(CAP / (rowsPer * T))));
          const scale = 1 / Math.sqrt(D);
          const dev = tf.backend().device;
          let total = 0;
          const run = async () => {
            dev?.pushErrorScope('validation');
            const sums = [];
            for (let c = 0; c < BH; c += per) {
              const n = Math.min(per, BH - c);
              for (let r0 = 0; r0 < T; r0 += rowsPer) {
                const nr = Math.min(rowsPer, T - r0);
                sums.push(tf.tidy(() => {
                  const qs = tf.slice(q, [c, r0, 0], [n, nr, D]), ks = tf.slice(k, [c, 0, 0], [n, T, D]), vs = tf.slice(v, [c, 0, 0], [n, T, D]);
                  const p = tf.softmax(tf.mul(tf.matMul(qs, ks, false, true), scale));
                  return tf.sum(tf.matMul(p, vs));
                }));
              }
            }
            // Pairwise adds: tf.addN binds one storage buffer per input (8 at most here).
            let s = sums[0];
            for (let i = 1; i < sums.length; i++) {
              const n = tf.add(s, sums[i]);
              if (i > 1) s.dispose();
              s = n;
            }
            total = (await s.data())[0];
            tf.dispose(sums);
            if (sums.length > 1) s.dispose();
            const err = await dev?.popErrorScope();
            if (err) throw new Error(`tfjs failed validation: ${err.message.split('\n')[0]}`);
          };
          await run();
          // Check tfjs's answer against ours (the sum of all outputs).
          {
            const qd = await be.upload(tensor(host.q.subarray(0, B * T * H * D), [B, T, H, D]));
            const kd = await be.upload(tensor(host.k.subarray(0, B * T * H * D), [B, T, H, D]));
            const vd = await be.upload(tensor(host.v.subarray(0, B * T * H * D), [B, T, H, D]));
            const r = await be.forward(qd, kd, vd, {});
            const o = (await be.read(r.out)).data;
            let ours = 0;
            for (let i = 0; i < o.length; i++) ours += o[i];
            free(be, qd, kd, vd, r.out, r.lse);
            row.sumTfjs = total;
            row.sumOurs = ours;
            if (!(Math.abs(total - ours) <= 1e-3 * Math.sqrt(o.length) + 1e-3 * Math.abs(ours))) throw new Error(`tfjs output sum ${total} differs from ours ${ours}`);
          }
          let t0 = performance.now();
          await run();
          const once = (performance.now() - t0) / 1000;
          const iters = Math.max(1, Math.min(10, Math.ceil(0.25 / once)));
          const samples = [];
          for (let r = 0; r < 3; r++) {
            t0 = performance.now();
            for (let i = 0; i < iters; i++) await run();
            samples.push((performance.now() - t0) / 1000 / iters);
          }
          samples.sort((a, b) => a - b);
          row.fwdMs = samples[1] * 1e3;
          row.fwdTflops = (4 * BH * T * T * D) / samples[1] / 1e12;
          row.chunks = Math.ceil(BH / per) * Math.ceil(T / rowsPer);
          tf.dispose([q, k, v]);
          log(`[${elapsed()}] tfjs naive f32 D=${D} T=${T}: ${row.fwdMs.toFixed(2)} ms ${row.fwdTflops.toFixed(2)} TFLOP/s (${row.chunks} chunks)`);
        } catch (e) {
          row.error = String(e?.message ?? e);
          log(`[${elapsed()}] tfjs D=${D} T=${T} failed: ${row.error}`);
        }
        results.tfjs.push(row);
        save();
      }
    }
    tf.disposeVariables();
    try { tf.backend().device?.destroy?.(); } catch {}
  } catch (e) {
    results.errors.push(`tfjs: ${e?.message ?? e}`);
    log(`[${elapsed()}] tfjs unavailable: ${e?.message ?? e}`);
  }
  await be.dispose();
}

// ---------------------------------------------------------------- 6. table (winning tiles)
be = await createWebGPUBackend(chosenTiles());
if (!SKIP.has('table')) {
  for (const dtype of DTYPES) {
    for (const D of DS) {
      for (const T of TS) {
        if (left() < (dtype === 'f32' ? 15 : 10)) { results.table.push({ dtype, D, T, error: 'not run: time budget' }); continue; }
        try {
          const row = await measure(be, dtype, D, T);
          results.table.push(row);
          log(`[${elapsed()}] ${dtype} D=${D} T=${T} B=${row.B} H=${row.H}: fwd ${row.fwdMs.toFixed(2)} ms ${row.fwdTflops.toFixed(2)} TFLOP/s, bwd ${row.bwdMs.toFixed(2)} ms ${row.bwdTflops.toFixed(2)} TFLOP/s`);
        } catch (e) {
          results.table.push({ dtype, D, T, error: String(e?.message ?? e) });
          log(`[${elapsed()}] ${dtype} D=${D} T=${T} failed: ${e?.message ?? e}`);
        }
        save();
      }
    }
  }
}

// ---------------------------------------------------------------- 7. one head, T = 100 000
if (!SKIP.has('long') && left() > 6) {
  const T = SMALL ? 2000 : 100000, D = 128;
  try {
    const q = randn(T * D, 11), k = randn(T * D, 12), v = randn(T * D, 13);
    const qt = await be.upload(tensor(q, [1, T, 1, D])), kt = await be.upload(tensor(k, [1, T, 1, D])), vt = await be.upload(tensor(v, [1, T, 1, D]));
    await be.sync();
    const smi0 = smi();
    be.resetPeakMemory();
    const base = be.memoryStats().current;
    const t0 = performance.now();
    const r = await be.forward(qt, kt, vt, {});
    await be.sync();
    const ms = performance.now() - t0;
    const smi1 = smi();
    const extra = be.memoryStats().peak - base;
    const out = (await be.read(r.out)).data, lse = (await be.read(r.lse)).data;
    const rows = Array.from({ length: 64 }, (_, i) => Math.min(T - 1, Math.round((i * (T - 1)) / 63)));
    const e = rowsErr({ out, lse }, D, rows, refRows(q, k, v, T, D, rows, 1 / Math.sqrt(D)));
    const inputs = 3 * T * D * 4;
    results.long = { T, D, ms, rel: e.rel, lseMaxAbs: e.lseMaxAbs, extraBytes: extra, inputBytes: inputs, nvidiaSmiDeltaMiB: smi1 - smi0, tflops: (4 * T * T * D) / (ms / 1e3) / 1e12, tile: be.lastSpecs[0]?.tile };
    log(`[${elapsed()}] long: 1 head, T=${T}, D=${D}, f32 forward ${ms.toFixed(1)} ms; 64 rows vs float64: rel err ${e.rel.toExponential(2)}, LSE max abs ${e.lseMaxAbs.toExponential(2)}; extra GPU memory ${(extra / 2 ** 20).toFixed(1)} MiB (nvidia-smi delta ${smi1 - smi0} MiB)`);
    free(be, qt, kt, vt, r.out, r.lse);
  } catch (e) {
    results.long = { error: String(e?.message ?? e) };
    log(`[${elapsed()}] long failed: ${e?.message ?? e}`);
  }
  save();
}
await be.dispose();

// ---------------------------------------------------------------- table last
log('');
log(`@fa/webgpu on ${be.device} — TFLOP/s (fwd 4·B·H·T²·D, bwd 2.5× that), B·T=${TOKENS}, hidden ${HIDDEN}, non-causal; tiles fwd ${bestF ?? 'default'}, bwd ${bestB ?? 'default'}`);
log('dtype  D    T      fwd ms    fwd TF/s  bwd ms    bwd TF/s  tfjs-naive fwd TF/s  ours/tfjs');
for (const r of results.table) {
  if (r.error) { log(`${r.dtype}  ${r.D}  ${r.T}  error: ${r.error}`); continue; }
  const tj = r.dtype === 'f32' ? results.tfjs.find((x) => x.D === r.D && x.T === r.T && x.fwdTflops) : undefined;
  log([r.dtype.padEnd(5), String(r.D).padEnd(4), String(r.T).padEnd(6), r.fwdMs.toFixed(2).padStart(8), r.fwdTflops.toFixed(2).padStart(9), r.bwdMs.toFixed(2).padStart(9), r.bwdTflops.toFixed(2).padStart(9), (tj ? tj.fwdTflops.toFixed(2) : '-').padStart(12), (tj ? (r.fwdTflops / tj.fwdTflops).toFixed(2) + '×' : '-').padStart(14)].join('  '));
}
for (const kind of ['fwd', 'bwd']) {
  const xs = results.sweep.filter((x) => x.kind === kind && !x.error);
  log(`sweep ${kind} (T=${T_SWEEP}): ${xs.map((x) => `${x.name}/D${x.D} ${(kind === 'fwd' ? x.fwdTflops : x.bwdTflops).toFixed(2)}`).join(', ')}`);
}
if (results.long && !results.long.error) log(`long T=${results.long.T}: ${results.long.ms.toFixed(1)} ms, rel err ${results.long.rel.toExponential(2)}, extra ${(results.long.extraBytes / 2 ** 20).toFixed(1)} MiB`);
if (results.conformance) log(`kit (fwd ${bestF}, bwd ${bestB}): ${results.conformance.summary ?? results.conformance.error}`);
if (results.conformanceRunnerUp) log(`kit fwd-only (${results.conformanceRunnerUp.name}): ${results.conformanceRunnerUp.summary ?? results.conformanceRunnerUp.error}`);
if (results.probe && !results.probe.error) for (const [k, p] of Object.entries(results.probe)) log(`probe ${k}: shader-f16=${p.shaderF16} subgroup-matrix=${p.subgroupMatrix} configs=${JSON.stringify(p.subgroupMatrixConfigs)}`);
log(`total ${elapsed()}`);
save();
process.exit(0);
