import { tensor } from '@fa/core';
import { CudaBackend } from './dist/backend.js';
import { loadNative } from './dist/native.js';
const native = loadNative();
const ctx = new native.binding.Context({ dryRun: true });
let last;
const px = new Proxy(ctx, { get: (t, k) => k === 'forward' ? (s) => t.forward(s).then((r) => (last = r, r)) : (typeof t[k] === 'function' ? t[k].bind(t) : t[k]) });
const b = new CudaBackend(px, { ok: true, driver: 0, runtime: 0, device: 'dry' });
const T = 4096, B = 4, H = 16, D = 128;
const host = tensor(new Uint16Array(B * T * H * D).fill(0x3f80), [B, T, H, D], 'bf16');
const [q, k, v] = [await b.upload(host), await b.upload(host), await b.upload(host)];
const us = () => Number(process.hrtime.bigint()) / 1000;
const med = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const pre = [], post = [], tot = [], disp = [];
for (let i = 0; i < 3000; i++) {
  const t0 = us();
  const r = await b.forward(q, k, v, { causal: true });
  const t1 = us();
  b.disposeTensor(r.out); b.disposeTensor(r.lse);
  const t2 = us();
  if (i < 500) continue;
  pre.push(last.trace[0] - t0); post.push(t1 - last.trace[4]); tot.push(t1 - t0); disp.push(t2 - t1);
}
console.log(`backend JS before the binding ${med(pre).toFixed(1)} µs, after the main-thread wake ${med(post).toFixed(1)}, dispose ${med(disp).toFixed(1)}, total ${med(tot).toFixed(1)}`);
