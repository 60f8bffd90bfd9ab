// cuda f32 forward at long rows against float64 rows (KERNEL_NOTES.md, "f32 at long rows"): the split
// tensor-core path (auto; before F32_SPLIT_MAX_KEYS) against FFMA, worst of 7 sampled rows; on the GPU machine:
//   source .fa-device/on-device.sh && node .fa-device/run/f32-long.mjs   (after prepare.sh --run packages/cuda/bench/f32-long.mjs)
import { referenceRows, tensor } from '@fa/core';
import { createCudaBackend } from '@fa/cuda';
function rng(seed) { let a = seed >>> 0; return () => { a = (a + 0x6d2b79f5) >>> 0; let t = a; t = Math.imul(t ^ (t >>> 15), t | 1); t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; }; }
function gaussian(n, next) { const f = new Float32Array(n); for (let i = 0; i < n; i += 2) { const r = Math.sqrt(-2 * Math.log(1 - next())); const th = 2 * Math.PI * next(); f[i] = r * Math.cos(th); if (i + 1 < n) f[i + 1] = r * Math.sin(th); } return f; }
const D = 128;
for (const T of [6144, 8192, 12288, 100000]) {
  const next = rng(1);
  const q = tensor(gaussian(T * D, next), [1, T, 1, D]), k = tensor(gaussian(T * D, next), [1, T, 1, D]), v = tensor(gaussian(T * D, next), [1, T, 1, D]);
  const rows = [0, 1, 7, Math.floor(T / 3), Math.floor(T / 2), T - 2, T - 1].map((i) => ({ b: 0, h: 0, i }));
  const ref = referenceRows(q, k, v, {}, rows);
  for (const path of ['tensor-cores', 'ffma']) {
    const b = await createCudaBackend({ f32: path });
    const r = await b.forward(q, k, v, {});
    const t0 = performance.now();
    const r2 = await b.forward(q, k, v, {});
    const ms = performance.now() - t0;
    void r2;
    let worst = 0, wi = -1;
    for (const [j, row] of rows.entries()) {
      let num = 0, den = 0;
      for (let d = 0; d < D; d++) { const x = r.out.data[row.i * D + d], y = ref[j].out[d]; num += (x - y) ** 2; den += y * y; }
      const e = Math.sqrt(num / den);
      if (e > worst) { worst = e; wi = row.i; }
    }
    console.log(`T ${T} f32 ${path}: worst row rel error ${worst.toExponential(2)} (row ${wi}); forward ${ms.toFixed(1)} ms (${(4 * T * T * D / ms / 1e9).toFixed(1)} TFLOP/s, host tensors)`);
    await b.dispose();
  }
}
