// Device script: the bench rows (bf16, B·T = 16K tokens, hidden 2048) through the Node binding
// with device tensors, in wall-clock time, as a program would see them:
//   awaited    each call awaited before the next (median of REPS): the kernel plus the host's work
//              (argument checks, output allocation, the launch, the completion's round trip)
//   pipelined  REPS calls issued back to back, then awaited together (mean): what a training loop
//              that does not wait on every call sees
// Writes two JSON files in ratio.py's format (the harness's `bench --json`):
//   node .fa-device/run/node-rows.mjs AWAITED.json PIPELINED.json
// FA_BENCH_D (default 128) picks the head dim, FA_NODE_T the sequence lengths, FA_NODE_REPS
// (default 10) the awaited calls a row, FA_NODE_PIPE (default 30) the calls issued back to back
// (the first call's launch and the last one's completion are spread over them). FA_NODE_DET=1 also
// times the deterministic backward (fields bwdDet, TFLOP/s) and prints its ratio to the default.
import { writeFileSync } from 'node:fs';
import { createCudaBackend } from '@fa/cuda';

const D = Number(process.env.FA_BENCH_D ?? 128), REPS = Number(process.env.FA_NODE_REPS ?? 10), PIPE = Number(process.env.FA_NODE_PIPE ?? 30);
const TOKENS = 16384, HIDDEN = 2048, H = HIDDEN / D;
const b = await createCudaBackend();
// bf16 values of both signs with magnitudes 0.125-2 (an LCG's bits straight into the fields)
const bf16 = (n, seed) => {
  const u = new Uint16Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    u[i] = ((s >>> 16) & 0x8000) | (0x3e00 + (s >>> 23));
  }
  return u;
};
const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const dispose = (r) => { for (const t of Object.values(r)) b.disposeTensor(t); };
// ms a call: each of `calls` awaited in turn, REPS rounds (median per call); and PIPE calls issued
// back to back, then awaited together (mean)
const awaitedMs = async (...calls) => {
  const xs = calls.map(() => []);
  for (let i = 0; i < REPS; i++) {
    for (const [j, call] of calls.entries()) {
      const t0 = performance.now();
      dispose(await call());
      xs[j].push(performance.now() - t0);
    }
  }
  return xs.map(median);
};
const pipelinedMs = async (call) => {
  const t0 = performance.now();
  (await Promise.all(Array.from({ length: PIPE }, call))).forEach(dispose);
  return (performance.now() - t0) / PIPE;
};
const awaited = [], pipelined = [];
for (const causal of [false, true]) {
  for (const T of (process.env.FA_NODE_T ?? '512,1024,2048,4096,8192,16384').split(',').map(Number)) {
    const B = TOKENS / T, shape = [B, T, H, D];
    const [q, k, v, dO] = await Promise.all([1, 2, 3, 4].map((s) => b.upload({ kind: 'host', dtype: 'bf16', shape, data: bf16(B * T * H * D, s) })));
    const opts = { causal };
    const flops = (4 * B * H * T * T * D) / (causal ? 2 : 1);
    const tf = (ms, mul) => Number(((flops * mul) / ms / 1e9).toFixed(1));
    const fwd = await b.forward(q, k, v, opts);
    const fwdCall = () => b.forward(q, k, v, opts);
    const bwdCall = (o = opts) => () => b.backward(q, k, v, fwd.out, dO, fwd.lse, o);
    for (let i = 0; i < 2; i++) dispose(await fwdCall());
    for (let i = 0; i < 2; i++) dispose(await bwdCall()());
    const [fA, bA] = await awaitedMs(fwdCall, bwdCall());
    const fP = await pipelinedMs(fwdCall);
    const bP = await pipelinedMs(bwdCall());
    awaited.push({ D, causal, T, B, H, fwd: tf(fA, 1), bwd: tf(bA, 2.5) });
    pipelined.push({ D, causal, T, B, H, fwd: tf(fP, 1), bwd: tf(bP, 2.5) });
    let det = '';
    if (process.env.FA_NODE_DET === '1') {
      const detCall = bwdCall({ causal, deterministic: true });
      for (let i = 0; i < 2; i++) dispose(await detCall());
      const [dA] = await awaitedMs(detCall);
      const dP = await pipelinedMs(detCall);
      awaited.at(-1).bwdDet = tf(dA, 2.5);
      pipelined.at(-1).bwdDet = tf(dP, 2.5);
      det = `; deterministic bwd awaited ${dA.toFixed(3)} ms (${(bA / dA).toFixed(2)}x of the default), pipelined ${dP.toFixed(3)} ms (${(bP / dP).toFixed(2)}x)`;
    }
    console.log(`D=${D} causal=${causal} T=${T}: awaited fwd ${fA.toFixed(3)} ms bwd ${bA.toFixed(3)} ms; pipelined fwd ${fP.toFixed(3)} ms bwd ${bP.toFixed(3)} ms${det}`);
    dispose(fwd);
    for (const t of [q, k, v, dO]) b.disposeTensor(t);
  }
}
writeFileSync(process.argv[2] ?? 'node-awaited.json', JSON.stringify(awaited, null, 0));
writeFileSync(process.argv[3] ?? 'node-pipelined.json', JSON.stringify(pipelined, null, 0));
await b.dispose();
