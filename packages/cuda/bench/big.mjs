// Device script: one head, T = 100 000, D = 128, bf16, through the Node binding: forward and
// backward complete; times (wall clock around the awaited call, after a warm-up) and memory.
import { createCudaBackend } from '@fa/cuda';

const T = Number(process.env.FA_BIG_T ?? 100000), D = 128;
const b = await createCudaBackend();
// uniform values in (-1, 1) rounded to bf16 (one float32 array, read back through its bits)
const rnd = (n, seed) => {
  const f = new Float32Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) >>> 0;
    f[i] = ((s >>> 8) / 16777216) * 2 - 1 || 1e-3;
  }
  const bits = new Uint32Array(f.buffer), u = new Uint16Array(n);
  for (let i = 0; i < n; i++) u[i] = bits[i] >>> 16;
  return u;
};
const shape = [1, T, 1, D];
const mem0 = b.memInfo().free;
const [q, k, v, dO] = await Promise.all([1, 2, 3, 4].map((s) => b.upload({ kind: 'host', dtype: 'bf16', shape, data: rnd(T * D, s) })));
const mem1 = b.memInfo().free;
let r = await b.forward(q, k, v, { causal: false });
const t0 = performance.now();
const reps = 5;
for (let i = 0; i < reps; i++) {
  b.disposeTensor(r.out); b.disposeTensor(r.lse);
  r = await b.forward(q, k, v);
}
const fwdMs = (performance.now() - t0) / reps;
let g = await b.backward(q, k, v, r.out, dO, r.lse);
const t1 = performance.now();
for (let i = 0; i < 3; i++) {
  for (const t of Object.values(g)) b.disposeTensor(t);
  g = await b.backward(q, k, v, r.out, dO, r.lse);
}
const bwdMs = (performance.now() - t1) / 3;
const host = await b.read(g.dq);
let finite = 0;
for (let i = 0; i < host.data.length; i += 97) if (((host.data[i] >> 7) & 0xff) !== 0xff) finite++;
console.log(`node big: T=${T} D=${D} bf16 forward ${fwdMs.toFixed(2)} ms, backward ${bwdMs.toFixed(2)} ms (wall clock per awaited call); inputs ${(mem0 - mem1) / 1e6} MB; dq finite samples ${finite}`);
await b.dispose();
