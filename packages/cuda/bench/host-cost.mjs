// Host cost of one call, by layer: the binding alone (ctx.forward / kvForward with a prebuilt
// spec), the stream-ordered call (CudaBackend.stream), and the awaitable call, issued back to
// back. With --dry the context queues nothing on a GPU (any machine): what remains is N-API,
// spec parsing, op construction and our JavaScript. On the H200 machine run it without --dry.
//   node bench/host-cost.mjs [--dry] [--n 2000]
import { loadNative, CudaBackend } from '@fa/cuda';
import { tensor } from '@fa/core';

const dry = process.argv.includes('--dry');
const N = Number(process.argv[process.argv.indexOf('--n') + 1]) || 2000;
const native = loadNative();
if (!native.ok) throw new Error(native.reason);
const probe = dry ? { ok: true, device: 'dry run', runtime: 0, driver: 0 } : native.binding.probe();
const ctx = new native.binding.Context({ dryRun: dry });
const be = new CudaBackend(ctx, probe);
const s = be.stream;
const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const time = async (label, f, drain) => {
  for (let i = 0; i < 50; i++) f();
  await drain();
  const t = [];
  for (let i = 0; i < N; i++) { const t0 = performance.now(); f(); t.push(performance.now() - t0); if ((i & 63) === 63) await drain(); }
  await drain();
  console.log(`| ${label} | ${(med(t) * 1000).toFixed(1)} |`);
};
const dev = (shape, dtype = 'bf16') => s.upload(tensor(new Uint16Array(shape.reduce((a, b) => a * b, 1)), shape, dtype));

console.log(`| call (${dry ? 'dry-run context' : ctx.device}) | µs a call, median of ${N} |`);
console.log('|---|---|');
{ // dense forward, B4 T4K H16 D128
  const shape = [4, 4096, 16, 128];
  const [q, k, v] = [dev(shape), dev(shape), dev(shape)];
  const r0 = s.forward(q, k, v, {});
  await s.sync();
  const spec = { dtype: 'bf16', f32Path: 'auto', B: 4, H: 16, Hkv: 16, d: 128, totalQ: 4 * 4096, totalK: 4 * 4096, varlen: false,
    cuSeqlensQ: Int32Array.from({ length: 5 }, (_, i) => i * 4096), cuSeqlensK: Int32Array.from({ length: 5 }, (_, i) => i * 4096),
    scale: 1 / Math.sqrt(128), softcap: 0, windowLeft: -1, windowRight: -1, deterministic: false, alibi: null,
    q: q.handle, k: k.handle, v: v.handle, out: r0.out.handle, lse: r0.lse.handle };
  const ps = [], queued = [];
  const drainTraces = async () => { for (const r of await Promise.all(ps.splice(0))) queued.push(r.trace[1] - r.trace[0]); };
  await time('binding ctx.forward (spec built once)', () => ps.push(ctx.forward(spec)), drainTraces);
  if (!dry) console.log(`| of which queueing on the calling thread (Run: CUDA calls, launches; trace) | ${med(queued).toFixed(1)} |`);
  await time('stream.forward', () => { const r = s.forward(q, k, v, {}); s.disposeTensor(r.out); s.disposeTensor(r.lse); }, () => s.sync());
  const aw = [];
  await time('backend.forward (issued, not awaited)', () => aw.push(be.forward(q, k, v, {}).then((r) => { be.disposeTensor(r.out); be.disposeTensor(r.lse); })), async () => { await Promise.all(aw.splice(0)); });
}
{ // KV decode, B1 Tk32K H32/Hkv8 D128
  const [B, H, Hkv, D, cap] = [1, 32, 8, 128, 32768 + 64];
  const kc = dev([B, cap, Hkv, D]), vc = dev([B, cap, Hkv, D]);
  const q = dev([B, 1, H, D]), kn = dev([B, 1, Hkv, D]), vn = dev([B, 1, Hkv, D]);
  const lens = s.uploadIndex(Int32Array.of(32768 - 40));
  await s.sync();
  const kspec = { dtype: 'bf16', B, H, Hkv, d: D, tq: 1, tnew: 1, paged: false, blockSize: cap, numBlocks: B, maxBlocksPerSeq: 1,
    cacheSeqlens: Int32Array.of(32768 - 40), blockTable: null, cacheSeqlensBuf: lens.handle, blockTableBuf: null, alibi: null,
    scale: 1 / Math.sqrt(D), softcap: 0, windowLeft: -1, windowRight: 0, q: q.handle, kCache: kc.handle, vCache: vc.handle,
    kNew: kn.handle, vNew: vn.handle, out: ctx.alloc(B * H * D * 2), lse: ctx.alloc(B * H * 4) };
  const kps = [], kq = [];
  await time('binding ctx.kvForward (spec built once)', () => kps.push(ctx.kvForward(kspec)), async () => { for (const r of await Promise.all(kps.splice(0))) kq.push(r.trace[1] - r.trace[0]); });
  if (!dry) console.log(`| of which queueing on the calling thread (trace) | ${med(kq).toFixed(1)} |`);
  await time('stream.forwardWithKVCache (device lens)', () => { const r = s.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn, causal: true }); s.disposeTensor(r.out); s.disposeTensor(r.lse); }, () => s.sync());
  let n = 32768 - 40;
  await time('stream.writeIndex (1 length)', () => { s.writeIndex(lens, [n]); }, () => s.sync());
}
{
  await time('ctx.alloc + dispose (8 KiB)', () => { const x = ctx.alloc(8192); x.dispose(); }, async () => {});
}
await s.sync();
