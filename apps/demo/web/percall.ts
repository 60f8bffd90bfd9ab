/**
 * Host cost per WebGPU call in a browser (issue 24): the page behind web/percall.html. Chromium
 * sends WebGPU calls to its GPU process over IPC, so its per-call costs differ from Dawn's in
 * Node (packages/webgpu/bench/per-call.mjs measures those, with a per-method breakdown).
 * Writes a markdown table into #out and the numbers into window.__perCall;
 * body[data-status] is 'done' or 'error'.
 */
import { tensor, type AttentionBackend, type ForwardResult } from '@fa/core';

const calls = Number(new URLSearchParams(location.search).get('calls') ?? 300);
const out = document.querySelector('#out')!;
const rand = (n: number) => Float32Array.from({ length: n }, () => Math.random() - 0.5);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

async function measure(b: AttentionBackend & { sync(): Promise<void> }, name: string, call: () => Promise<ForwardResult>) {
  const free = (r: ForwardResult) => {
    b.disposeTensor(r.out);
    b.disposeTensor(r.lse);
  };
  for (let i = 0; i < 30; i++) free(await call());
  await b.sync();
  const aw: number[] = [];
  for (let i = 0; i < calls; i++) {
    const t0 = performance.now();
    free(await call());
    aw.push(performance.now() - t0);
  }
  await b.sync();
  const t1 = performance.now();
  const pending: Promise<ForwardResult>[] = [];
  for (let i = 0; i < calls; i++) pending.push(call());
  (await Promise.all(pending)).forEach(free);
  await b.sync();
  const pipelined = (performance.now() - t1) / calls;
  const sy: number[] = [];
  for (let i = 0; i < 30; i++) {
    free(await call());
    const t0 = performance.now();
    await b.sync();
    sy.push(performance.now() - t0);
  }
  return { name, awaited: 1000 * median(aw), pipelined: 1000 * pipelined, sync: 1000 * median(sy) };
}

async function main(): Promise<void> {
  const { createWebGPUBackend } = await import('@fa/webgpu');
  const b = await createWebGPUBackend();
  const [B, T, H, D] = [1, 16, 1, 64];
  const up = (n: number, shape: number[]) => b.upload(tensor(rand(n), shape));
  const [q, k, v] = await Promise.all([0, 1, 2].map(() => up(B * T * H * D, [B, T, H, D])));
  const rows = [await measure(b, 'forward B1 T16 H1 D64 f32', () => b.forward(q, k, v, { causal: true }))];
  const cap = 64;
  const kc = await up(cap * D, [1, cap, 1, D]), vc = await up(cap * D, [1, cap, 1, D]);
  const q1 = await up(4 * D, [1, 1, 4, D]), kn = await up(D, [1, 1, 1, D]), vn = await up(D, [1, 1, 1, D]);
  const lens = await b.uploadIndex(Int32Array.of(40));
  rows.push(await measure(b, 'KV decode B1 H4/1 D64 f32, 40 cached', () => b.forwardWithKVCache(q1, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn })));
  (window as unknown as { __perCall: unknown }).__perCall = { adapter: b.device, userAgent: navigator.userAgent, calls, rows };
  out.textContent = [
    `adapter: ${b.device}; ${navigator.userAgent}; ${calls} calls`,
    '| call | awaited (median) | pipelined (mean) | sync() after one call |',
    '|---|---|---|---|',
    ...rows.map((r) => `| ${r.name} | ${r.awaited.toFixed(0)} µs | ${r.pipelined.toFixed(0)} µs | ${r.sync.toFixed(0)} µs |`),
  ].join('\n');
  document.body.dataset.status = 'done';
}

main().catch((e) => {
  out.textContent = `Error: ${e instanceof Error ? e.message : String(e)}`;
  document.body.dataset.status = 'error';
});
