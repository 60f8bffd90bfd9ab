#!/usr/bin/env node
/**
 * Device check: a backward whose workspace does not fit. Device memory is filled (through the
 * context's own allocations) until only `leave` MB stay free, for several values of `leave`
 * around the backward's need (three 16 MB outputs, then a 32 MB dQ accumulator, bf16 B 1 T 4096
 * H 16 D 128, the deterministic backward: bitwise reproducible, unlike the default's dQ, whose
 * additions land in any order); each call must either succeed bit-identically or reject with
 * E_OOM, never hang or crash, and the backend must work afterwards. Exercises the binding's hand-over of a call
 * whose allocation fails on the main thread to the worker (which synchronises, trims, retries).
 *   node .fa-device/run/oom-check.mjs
 */
import { createCudaBackend } from '@fa/cuda';

const b = await createCudaBackend();
const ctx = b.context;
const T = 4096, H = 16, D = 128, n = T * H * D, shape = [1, T, H, D];
const data = (seed) => { const u = new Uint16Array(n); let s = seed; for (let i = 0; i < n; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; u[i] = ((s >>> 16) & 0x8000) | (0x3e00 + (s >>> 23)); } return u; };
const [q, k, v, dO] = await Promise.all([1, 2, 3, 4].map((s) => b.upload({ kind: 'host', dtype: 'bf16', shape, data: data(s) })));
const f = await b.forward(q, k, v, { causal: true });
const opts = { causal: true, deterministic: true };
const bits = async (g) => Promise.all([g.dq, g.dk, g.dv].map(async (t) => Buffer.from((await b.read(t)).data.buffer).toString('base64')));
const ref = await bits(await b.backward(q, k, v, f.out, dO, f.lse, opts));
const MB = 1 << 20;
const outcomes = [];
for (const leave of [20, 40, 56, 64, 72, 80, 96, 128]) {
  const filler = [];
  for (const chunk of [1024 * MB, 256 * MB, 64 * MB, 16 * MB, 4 * MB, 1 * MB]) {
    while (b.memInfo().free - chunk > leave * MB) {
      try { filler.push(ctx.alloc(chunk)); } catch { break; }
    }
  }
  const free = (b.memInfo().free / MB).toFixed(0);
  const t0 = performance.now();
  const pending = [0, 1, 2].map(() => b.backward(q, k, v, f.out, dO, f.lse, opts).then(async (g) => ((await bits(g)).join() === ref.join() ? 'ok' : 'WRONG'), (e) => `${e.code}: ${String(e.message).slice(0, 90)}`));
  const r = await Promise.all(pending);
  outcomes.push(`leave ${leave} MB (free ${free} MB): ${r.join(' | ')} (${(performance.now() - t0).toFixed(0)} ms)`);
  for (const x of filler) x.dispose();
}
for (const o of outcomes) console.log(o);
const after = await bits(await b.backward(q, k, v, f.out, dO, f.lse, opts));
console.log(`after: backward ${after.join() === ref.join() ? 'bit-identical' : 'DIFFERENT'}; no WRONG above: ${!outcomes.some((o) => o.includes('WRONG'))}`);
await b.dispose();
