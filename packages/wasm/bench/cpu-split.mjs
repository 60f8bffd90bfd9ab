// Device script: where a native forward's time goes on this CPU, one thread: the matrix micro-kernels
// alone (fa_test_mm, 256x64x64), then forward/backward CPU time per tile shape, v4 and v3.
import { tensor } from '@fa/core';
import { addonUrl, createWasmBackend, loadAddon } from '@fa/wasm';

for (const level of ['x86-64-v4', 'x86-64-v3']) {
  const a = await loadAddon(addonUrl(level));
  const mem = new WebAssembly.Memory({ initial: 512, maximum: 512, shared: true });
  const k = a.bind(new Uint8Array(mem.buffer));
  const f = new Float32Array(mem.buffer); for (let i = 0; i < f.length; i++) f[i] = Math.random();
  const A = 1 << 20, B = 8 << 20, C = 16 << 20;
  for (const [form, m, n, kk, lda] of [[0, 256, 64, 64, 512], [1, 256, 64, 64, 64], [2, 64, 64, 256, 64]]) {
    let best = Infinity;
    for (let rep = 0; rep < 20; rep++) { const t0 = performance.now(); for (let i = 0; i < 200; i++) k.fa_test_mm(form, m, n, kk, A, lda, B, n, C, n); best = Math.min(best, performance.now() - t0); }
    console.log(`${level} mm form ${form} m${m} n${n} k${kk}: ${(2 * m * n * kk * 200 / best / 1e6).toFixed(1)} GFLOP/s one thread`);
  }
}
const T = 2048, H = 8, D = 64;
const r = (n, s) => { const a = new Float32Array(n); let x = s; for (let i = 0; i < n; i++) { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; a[i] = x / 2 ** 32 - 0.5; } return a; };
const n = T * H * D;
const q = tensor(r(n, 1), [1, T, H, D]), kk = tensor(r(n, 2), [1, T, H, D]), v = tensor(r(n, 3), [1, T, H, D]), dO = tensor(r(n, 4), [1, T, H, D]);
for (const [level, tiles] of [['x86-64-v4', undefined], ['x86-64-v4', { br: 64, bc: 64 }], ['x86-64-v4', { br: 64, bc: 32 }], ['x86-64-v3', undefined]]) {
  const be = await createWasmBackend({ native: true, nativeLevel: level, threads: 0, inlineBelowFlops: 0, ...(tiles ? { tiles } : {}) });
  for (const causal of [false, true]) {
    const fl = (4 * H * T * T * D) / (causal ? 2 : 1);
    let bf = Infinity, bb = Infinity, o;
    for (let i = 0; i < 4; i++) {
      let c0 = process.cpuUsage(); o = await be.forward(q, kk, v, { causal }); let c = process.cpuUsage(c0); bf = Math.min(bf, (c.user + c.system) / 1e3);
      c0 = process.cpuUsage(); await be.backward(q, kk, v, o.out, dO, o.lse, { causal }); c = process.cpuUsage(c0); bb = Math.min(bb, (c.user + c.system) / 1e3);
    }
    console.log(`${level} tiles ${JSON.stringify(be.tileSizes(D, 'forward'))} T=${T} ${causal ? 'causal' : 'full'}: forward ${bf.toFixed(1)} ms = ${(fl / bf / 1e6).toFixed(1)}, backward ${bb.toFixed(1)} ms = ${(2.5 * fl / bb / 1e6).toFixed(1)} GFLOP/s one thread`);
  }
  await be.dispose();
}
