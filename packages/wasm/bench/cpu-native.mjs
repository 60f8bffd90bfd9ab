// Device script (the H200 machine's CPU, no GPU use): the native engine of @fa/wasm on another
// x86-64 CPU and 16 cores: the conformance kit on each level it runs, then forward/backward
// GFLOP/s (f32, B 1, H 8, D 64) at every thread count asked, for peer_cpu_sdpa.py's torch rows.
import { formatSummary, runConformance } from '@fa/core/testing';
import { tensor } from '@fa/core';
import { createWasmBackend, nativeTarget } from '@fa/wasm';
import { cpus } from 'node:os';

const t = await nativeTarget();
console.log(`cpu: ${cpus()[0]?.model} x${cpus().length}; native level: ${t.level ?? `none (${t.why})`}`);
for (const level of t.level === 'x86-64-v4' ? ['x86-64-v4', 'x86-64-v3'] : t.level ? [t.level] : []) {
  const be = await createWasmBackend({ native: true, nativeLevel: level });
  const s = await runConformance(be, { count: 160, seed: 5, onResult: (r) => { if (!r.pass) console.log(`FAIL ${level}: ${r.name}: ${r.message}`); } });
  console.log(`kit ${level}: ${formatSummary(s)}`);
  await be.dispose();
}
const H = 8, D = 64;
const r = (n, s) => { const a = new Float32Array(n); let x = s; for (let i = 0; i < n; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const med = (x) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)];
for (const threads of (process.env.THREADS ?? `16,2`).split(',').map(Number)) {
  const be = await createWasmBackend({ native: true, threads });
  await be.warm();
  for (const T of [2048, 4096, 8192]) {
    const n = T * H * D;
    const q = tensor(r(n, 1), [1, T, H, D]), k = tensor(r(n, 2), [1, T, H, D]), v = tensor(r(n, 3), [1, T, H, D]), dO = tensor(r(n, 4), [1, T, H, D]);
    for (const causal of [false, true]) {
      const fl = (4 * H * T * T * D) / (causal ? 2 : 1);
      const fw = [], bw = [];
      let f = await be.forward(q, k, v, { causal });
      await be.backward(q, k, v, f.out, dO, f.lse, { causal });
      for (let i = 0; i < 5; i++) {
        let t0 = performance.now(); f = await be.forward(q, k, v, { causal }); fw.push(performance.now() - t0);
        t0 = performance.now(); await be.backward(q, k, v, f.out, dO, f.lse, { causal }); bw.push(performance.now() - t0);
      }
      console.log(`native ${be.device} T=${T} ${causal ? 'causal' : 'full'}: forward ${(fl / med(fw) / 1e6).toFixed(1)} GFLOP/s, backward ${((2.5 * fl) / med(bw) / 1e6).toFixed(1)} GFLOP/s`);
    }
  }
  await be.dispose();
}
