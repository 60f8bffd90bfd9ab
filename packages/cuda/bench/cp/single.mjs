// Device script, one GPU: context parallelism on CUDA as far as one GPU allows.
//   1. NCCL with one rank: found and loaded at run time, a self exchange (the bytes received are
//      the bytes sent), then ring attention through it: the conformance kit (f16/bf16 cases),
//      and at T = 16K bit-identical results to the single-GPU call (with one rank every block
//      result passes through the float32 accumulators unchanged; deterministic: true so that
//      dq is repeatable; the ring's call is varlen with one sequence, the reference dense).
//   2. The ring algorithm with N = 2, 3, 4, 8 ranks on this GPU (a local ring: exchanges are
//      device copies; NCCL refuses two ranks on one GPU): the conformance kit, and at T = 32K
//      (H 4/2, causal and not) results against the single-GPU call and, on sampled rows, the
//      float64 reference.
//   3. What the ring costs around the engine with one rank (merges, accumulators, rounding,
//      the NCCL self exchange of dK/dV): T = 64K, ring pass / engine call.
// Run: pnpm build && bash /work/shared/device/prepare.sh --run packages/cuda/bench/cp
//      then on the GPU machine: source .fa-device/on-device.sh && node .fa-device/run/cp/single.mjs
// Writes cp-single.json under $OUT.
import { createLocalRingBackend, ringBackward, ringForward, tensor, zigzagLayout } from '@fa/core';
import { formatSummary, runConformance } from '@fa/core/testing';
import { createCudaBackend, createNcclCommunicator, cudaShardOps, ncclStatus } from '@fa/cuda';
import { mkdirSync, writeFileSync } from 'node:fs';
import { checkRows, diff, randomTensor, timeIt, values } from './lib.mjs';

const OUT = process.env.OUT;
const report = { steps: {} };
const log = (s) => console.log(s);
const t00 = performance.now();
const cuda = await createCudaBackend();
const ops = cudaShardOps(cuda);
log(`cuda backend on ${cuda.device}`);

// 1. NCCL, one rank --------------------------------------------------------------------------
const st = ncclStatus();
log(st.available ? `NCCL ${st.version} at ${st.path}` : `NCCL unavailable: ${st.reason}`);
report.nccl = st;
let comm;
if (st.available) {
  comm = await createNcclCommunicator(cuda, { rank: 0, size: 1 });
  const n = 1 << 20;
  const bits = new Uint16Array(n);
  for (let i = 0; i < n; i++) bits[i] = (i * 2654435761) >>> 16;
  const a = await cuda.upload(tensor(bits, [n], 'bf16'));
  const b = await ops.alloc('bf16', [n]);
  await comm.exchange([a], [b]);
  const back = await cuda.read(b);
  const same = back.data.every((x, i) => x === bits[i]);
  log(`NCCL self exchange of ${n * 2} bytes: ${same ? 'identical' : 'DIFFERENT'}`);
  report.steps.selfExchange = same;
  const ring1 = createLocalRingBackend({ engine: cuda, ops, ranks: 1, comms: () => [comm] });
  const s = await runConformance(ring1, { dtypes: ['bf16', 'f16'], count: 106, seed: 1, onResult: (r) => r.pass || log(r.message) });
  log(`through NCCL, 1 rank: ${formatSummary(s)}`);
  report.steps.ncclKit = { passed: s.passed, failed: s.failed, skipped: s.skipped.length };
  // bit identity with the single-GPU call
  for (const causal of [true, false]) {
    const T = 16384;
    const [q, k, v, dO] = [await randomTensor(cuda, [1, T, 4, 128], 'bf16', 1), await randomTensor(cuda, [1, T, 2, 128], 'bf16', 2), await randomTensor(cuda, [1, T, 2, 128], 'bf16', 3), await randomTensor(cuda, [1, T, 4, 128], 'bf16', 4)];
    const opts = { causal, deterministic: true }; // dq without atomics: bitwise repeatable
    const f = await cuda.forward(q, k, v, opts);
    const g = await cuda.backward(q, k, v, f.out, dO, f.lse, opts);
    const ctx = { engine: cuda, ops, comm, layout: zigzagLayout(1, T) };
    const rf = await ringForward(ctx, q, k, v, opts);
    const rg = await ringBackward(ctx, q, k, v, rf.out, dO, rf.lse, opts);
    const d = {};
    for (const [name, x, y] of [['out', rf.out, f.out], ['lse', rf.lse, f.lse], ['dq', rg.dq, g.dq], ['dk', rg.dk, g.dk], ['dv', rg.dv, g.dv]]) d[name] = diff(await cuda.read(x), await cuda.read(y));
    const ok = Object.values(d).every((x) => x.identical);
    log(`NCCL ring, 1 rank, T=${T} H=4/2 D=128 bf16 ${causal ? 'causal' : 'full'}: ${ok ? 'bit-identical to the single-GPU call' : `DIFFERS ${JSON.stringify(d)}`}`);
    report.steps[`identical_${causal ? 'causal' : 'full'}`] = { ok, d };
    for (const t of [q, k, v, dO, f.out, f.lse, g.dq, g.dk, g.dv, rf.out, rf.lse, rg.dq, rg.dk, rg.dv]) cuda.disposeTensor(t);
  }
}

// 2. N ranks on this GPU ---------------------------------------------------------------------
for (const N of [2, 3, 4, 8]) {
  const ring = createLocalRingBackend({ engine: cuda, ops, ranks: N });
  const s = await runConformance(ring, { dtypes: ['bf16', 'f16'], count: 106, seed: N, onResult: (r) => r.pass || log(r.message) });
  log(`local ring, ${N} ranks: ${formatSummary(s)}`);
  report.steps[`kit_${N}`] = { passed: s.passed, failed: s.failed, skipped: s.skipped.length };
}
{
  const T = 32768;
  const q = await randomTensor(cuda, [1, T, 4, 128], 'bf16', 11);
  const k = await randomTensor(cuda, [1, T, 2, 128], 'bf16', 12);
  const v = await randomTensor(cuda, [1, T, 2, 128], 'bf16', 13);
  const dO = await randomTensor(cuda, [1, T, 4, 128], 'bf16', 14);
  const [qh, kh, vh, dOh] = [await cuda.read(q), await cuda.read(k), await cuda.read(v), await cuda.read(dO)];
  for (const causal of [true, false]) {
    const opts = { causal };
    const f = await cuda.forward(qh, kh, vh, opts);
    const g = await cuda.backward(qh, kh, vh, f.out, dOh, f.lse, opts);
    const rows = [0, 1, 4095, 8191, 16384, 20000, 32766, 32767].flatMap((i) => [0, 3].map((h) => ({ b: 0, h, i })));
    for (const N of [2, 4, 8]) {
      const ring = createLocalRingBackend({ engine: cuda, ops, ranks: N });
      const rf = await ring.forward(qh, kh, vh, opts);
      const rg = await ring.backward(qh, kh, vh, rf.out, dOh, rf.lse, opts);
      const d = { out: diff(rf.out, f.out), lse: diff(rf.lse, f.lse), dq: diff(rg.dq, g.dq), dk: diff(rg.dk, g.dk), dv: diff(rg.dv, g.dv) };
      const decoded = new Map();
      const dec = (t) => decoded.get(t) ?? decoded.set(t, values(t)).get(t);
      const of = (t, lse, { b, h, i }) => ({ out: dec(t).subarray(((b * T + i) * 4 + h) * 128, ((b * T + i) * 4 + h) * 128 + 128), lse: lse.data[(b * 4 + h) * T + i] });
      const rowsCheck = checkRows({ q: qh, k: kh, v: vh, opts, rows, dtype: 'bf16', rowOf: (w, r) => (w === 'ring' ? of(rf.out, rf.lse, r) : of(f.out, f.lse, r)) });
      log(`local ring N=${N}, T=${T} H=4/2 D=128 bf16 ${causal ? 'causal' : 'full'}: vs single GPU max|Δ| out ${d.out.maxAbs.toExponential(2)} dq ${d.dq.maxAbs.toExponential(2)} dk ${d.dk.maxAbs.toExponential(2)} dv ${d.dv.maxAbs.toExponential(2)} lse ${d.lse.maxAbs.toExponential(2)}; rel ‖Δ‖ out ${d.out.rel.toExponential(2)} dq ${d.dq.rel.toExponential(2)} dk ${d.dk.rel.toExponential(2)}; sampled rows vs float64: ring ${rowsCheck.errRing.toExponential(2)}, single ${rowsCheck.errSingle.toExponential(2)}, bound ${rowsCheck.bound.toExponential(2)}, lse ${rowsCheck.lseErr.toExponential(2)} ${rowsCheck.pass ? 'PASS' : 'FAIL'}`);
      report.steps[`T32K_N${N}_${causal ? 'causal' : 'full'}`] = { d, rows: rowsCheck };
    }
  }
  for (const t of [q, k, v, dO]) cuda.disposeTensor(t);
}

// 3. the ring's own cost with one rank --------------------------------------------------------
if (comm) {
  const T = 65536;
  const q = await randomTensor(cuda, [1, T, 1, 128], 'bf16', 21);
  const k = await randomTensor(cuda, [1, T, 1, 128], 'bf16', 22);
  const v = await randomTensor(cuda, [1, T, 1, 128], 'bf16', 23);
  const dO = await randomTensor(cuda, [1, T, 1, 128], 'bf16', 24);
  const opts = { causal: true };
  const ctx = { engine: cuda, ops, comm, layout: zigzagLayout(1, T) };
  const drop = (r) => Object.values(r).forEach((t) => cuda.disposeTensor(t));
  const f = await cuda.forward(q, k, v, opts);
  const eF = await timeIt(() => cuda.forward(q, k, v, opts), 5, drop);
  const eB = await timeIt(() => cuda.backward(q, k, v, f.out, dO, f.lse, opts), 5, drop);
  const rF = await timeIt(() => ringForward(ctx, q, k, v, opts), 5, drop);
  const rB = await timeIt(() => ringBackward(ctx, q, k, v, f.out, dO, f.lse, opts), 5, drop);
  log(`ring cost, 1 rank (NCCL), T=${T} H=1 D=128 bf16 causal: forward ${rF.toFixed(2)} ms vs engine ${eF.toFixed(2)} ms (×${(rF / eF).toFixed(3)}), backward ${rB.toFixed(2)} ms vs ${eB.toFixed(2)} ms (×${(rB / eB).toFixed(3)})`);
  report.steps.overhead = { T, engineFwdMs: eF, ringFwdMs: rF, engineBwdMs: eB, ringBwdMs: rB };
  await comm.destroy();
}
log(`done in ${((performance.now() - t00) / 1000).toFixed(0)} s`);
if (OUT) {
  mkdirSync(OUT, { recursive: true });
  writeFileSync(`${OUT}/cp-single.json`, JSON.stringify(report, null, 1));
}
await cuda.dispose();
