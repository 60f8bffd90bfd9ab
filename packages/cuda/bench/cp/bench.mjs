// Device script, 2 GPUs (nvidia-h200-x2) or more: ring attention over NCCL, one process per GPU.
// For T = 256K, 512K, 1M tokens (bf16, D = 128, H heads): every GPU first runs the whole problem
// alone (the single-GPU baseline, all GPUs at once, each on its own copy), then the ring runs it
// sharded (zigzag) over all GPUs. Reported per T: forward and backward time (ring: the slowest
// rank, median of reps after a warm-up), speedup over one GPU, the attention calls' share of
// the ring's time and the time spent waiting on NCCL (exposed communication), peak memory per
// GPU (the device memory pool's high-water mark), and exactness: every rank's out, lse, dq, dk,
// dv against the single-GPU result of the same rows, and sampled rows of out/lse against the
// float64 reference (the ring may err at most twice the single GPU's error plus two bf16 ulps).
//
// Run (one command; without FA_RANK it launches the ranks itself, one per GPU):
//   pnpm build && bash /work/shared/device/prepare.sh --run packages/cuda/bench/cp
//   on the GPU machine: source .fa-device/on-device.sh && node .fa-device/run/cp/bench.mjs
// Environment: FA_CP_NPROC (ranks, default 2), FA_CP_T (default 262144,524288,1048576),
// FA_CP_HEADS (default 1), FA_CP_CAUSAL (1, 0 or both; default 1), FA_CP_REPS (default 3),
// OUT (results: cp-bench-rank<r>.json, cp-bench.md; default /tmp/fa-out).
import { FAError, locateToken, ringBackward, ringForward, zigzagLayout } from '@fa/core';
import { createCudaBackend, createNcclCommunicator, cudaShardOps, launchLocal, rankFromEnv } from '@fa/cuda';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { checkRows, diff, gatherRows, gb, poolPeak, randomTensor, timeIt, timedEngine, values } from './lib.mjs';

const OUT = process.env.OUT ?? '/tmp/fa-out';
mkdirSync(OUT, { recursive: true });
const env = process.env;
const sizes = (env.FA_CP_T ?? '262144,524288,1048576').split(',').map(Number);
const H = Number(env.FA_CP_HEADS ?? 1);
const causals = env.FA_CP_CAUSAL === 'both' ? [true, false] : [env.FA_CP_CAUSAL !== '0'];
const reps = Number(env.FA_CP_REPS ?? 3);
const D = 128;

if (env.FA_RANK === undefined) await launch();
else await rankMain();

async function launch() {
  const nproc = Number(env.FA_CP_NPROC ?? 2);
  console.log(`launching ${nproc} ranks (one per GPU): T = ${sizes.join(', ')}, H = ${H}, D = ${D}, bf16, ${causals.map((c) => (c ? 'causal' : 'full')).join(' and ')}, ${reps} reps`);
  const r = await launchLocal({ nproc, command: process.execPath, args: [fileURLToPath(import.meta.url)], env: { OUT } });
  if (r.code !== 0) {
    console.log(`a rank failed (exit codes ${r.codes.join(', ')})`);
    process.exit(r.code);
  }
  const ranks = Array.from({ length: nproc }, (_, k) => JSON.parse(readFileSync(`${OUT}/cp-bench-rank${k}.json`, 'utf8')));
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const lines = [
    `ring attention over NCCL, ${nproc} × ${ranks[0].device}, NCCL ${ranks[0].nccl}; bf16, D = ${D}, H = ${H}, zigzag shards; times: median of ${reps} (ring: slowest rank per rep)`,
    '',
    '| T | mask | 1 GPU fwd ms | ring fwd ms | speedup | 1 GPU bwd ms | ring bwd ms | speedup | attention share fwd/bwd | NCCL wait fwd/bwd ms | peak GB/GPU 1 GPU / ring | max abs Δ vs 1 GPU (out, dq, dk, dv) | sampled rows vs float64 |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  let allExact = true;
  for (let c = 0; c < ranks[0].results.length; c++) {
    const rs = ranks.map((x) => x.results[c]);
    const r0 = rs[0];
    const ringF = med(r0.ring.fwd.map((_, i) => Math.max(...rs.map((x) => x.ring.fwd[i].ms))));
    const ringB = med(r0.ring.bwd.map((_, i) => Math.max(...rs.map((x) => x.ring.bwd[i].ms))));
    const share = (pass, key) => med(rs.map((x) => med(x.ring[pass].map((p) => p[key] / p.ms))));
    const wait = (pass) => Math.max(...rs.map((x) => med(x.ring[pass].map((p) => p.waitMs))));
    const sF = r0.single.fwdMs;
    const sB = r0.single.bwdMs;
    const dmax = (k) => Math.max(...rs.map((x) => x.exact?.[k]?.maxAbs ?? NaN));
    const rowsOk = rs.every((x) => x.rows.pass);
    const exact = rs.every((x) => x.exact ? x.exact.pass : true) && rowsOk;
    allExact &&= exact;
    const f = (x) => (Number.isFinite(x) ? x.toFixed(1) : 'n/a');
    lines.push(`| ${r0.T} | ${r0.causal ? 'causal' : 'full'} | ${f(sF)} | ${f(ringF)} | ${sF ? (sF / ringF).toFixed(2) + '×' : 'n/a'} | ${f(sB)} | ${f(ringB)} | ${sB ? (sB / ringB).toFixed(2) + '×' : 'n/a'} | ${share('fwd', 'attnMs').toFixed(2)} / ${share('bwd', 'attnMs').toFixed(2)} | ${wait('fwd').toFixed(1)} / ${wait('bwd').toFixed(1)} | ${r0.single.peak ? gb(Math.max(...rs.map((x) => x.single.peak))) : 'n/a'} / ${gb(Math.max(...rs.map((x) => x.ring.peak)))} | ${['out', 'dq', 'dk', 'dv'].map((k) => dmax(k).toExponential(1)).join(', ')} | ${rowsOk ? 'pass' : 'FAIL'} (ring ${Math.max(...rs.map((x) => x.rows.errRing)).toExponential(1)} ≤ ${Math.min(...rs.map((x) => x.rows.bound)).toExponential(1)}) |`);
  }
  lines.push('', allExact ? 'every rank exact: ring vs 1 GPU within the bf16 rule, sampled rows vs float64 pass' : 'SOME CHECK FAILED: see the rank JSON files');
  const text = lines.join('\n');
  console.log(text);
  writeFileSync(`${OUT}/cp-bench.md`, `${text}\n`);
}

async function rankMain() {
  const { rank, size, localRank } = rankFromEnv();
  const cuda = await createCudaBackend({ device: localRank });
  const ops = cudaShardOps(cuda);
  const comm = await createNcclCommunicator(cuda);
  const st = (await import('@fa/cuda')).ncclStatus();
  const timed = timedEngine(cuda);
  const bar = [await ops.alloc('f32', [1], 0), await ops.alloc('f32', [1])];
  const barrier = async () => {
    for (let i = 0; i < Math.max(1, size - 1); i++) await comm.exchange([bar[0]], [bar[1]]);
  };
  const drop = (r) => Object.values(r).forEach((t) => cuda.disposeTensor(t));
  const log = (s) => console.log(s);
  const results = [];
  for (const causal of causals) {
    for (const T of sizes) {
      const opts = { causal };
      const shape = [1, T, H, D];
      const seed = T * 8 + (causal ? 1 : 0);
      const q = await randomTensor(cuda, shape, 'bf16', seed + 1);
      const k = await randomTensor(cuda, shape, 'bf16', seed + 2);
      const v = await randomTensor(cuda, shape, 'bf16', seed + 3);
      const dO = await randomTensor(cuda, shape, 'bf16', seed + 4);
      const layout = zigzagLayout(size, T);
      const myQ = layout.q[rank];
      const myK = layout.k[rank];
      // the single-GPU baseline (every rank at once, on its own GPU)
      let single = { fwdMs: undefined, bwdMs: undefined, peak: undefined };
      let ref;
      try {
        poolPeak(localRank, true);
        single.fwdMs = await timeIt(() => cuda.forward(q, k, v, opts), reps, drop);
        const f = await cuda.forward(q, k, v, opts);
        single.bwdMs = await timeIt(() => cuda.backward(q, k, v, f.out, dO, f.lse, opts), reps, drop);
        const g = await cuda.backward(q, k, v, f.out, dO, f.lse, opts);
        single.peak = poolPeak(localRank);
        const rows = async (t, ranges, kind) => {
          const s = await gatherRows(cuda, t, ranges, kind);
          const h = await cuda.read(s);
          cuda.disposeTensor(s);
          return h;
        };
        ref = { out: await rows(f.out, myQ), lse: await rows(f.lse, myQ, 'lse'), dq: await rows(g.dq, myQ), dk: await rows(g.dk, myK), dv: await rows(g.dv, myK) };
        drop(f);
        drop(g);
      } catch (e) {
        if (!(e instanceof FAError && e.code === 'E_OOM')) throw e;
        single = { error: e.message };
        log(`T=${T}: one GPU cannot hold it (${e.message}); checking against the float64 reference only`);
      }
      // this rank's shards; the whole q, k, v stay on the host for the reference rows
      const sq = await gatherRows(cuda, q, myQ);
      const sk = await gatherRows(cuda, k, myK);
      const sv = await gatherRows(cuda, v, myK);
      const sdO = await gatherRows(cuda, dO, myQ);
      const [qh, kh, vh] = [await cuda.read(q), await cuda.read(k), await cuda.read(v)];
      for (const t of [q, k, v, dO]) cuda.disposeTensor(t);
      // the ring
      await barrier();
      poolPeak(localRank, true);
      let waitMs = 0;
      let waitStart = 0;
      const ctx = { engine: timed.engine, ops, comm, layout, onEvent: (e) => (e.what === 'wait' ? (e.phase === 'start' ? (waitStart = e.t) : (waitMs += e.t - waitStart)) : undefined) };
      const pass = async (fn, key) => {
        const out = [];
        let last;
        for (let i = 0; i <= reps; i++) {
          if (last) drop(last);
          await barrier();
          timed.reset();
          waitMs = 0;
          const t0 = performance.now();
          last = await fn();
          const ms = performance.now() - t0;
          if (i > 0) out.push({ ms, attnMs: timed.stats[key], waitMs });
        }
        return { runs: out, last };
      };
      const fw = await pass(() => ringForward(ctx, sq, sk, sv, opts), 'forwardMs');
      const bw = await pass(() => ringBackward(ctx, sq, sk, sv, fw.last.out, sdO, fw.last.lse, opts), 'backwardMs');
      const peak = poolPeak(localRank);
      // exactness
      const got = { out: await cuda.read(fw.last.out), lse: await cuda.read(fw.last.lse), dq: await cuda.read(bw.last.dq), dk: await cuda.read(bw.last.dk), dv: await cuda.read(bw.last.dv) };
      let exact;
      if (ref) {
        exact = {};
        for (const name of ['out', 'lse', 'dq', 'dk', 'dv']) exact[name] = diff(got[name], ref[name]);
        // bf16: the ring's float32 merge of bf16 block results against one float32 pass: a few ulps
        exact.pass = ['out', 'dq', 'dk', 'dv'].every((n) => exact[n].rel < 2 ** -6) && exact.lse.maxAbs < 1e-3;
      }
      const local = (i) => locateToken(layout.q, i);
      const mine = [myQ[0].start, myQ[0].end - 1, myQ[myQ.length - 1].start, myQ[myQ.length - 1].end - 1].filter((i, n, a) => a.indexOf(i) === n);
      const rows = mine.map((i) => ({ b: 0, h: 0, i }));
      const dec = new Map();
      const vals = (t) => dec.get(t) ?? dec.set(t, values(t)).get(t);
      const rowOf = (which, { h, i }) => {
        const src = which === 'ring' ? got : ref;
        if (!src) return undefined;
        const n = src.out.shape[1];
        const row = local(i).row;
        return { out: vals(src.out).subarray((row * H + h) * D, (row * H + h) * D + D), lse: src.lse.data[h * n + row] };
      };
      const rowsCheck = checkRows({ q: qh, k: kh, v: vh, opts, rows, rowOf, dtype: 'bf16' });
      const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
      log(`T=${T} ${causal ? 'causal' : 'full'}: 1 GPU fwd ${single.fwdMs?.toFixed(1)} bwd ${single.bwdMs?.toFixed(1)} ms; ring fwd ${med(fw.runs.map((x) => x.ms)).toFixed(1)} bwd ${med(bw.runs.map((x) => x.ms)).toFixed(1)} ms (this rank); peak ${gb(peak)} GB; rows ${rowsCheck.pass ? 'pass' : 'FAIL'}${exact ? `; vs 1 GPU rel out ${exact.out.rel.toExponential(1)} dq ${exact.dq.rel.toExponential(1)} dk ${exact.dk.rel.toExponential(1)}` : ''}`);
      results.push({ T, causal, single: { fwdMs: single.fwdMs, bwdMs: single.bwdMs, peak: single.peak, error: single.error }, ring: { fwd: fw.runs, bwd: bw.runs, peak }, exact, rows: rowsCheck });
      drop(fw.last);
      drop(bw.last);
      for (const t of [sq, sk, sv, sdO]) cuda.disposeTensor(t);
    }
  }
  writeFileSync(`${OUT}/cp-bench-rank${rank}.json`, JSON.stringify({ rank, size, device: cuda.device, nccl: st.available ? st.version : 'n/a', H, D, results }, null, 1));
  await comm.destroy();
  await cuda.dispose();
}
