// Device script: where an awaited attention call's wall time goes, from the binding's own stamps
// (csrc/binding.cc, Op::stamp_; µs of the monotonic clock, the one process.hrtime reads).
//   node .fa-device/run/node-trace.mjs [OUT.json]
// Rows: bf16, B·T = 16K tokens, D = FA_BENCH_D (128); T from FA_NODE_T (512,4096). For each, the
// median over 30 awaited calls on the raw context (outputs allocated per call, as the backend
// does) of: JS call -> binding entry, the launch on the main thread, binding return -> JS,
// queue -> worker start, launch -> GPU done (seen by the worker), GPU done -> main thread,
// main thread -> JS continuation; then the same calls through CudaBackend, awaited and 30 issued
// back to back (mean), for the total.
import { writeFileSync } from 'node:fs';
import { createCudaBackend, loadNative } from '@fa/cuda';

const D = Number(process.env.FA_BENCH_D ?? 128), N = 30, TOKENS = 16384, H = 2048 / D;
const native = loadNative();
if (!native.ok) throw new Error(native.reason);
const ctx = new native.binding.Context();
const b = await createCudaBackend();
const us = () => Number(process.hrtime.bigint()) / 1000;
const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const rows = [];
for (const causal of [false, true]) {
  for (const T of (process.env.FA_NODE_T ?? '512,4096').split(',').map(Number)) {
    const B = TOKENS / T, n = B * T * H * D * 2, shape = [B, T, H, D];
    const data = new Uint16Array(n / 2).fill(0x3f80);
    const [q, k, v] = [ctx.alloc(n), ctx.alloc(n), ctx.alloc(n)];
    for (const x of [q, k, v]) await ctx.upload(x, data);
    const cu = Int32Array.from({ length: B + 1 }, (_, i) => i * T);
    const spec = () => ({ dtype: 'bf16', f32Path: 'auto', B, H, Hkv: H, d: D, totalQ: B * T, totalK: B * T, varlen: false, cuSeqlensQ: cu, cuSeqlensK: cu, alibi: null,
      scale: 1 / Math.sqrt(D), softcap: 0, windowLeft: -1, windowRight: causal ? 0 : -1, deterministic: false, q, k, v, out: ctx.alloc(n), lse: ctx.alloc(B * T * H * 4) });
    const parts = { jsToBinding: [], launch: [], bindingToJs: [], workerStart: [], gpu: [], wake: [], toContinuation: [], total: [] };
    for (let i = 0; i < N + 5; i++) {
      const s = spec();
      const t0 = us();
      const p = ctx.forward(s);
      const t1 = us();
      const r = await p;
      const t2 = us();
      s.out.dispose(); s.lse.dispose();
      if (i < 5) continue;
      const [c, l, w, g, m] = r.trace;
      parts.jsToBinding.push(c - t0); parts.launch.push(l - c); parts.bindingToJs.push(t1 - l); parts.workerStart.push(w - c);
      parts.gpu.push(g - l); parts.wake.push(m - g); parts.toContinuation.push(t2 - m); parts.total.push(t2 - t0);
    }
    const hq = await b.upload({ kind: 'host', dtype: 'bf16', shape, data });
    const dispose = (r) => { for (const t of Object.values(r)) b.disposeTensor(t); };
    const opts = { causal };
    for (let i = 0; i < 3; i++) dispose(await b.forward(hq, hq, hq, opts));
    const aw = [];
    for (let i = 0; i < N; i++) { const t0 = us(); dispose(await b.forward(hq, hq, hq, opts)); aw.push(us() - t0); }
    let t0 = us();
    (await Promise.all(Array.from({ length: N }, () => b.forward(hq, hq, hq, opts)))).forEach(dispose);
    const piped = (us() - t0) / N;
    const row = { D, causal, T, B, H, ...Object.fromEntries(Object.entries(parts).map(([key, xs]) => [key, Number(median(xs).toFixed(1))])), backendAwaited: Number(median(aw).toFixed(1)), backendPipelined: Number(piped.toFixed(1)) };
    rows.push(row);
    console.log(JSON.stringify(row));
    b.disposeTensor(hq);
    for (const x of [q, k, v]) x.dispose();
  }
}
if (process.argv[2]) writeFileSync(process.argv[2], JSON.stringify(rows));
await b.dispose();
ctx.dispose();
