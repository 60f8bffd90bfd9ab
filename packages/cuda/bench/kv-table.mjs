// Merges the KV-cache benchmark files of one device run (dev/kv_harness.cu bench --json, the
// torch peers, the Node timings) into the markdown table BENCHMARKS.md keeps.
//   node kv-table.mjs DIR   (DIR holds kv_bench.json, peers_decode.json, kv-node.json)
import { existsSync, readFileSync } from 'node:fs';

const dir = process.argv[2] ?? '.';
const load = (f) => (existsSync(`${dir}/${f}`) ? JSON.parse(readFileSync(`${dir}/${f}`, 'utf8')) : []);
const ours = load('kv_bench.json');
const peers = load('peers_decode.json');
const node = load('kv-node.json').timing ?? [];
const shapes = [[1, 32768], [8, 32768], [64, 4096], [1, 131072]];
const f1 = (x) => (x === undefined ? '–' : x.toFixed(1));
console.log('| B | Tk | ours contiguous µs (TB/s) | paged 64 | paged 256 | +1 appended | torch flash | torch cuDNN | ours / faster peer (speed) | target | Node µs/call | Node overhead | decode-loop step |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const [B, Tk] of shapes) {
  const o = (layout, tnew = 0) => ours.find((r) => r.B === B && r.Tk === Tk && r.layout === layout && r.tnew === tnew);
  const p = (name) => peers.find((r) => r.B === B && r.Tk === Tk && r.decode === name && r.us !== undefined);
  const c = o('contig');
  const best = Math.min(p('flash')?.us ?? Infinity, p('cudnn')?.us ?? Infinity);
  const ratio = c && Number.isFinite(best) ? best / c.us : undefined;
  const target = B >= 8 ? 0.9 : 0.7;
  const n = node.find((r) => r.B === B && r.Tk === Tk);
  const pct = (x) => (x && c ? ` (${((x.us / c.us - 1) * 100).toFixed(0)}%)` : '');
  console.log(`| ${B} | ${Tk / 1024}K | ${c ? `${f1(c.us)} (${(c.GBps / 1000).toFixed(2)})` : '–'} | ${f1(o('paged64')?.us)}${pct(o('paged64'))} | ${f1(o('paged256')?.us)}${pct(o('paged256'))} | ${f1(o('contig', 1)?.us)} | ${f1(p('flash')?.us)} | ${f1(p('cudnn')?.us)} | ${ratio ? `${ratio.toFixed(2)}×` : '–'}${ratio ? (ratio >= target ? ' ✓' : ' ✗') : ''} | ≥ ${target}× | ${f1(n?.nodeUs)} | ${n && c ? f1(n.nodeUs - c.us) : '–'} | ${f1(n?.loopStepUs)} |`);
}
