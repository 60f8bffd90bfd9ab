/**
 * `fa demo --report FILE.html`: one self-contained HTML file (inline CSS and SVG, no scripts,
 * no external requests) with the parts of the story and the charts.
 */
import { esc } from './story/charts.js';
import { intensityChart, ioChart, memoryChart, throughputChart } from './story/figures.js';
import { fmtBytes } from './story/format.js';
import type { DemoResult } from './story/result.js';
import { header, part1, part2, part3, part4, part5, part6, part7, part8, part9 } from './story/text.js';

const CSS = `
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
pre { background: #f6f8fa; padding: 0.8em 1em; overflow-x: auto; font-size: 13px; line-height: 1.4; }
.verdict { display: inline-block; padding: 0.2em 0.6em; border-radius: 4px; font-weight: 600; }
.ok { background: #e3f5e8; color: #1b6e33; } .bad { background: #fde8e6; color: #a3261b; }
.charts svg { max-width: 100%; height: auto; margin: 0.6em 0; border: 1px solid #eee; }
.meta { color: #666; font-size: 0.9em; }
`;

function pre(lines: readonly string[]): string {
  return `<pre>${esc(lines.join('\n').replace(/^\n+/, ''))}</pre>`;
}

/** Strips the "N. " title line a part starts with (the report has its own headings). */
function body(lines: readonly string[]): string[] {
  const l = lines.filter((x, i) => !(i <= 1 && (x === '' || /^\d\. /.test(x))));
  return l;
}

export function reportHtml(r: DemoResult): string {
  const limits = [{ y: r.machine.ramTotal, label: `this machine's RAM: ${fmtBytes(r.machine.ramTotal)}` }];
  if (r.machine.gpuTotal !== null) limits.push({ y: r.machine.gpuTotal, label: `GPU memory: ${fmtBytes(r.machine.gpuTotal)}` });
  const verdict = r.exactness.verified ? '<span class="verdict ok">verified exact</span>' : '<span class="verdict bad">NOT verified</span>';
  const title = `fa demo: ${r.config.T.toLocaleString('en-US')} tokens on ${r.engine.name} (${r.engine.device})`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>${CSS}</style>
</head>
<body>
<h1>Exact attention at 100K tokens, tile by tile</h1>
<p class="meta">${esc(title)} · ${esc(r.engine.dtype)}, one head, D = ${r.config.D}${r.config.causal ? ', causal' : ''} · ${esc(r.machine.runtime)}, ${r.machine.cpus} CPUs · ${esc(r.createdAt)} · ${verdict}</p>
${pre(header(r).slice(2))}
<h2>1. Naive attention at ${r.naive.T.toLocaleString('en-US')} tokens</h2>
${pre(body(part1(r)))}
<h2>2. Exact FlashAttention on this machine</h2>
${pre(body(part2(r)))}
<h2>3. Exactness against the float64 reference ${verdict}</h2>
${pre(body(part3(r)))}
<h2>4. Memory, traffic and time</h2>
<div class="charts">
${memoryChart({ dtype: r.engine.dtype, points: r.memory.points, limits })}
${ioChart(r.config.D, r.engine.dtype)}
${intensityChart(r.config.D, r.engine.dtype)}
${throughputChart(r.throughput)}
</div>
${pre(body(part4(r)))}
<h2>5. The online softmax, step by step</h2>
${pre(body(part5(r)))}
<h2>6. The backward pass: recompute instead of storing P</h2>
${pre(body(part6(r)))}
${r.generation ? `<h2>7. Generating with a KV cache</h2>\n${pre(body(part7(r)))}` : ''}
${r.parallel ? `<h2>8. Past one GPU: context parallelism (ring attention)</h2>\n${pre(body(part8(r)))}` : ''}
${r.training ? `<h2>9. A model on the engines: a small GPT trains, then writes</h2>\n${pre(body(part9(r)))}` : ''}
<p class="meta">Written by <code>fa demo --report</code>. Memory: dots are measurements, lines the models
(naive: S and P of T² entries; flash: O(T) row state). Traffic and intensity: @fa/core's IO model
(Dao et al. 2022), 192 KiB of on-chip memory, the tiled schedule in FlashAttention-2's loop order (Dao 2023),
as the engines run it. FLOPs: forward 4·T²·D (half when causal), backward 2.5×.</p>
</body>
</html>
`;
}
