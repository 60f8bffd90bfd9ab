// Merges the KV-cache benchmark files of one device run (dev/kv_harness.cu bench --json, the
// torch peers, the Node timings) into the markdown tables BENCHMARKS.md keeps: bf16 at the
// issue-12 shapes (the tensor-core kernel), f32 (the FFMA kernel), bf16 at D = 100 (FFMA, 8-byte rows).
//   node kv-table.mjs DIR   (DIR holds kv_bench.json, peers_decode.json, kv-node.json)
import { existsSync, readFileSync } from 'node:fs';

const dir = process.argv[2] ?? '.';
const load = (f) => (existsSync(`${dir}/${f}`) ? JSON.parse(readFileSync(`${dir}/${f}`, 'utf8')) : []);
const ours = load('kv_bench.json');
const peers = load('peers_decode.json');
const node = load('kv-node.json').timing ?? [];
const shapes = [[1, 32768], [8, 32768], [64, 4096], [1, 131072]];
const f1 = (x) => (x === undefined ? '–' : x.toFixed(1));
// rows of runs before f32 carry no dtype / d: they are bf16, D = 128
const is = (r, dtype, d) => (r.dtype ?? 'bf16') === dtype && (r.d ?? 128) === d;
const mine = (dtype, d, B, Tk, layout, tnew = 0) => ours.find((r) => is(r, dtype, d) && r.B === B && r.Tk === Tk && r.layout === layout && r.tnew === tnew);
const peer = (dtype, name, B, Tk) => peers.find((r) => (r.dtype ?? 'bf16') === dtype && r.B === B && r.Tk === Tk && r.decode === name && r.us !== undefined);
const tbs = (c) => (c ? `${f1(c.us)} (${(c.GBps / 1000).toFixed(2)})` : '–');

console.log('bf16, D = 128 (tensor cores):\n');
console.log('| B | Tk | ours contiguous µs (TB/s) | paged 64 | paged 256 | +1 appended | torch flash | torch cuDNN | ours / faster peer (speed) | target | Node µs/call | Node overhead | decode-loop step |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const [B, Tk] of shapes) {
  const o = (layout, tnew = 0) => mine('bf16', 128, B, Tk, layout, tnew);
  const p = (name) => peer('bf16', name, B, Tk);
  const c = o('contig');
  const best = Math.min(p('flash')?.us ?? Infinity, p('cudnn')?.us ?? Infinity);
  const ratio = c && Number.isFinite(best) ? best / c.us : undefined;
  const target = B >= 8 ? 0.9 : 0.7;
  const n = node.find((r) => (r.dtype ?? 'bf16') === 'bf16' && r.B === B && r.Tk === Tk);
  const pct = (x) => (x && c ? ` (${((x.us / c.us - 1) * 100).toFixed(0)}%)` : '');
  console.log(`| ${B} | ${Tk / 1024}K | ${tbs(c)} | ${f1(o('paged64')?.us)}${pct(o('paged64'))} | ${f1(o('paged256')?.us)}${pct(o('paged256'))} | ${f1(o('contig', 1)?.us)} | ${f1(p('flash')?.us)} | ${f1(p('cudnn')?.us)} | ${ratio ? `${ratio.toFixed(2)}×` : '–'}${ratio ? (ratio >= target ? ' ✓' : ' ✗') : ''} | ≥ ${target}× | ${f1(n?.nodeUs)} | ${n && c ? f1(n.nodeUs - c.us) : '–'} | ${f1(n?.loopStepUs)} |`);
}

if (ours.some((r) => r.dtype === 'f32')) {
  console.log('\nf32, D = 128 (FFMA; twice the bytes of bf16):\n');
  console.log('| B | Tk | ours contiguous µs (TB/s) | paged 64 | +1 appended | torch efficient (K/V expanded) | torch math | ours / faster peer | vs bf16 per byte | Node µs/call |');
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const [B, Tk] of shapes) {
    const c = mine('f32', 128, B, Tk, 'contig');
    const e = peer('f32', 'efficient-expanded', B, Tk), m = peer('f32', 'math', B, Tk);
    const best = Math.min(e?.us ?? Infinity, m?.us ?? Infinity);
    const bf = mine('bf16', 128, B, Tk, 'contig');
    const n = node.find((r) => r.dtype === 'f32' && r.B === B && r.Tk === Tk);
    console.log(`| ${B} | ${Tk / 1024}K | ${tbs(c)} | ${f1(mine('f32', 128, B, Tk, 'paged64')?.us)} | ${f1(mine('f32', 128, B, Tk, 'contig', 1)?.us)} | ${f1(e?.us)} | ${f1(m?.us)} | ${c && Number.isFinite(best) ? `${(best / c.us).toFixed(2)}×` : '–'} | ${c && bf ? `${(c.GBps / bf.GBps).toFixed(2)}` : '–'} | ${f1(n?.nodeUs)} |`);
  }
}
if (ours.some((r) => r.d === 100)) {
  console.log('\nbf16, D = 100 (FFMA, 8-byte row loads; not pipelined):\n');
  console.log('| B | Tk | ours contiguous µs (TB/s) | vs D = 128 per byte |');
  console.log('|---|---|---|---|');
  for (const [B, Tk] of shapes) {
    const c = mine('bf16', 100, B, Tk, 'contig'), bf = mine('bf16', 128, B, Tk, 'contig');
    console.log(`| ${B} | ${Tk / 1024}K | ${tbs(c)} | ${c && bf ? (c.GBps / bf.GBps).toFixed(2) : '–'} |`);
  }
}
