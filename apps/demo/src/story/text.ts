/**
 * The story as text, part by part, from a DemoResult: what `fa demo` prints (every line at most
 * 80 columns), what the HTML report embeds, and what the web page shows beside its charts.
 */
import { bytesPerElement } from '@fa/core';
import { fmtBytes, fmtErr, fmtInt, fmtRate, fmtRatio, fmtSeconds, fmtTokens, wrap } from './format.js';
import type { DemoResult, IoSummary } from './result.js';

export const WIDTH = 80;

const para = (text: string, indent = '   '): string[] => wrap(text, WIDTH, indent);
/** Keeps a formula on one line when wrapping (no-break spaces; the terminal shows spaces). */
const nb = (s: string): string => s.replace(/ /g, '\u00a0');

/** Truncates to the width with an ellipsis. */
export function fit(s: string, width = WIDTH): string {
  return [...s].length <= width ? s : [...s].slice(0, width - 1).join('') + '…';
}

/** Columns padded to a common width; `align` gives 'l' or 'r' per column (default: first left, rest right). */
function table(rows: readonly (readonly string[])[], indent = '   ', align?: string): string[] {
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => [...(r[i] ?? '')].length)));
  const al = (i: number) => (align ? align[i] ?? 'r' : i === 0 ? 'l' : 'r');
  return rows.map((r) =>
    fit((indent + r.map((c, i) => (al(i) === 'l' ? c.padEnd(w[i]) : c.padStart(w[i]))).join('   ')).replace(/\s+$/, '')),
  );
}

/** On-chip sizes are binary (the paper's 192 KiB). */
function kib(b: number): string {
  return b % 1024 === 0 ? `${b / 1024} KiB` : fmtBytes(b);
}

export function header(r: Pick<DemoResult, 'engine' | 'config' | 'candidates'>): string[] {
  const c = r.config;
  const lines = [
    'fa demo: exact attention at 100K tokens, tile by tile',
    '',
    fit(`Engine: ${r.engine.name} (${r.engine.device}), ${r.engine.dtype}, one head, D = ${c.D}${c.causal ? ', causal' : ''}`),
  ];
  for (const k of r.candidates) lines.push(fit(`  ${k.name.padEnd(7)} ${k.status}`));
  return lines;
}

export function part1(r: Pick<DemoResult, 'naive' | 'engine' | 'machine'>): string[] {
  const n = r.naive;
  const e = bytesPerElement(r.engine.dtype);
  const lines = [
    '',
    `1. Naive attention at ${fmtInt(n.T)} tokens, one head`,
    ...para(`The scores S = QKᵀ have ${fmtInt(n.T)}² = ${fmtInt(n.entries)} entries; naive attention writes all of them to memory, then the probabilities P = softmax(S) again:`),
    ...table([
      ['', 'S', 'S + P'],
      ['bf16', fmtBytes(n.scoresBytes.bf16), fmtBytes(2 * n.scoresBytes.bf16)],
      ['f32', fmtBytes(n.scoresBytes.f32), fmtBytes(2 * n.scoresBytes.f32)],
    ], '     '),
  ];
  const ratio = n.forwardBytes / n.available;
  const need = `S + P in ${r.engine.dtype} (${e} B each) need ${fmtBytes(n.forwardBytes)}`;
  if (ratio >= 1) lines.push(...para(`This machine has ${n.availableLabel}. ${need}: ${fmtRatio(ratio)} all of it, for one head of one layer, before the backward pass.`));
  else lines.push(...para(`This machine has ${n.availableLabel}. ${need}: ${Math.round(ratio * 100)}% of it for one head of one layer; a model has dozens of heads per layer.`));
  if (r.machine.maxBufferBytes !== null) {
    lines.push(...para(`WebGPU also caps one buffer at ${fmtBytes(r.machine.maxBufferBytes)} (maxBufferSize): S alone would not fit in one.`));
  }
  return lines;
}

export function part2(r: Pick<DemoResult, 'config' | 'run'>): string[] {
  const c = r.config;
  const run = r.run;
  const lines = ['', '2. Exact FlashAttention on this machine'];
  for (const k of run.calibration) {
    lines.push(fit(`   calibration, T = ${fmtInt(k.T)}: forward ${fmtSeconds(k.forwardSeconds)} (${fmtRate(k.forwardRate)}), backward ${fmtSeconds(k.backwardSeconds)}`));
  }
  if (c.tokensFrom === 'budget') {
    lines.push(...para(`Budget ${fmtSeconds(c.budgetSeconds)} for forward + backward (--budget): the largest T that fits is ${fmtInt(c.T)} tokens (predicted ${fmtSeconds(run.predicted.forwardSeconds + run.predicted.backwardSeconds)}). The full run, fa demo --tokens 100000, would take about ${fmtSeconds(run.fullRunSeconds)} here.`));
  } else if (c.tokensFrom === 'gpu-default') {
    lines.push(...para(`A GPU engine runs the full ${fmtInt(c.T)} tokens (predicted ${fmtSeconds(run.predicted.forwardSeconds + run.predicted.backwardSeconds)}).`));
  } else {
    lines.push(...para(`T = ${fmtInt(c.T)} tokens (--tokens), predicted ${fmtSeconds(run.predicted.forwardSeconds + run.predicted.backwardSeconds)}.`));
  }
  const pass = (name: string, p: DemoResult['run']['forward']) =>
    fit(`   ${name.padEnd(9)} ${fmtInt(c.T)} tokens  ${fmtSeconds(p.seconds).padStart(9)}  ${fmtRate(p.rate).padStart(13)}${p.chunks > 1 ? `  (${p.chunks} query chunks)` : ''}`);
  lines.push(pass('forward', run.forward), pass('backward', run.backward));
  return lines;
}

export function part3(r: Pick<DemoResult, 'exactness'>): string[] {
  const x = r.exactness;
  const s = (name: string, e: DemoResult['exactness']['out'] | null) => {
    if (!e) return [];
    const detail = e.rule === 'row' ? `worst row ${fmtErr(e.err)} ≤ ${fmtErr(e.bound)}` : e.rule === 'rel' ? `relative ${fmtErr(e.rel)} ≤ ${fmtErr(e.bound)}` : `max ${fmtErr(e.err)} ≤ ${fmtErr(e.bound)}`;
    return [fit(`     ${name.padEnd(4)} max abs error ${fmtErr(e.maxAbs).padEnd(8)} ${detail.padEnd(30)} ${e.pass ? 'ok' : 'FAILED'}`)];
  };
  const n = x.rows;
  const what = x.dq ? 'out, lse and dq' : 'out and lse';
  return [
    '',
    '3. Exactness against the float64 reference',
    ...para(`${n} sampled query rows (the first, the last and ${Math.max(0, n - 2)} random ones) of ${what}, recomputed in float64 from the same inputs (referenceRows: O(T·D) a row, ${fmtSeconds(x.seconds)} in all):`),
    ...s('out', x.out),
    ...s('lse', x.lse),
    ...s('dq', x.dq),
    ...para(!x.verified ? `NOT verified: a sampled row is outside the rule (${nb(x.rule)}).` : x.rule.startsWith('float32') ? `Verified exact: every sampled row is within the conformance rule (${nb(x.rule)}).` : `Verified: every sampled row is within the conformance rule, exact up to the rounding of the result to ${x.rule.split(':')[0]} (${nb(x.rule)}).`),
  ];
}

function ioRows(io: IoSummary): string[][] {
  const f = io.forward;
  const b = io.backward;
  return [
    ['', 'naive', 'tiled', 'FLOP/B naive', 'tiled'],
    ['forward', fmtBytes(f.naive.bytes), fmtBytes(f.flash.bytes), f.naive.intensity.toFixed(1), f.flash.intensity.toFixed(0)],
    ['backward', fmtBytes(b.naive.bytes), fmtBytes(b.flash.bytes), b.naive.intensity.toFixed(1), b.flash.intensity.toFixed(0)],
  ];
}

export function part4(r: Pick<DemoResult, 'memory' | 'config' | 'engine' | 'run' | 'throughput'>): string[] {
  const m = r.memory;
  const c = r.config;
  const mb = (x: number | null) => (x === null ? 'not measured' : fmtBytes(x));
  const lines = [
    '',
    `4. Memory, traffic and time (T = ${fmtInt(c.T)}, D = ${c.D}, ${r.engine.dtype})`,
    ...table([
      ['extra memory', 'measured peak', 'naive needs', ''],
      ['forward', mb(m.forwardPeakExtra), fmtBytes(m.naiveForwardBytes), 'S, P'],
      ['backward', mb(m.backwardPeakExtra), fmtBytes(m.naiveBackwardBytes), 'P, dP, dS'],
    ], '   ', 'lrrl'),
    ...para(`Measured: ${m.method}, beyond inputs and outputs${m.tileBytes !== null ? `; the worker threads' tiles (${fmtBytes(m.tileBytes)} in all, allocated once and kept between calls) come on top` : ''}.`, '   '),
  ];
  const used = m.forwardPeakExtra === null ? null : m.forwardPeakExtra + (m.tileBytes ?? 0);
  if (used !== null && used >= RATIO_MIN_BYTES) {
    lines.push(...para(`At this size naive attention would need ${fmtRatio(m.naiveForwardBytes / used)} the memory the tiled forward used${m.tileBytes ? ', tiles included' : ''}.`));
  } else if (used !== null && used > 0) {
    // A ratio against a few bytes of parameter buffers says nothing: state what was allocated.
    const fwd = m.forwardPeakExtra ?? 0;
    const what = m.method.startsWith('GPU buffers') ? 'small parameter buffers (uniforms, metadata)' : 'small buffers';
    const own = fwd > 0 ? `nothing beyond its inputs and outputs (O and the LSE) but ${fmtBytes(fwd)} of ${what}` : 'nothing measurable beyond its inputs and outputs (O and the LSE)';
    const tiles = m.tileBytes ? `, plus the worker threads' tiles (${fmtBytes(m.tileBytes)})` : '';
    lines.push(...para(`The tiled forward allocated ${own}${tiles}, against naive attention's ${fmtBytes(m.naiveForwardBytes)}.`));
  } else if (used === 0) {
    lines.push(...para(`The tiled forward allocated nothing measurable beyond its inputs and outputs (O and the LSE), against naive attention's ${fmtBytes(m.naiveForwardBytes)}.`));
  }
  lines.push(...para(`Slow-memory (HBM) traffic, IO model with ${kib(m.io.sramBytes)} on-chip; tiled: FlashAttention-2's loop order, as the engines run it (each query tile stays on chip, K and V tiles stream past it):`));
  lines.push(...table(ioRows(m.io), '     '));
  if (m.io100k.T !== m.io.T) {
    lines.push(`   at ${fmtTokens(m.io100k.T)} tokens:`);
    lines.push(...table(ioRows(m.io100k), '     '));
  }
  const run = r.run;
  lines.push(fit(`   Time: forward ${fmtSeconds(run.forward.seconds)} (${fmtRate(run.forward.rate)}), backward ${fmtSeconds(run.backward.seconds)} (${fmtRate(run.backward.rate)}).`));
  if (r.throughput.length > 0) lines.push(...throughputTable(r.throughput, c.T));
  return lines;
}

/** Below this measured forward extra, a "naive needs N× more" ratio is not printed. */
const RATIO_MIN_BYTES = 1e6;

/**
 * Throughput per engine in at most WIDTH columns: the T column is dropped when every entry ran
 * the story's T (the heading says it), and only the device column is shortened (with "…") when
 * the line is still too wide; the numbers are never cut.
 */
function throughputTable(entries: DemoResult['throughput'], T: number): string[] {
  const sameT = entries.every((t) => t.T === T);
  const indent = '     ';
  const rows = [
    ['engine', 'device', ...(sameT ? [] : ['T']), 'forward', 'backward'],
    ...entries.map((t) => [t.backend, t.device, ...(sameT ? [] : [fmtInt(t.T)]), fmtRate(t.forwardRate), fmtRate(t.backwardRate)]),
  ];
  const len = (x: string) => [...x].length;
  const width = (i: number) => Math.max(...rows.map((r) => len(r[i])));
  const others = rows[0].reduce((acc, _, i) => (i === 1 ? acc : acc + width(i)), 0);
  const room = Math.max(8, WIDTH - indent.length - others - 3 * (rows[0].length - 1));
  const cut = (x: string) => (len(x) <= room ? x : [...x].slice(0, room - 1).join('').trimEnd() + '…');
  const fitted = rows.map((r) => r.map((c, i) => (i === 1 ? cut(c) : c)));
  return [
    sameT ? `   Throughput per engine (one head, T = ${fmtInt(T)}):` : '   Throughput per engine (one head):',
    ...table(fitted, indent, sameT ? 'llrr' : 'llrrr'),
  ];
}

export function part5(r: Pick<DemoResult, 'walkthrough'>): string[] {
  const w = r.walkthrough;
  const lines = [
    '',
    '5. The online softmax, step by step',
    ...para('Each query row keeps three numbers instead of a row of T scores: m, the largest score so far; l, the sum of e^(s − m); acc, the sum of e^(s − m)·v. When a block brings a larger score, the old l and acc are rescaled by e^(m_old − m_new). Two blocks, [1, 2, 3] then [4], with v_j = j + 1 (core\'s explainOnlineSoftmax):'),
  ];
  for (const l of w.lines) {
    const indent = l.startsWith('  ') ? '       ' : '     ';
    const wrapped = wrap(l.trim(), WIDTH, indent);
    lines.push(wrapped[0], ...wrapped.slice(1).map((x) => '  ' + x));
  }
  const dOut = Math.max(...w.out.map((x, i) => Math.abs(x - w.direct.out[i])));
  const dLse = Math.abs(w.lse - w.direct.lse);
  lines.push(
    ...para(
      dOut === 0 && dLse === 0
        ? 'Block by block or all at once: the same out and lse, bit for bit in float64.'
        : `Block by block or all at once: the same out and lse up to float64 rounding (differences ${fmtErr(dOut)} and ${fmtErr(dLse)}).`,
    ),
  );
  return lines;
}

export function part6(r: Pick<DemoResult, 'backward' | 'config' | 'engine' | 'naive'>): string[] {
  const b = r.backward;
  const c = r.config;
  const dt = r.engine.dtype;
  return [
    '',
    '6. The backward pass: recompute instead of storing P',
    ...para(`Naive backpropagation keeps P from the forward (T² values) to form dV = Pᵀ·dO and dS = P∘(dP − δ). FlashAttention keeps one number a row, the logsumexp, and recomputes S and P tile by tile from Q, K and V (backward FLOPs 2.5× the forward's, recomputation included).`),
    ...table(
      c.T === r.naive.T
        ? [
            ['kept for the backward', `T = ${fmtTokens(c.T)}`],
            [`P (${dt})`, fmtBytes(b.storedPBytes)],
            ['LSE (f32, one a row)', fmtBytes(b.lseBytes)],
          ]
        : [
            ['kept for the backward', `T = ${fmtTokens(c.T)}`, `T = ${fmtTokens(r.naive.T)}`],
            [`P (${dt})`, fmtBytes(b.storedPBytes), fmtBytes(b.storedPBytes100k)],
            ['LSE (f32, one a row)', fmtBytes(b.lseBytes), fmtBytes(b.lseBytes100k)],
          ],
      '     ',
    ),
    ...para(`Measured peak extra memory of this backward: ${b.measuredExtra === null ? 'not measured on this engine' : fmtBytes(b.measuredExtra)}.`),
  ];
}

export function part7(r: Pick<DemoResult, 'generation' | 'engine'>): string[] {
  const g = r.generation;
  if (!g) return [];
  const title = ['', '7. Generating with a KV cache'];
  if ('skipped' in g) return [...title, ...para(`Skipped: the ${r.engine.name} engine declines the KV-cache call (${g.skipped}).`)];
  const T = g.context + g.steps;
  const copy = g.copy ? `${fmtBytes(g.copy.bytesPerSecond)}/s (${g.copy.method})` : 'not measured on this engine';
  return [
    ...title,
    ...para(`A model generating text attends, for each new token, to the keys and values of every token before it. Computed once and kept, they are the KV cache: each step appends one token's key and value in place and reads the cache once — ${fmtTokens(g.context)} tokens of context here, ${g.h} query heads over ${g.hkv} kv heads (GQA), D = ${g.d}, ${g.dtype}, in blocks of ${g.blockSize} tokens.`),
    ...table(
      [
        ['per token (median of ' + g.steps + ')', fmtSeconds(g.medianSeconds)],
        ['read per token (K and V)', fmtBytes(g.bytesPerToken)],
        ['effective bandwidth', `${fmtBytes(g.bandwidth)}/s`],
        ['copy bandwidth, same run', copy],
      ],
      '     ',
      'll',
    ),
    ...para(`Memory: the cache holds ${fmtBytes(g.cacheBytes)} for ${fmtTokens(T)} tokens; attention without it recomputes the whole sequence for every new token, ${fmtRatio(g.recomputeFlops / g.cachedFlops)} the FLOPs of a cached step, and the naive way holds a T×T score matrix of ${fmtBytes(g.scoresBytesPerHead)} per head.`),
    ...para(
      g.pass
        ? `Checked: every step equals attention recomputed over the whole sequence with the engine's ordinary forward (largest difference ${fmtErr(g.maxRelDiff)} relative, LSE within ${fmtErr(g.maxLseDiff)}); the last step is within ${fmtErr(g.referenceRel)} of the float64 reference (tolerance ${fmtErr(g.tolerance)}).`
        : `NOT equal: cached and recomputed differ by ${fmtErr(g.maxRelDiff)} relative (LSE ${fmtErr(g.maxLseDiff)}), the float64 reference by ${fmtErr(g.referenceRel)}; tolerance ${fmtErr(g.tolerance)}.`,
    ),
  ];
}

export function part8(r: Pick<DemoResult, 'parallel'>): string[] {
  const p = r.parallel;
  if (!p) return [];
  const range = ([a, b]: readonly [number, number]) => `${fmtInt(a)}–${fmtInt(b - 1)}`;
  return [
    '',
    '8. Past one GPU: context parallelism (ring attention)',
    ...para(`At a million tokens one GPU's compute, and at some length its memory, runs out. Ring attention shards the sequence over GPUs: each keeps a slice of Q, K and V; the K/V slices travel around a ring of GPUs (NCCL, one process per GPU) while each GPU attends its queries to the visiting keys and merges the partial (out, lse) with the online-softmax merge of part 5, so the result is exact, as on one GPU. The backward sends dK/dV around the ring with their K/V. Zigzag shards (chunks r and 2N−1−r of 2N) balance causal work; at ${fmtInt(p.T)} causal tokens over ${p.ranks} GPUs (calls/step: engine calls per ring step):`),
    ...table([
      ['rank', 'tokens held', 'query–key pairs', 'calls/step'],
      ...p.perRank.map((x, i) => [String(i), x.ranges.map(range).join(', '), `${fmtInt(x.pairs)} (${Math.round((100 * x.pairs) / p.totalPairs)}%)`, x.calls.join(', ')]),
    ], '     ', 'llrr'),
    ...para(`NCCL here: ${p.nccl}.`),
    ...para(`Launch one process per GPU with node packages/cuda/scripts/cp-launch.mjs --nproc 2 -- node your-script.mjs, where the script calls ringForward/ringBackward with cudaShardOps and createNcclCommunicator (README, "Past one GPU"). On CPUs the same algorithm runs on worker threads (createInProcessRingBackend). Speed on two GPUs is not measured yet: packages/cuda/bench/cp/bench.mjs is ready for a 2-GPU machine.`),
  ];
}

export function part9(r: Pick<DemoResult, 'training'>): string[] {
  const t = r.training;
  if (!t) return [];
  const c = t.config;
  const where = t.modelOps.engine === t.attention ? `every op on ${t.attention}` : `attention on ${t.attention}, the other ops on ${t.modelOps.engine} (${t.modelOps.note})`;
  return [
    '',
    '9. A model on the engines: a small GPT trains, then writes',
    ...para(`What the kernels are for: a model. A LLaMA-style GPT (${c.layers} layers, d_model ${c.dModel}, ${c.heads} query heads over ${c.kvHeads} kv heads, rotary positions, RMSNorm, SwiGLU, head tied to the embedding, ${fmtInt(t.parameters)} parameters) learns the ${fmtInt(t.corpusChars)} characters of the repository's corpus (sentences of a seeded grammar) for ${fmtSeconds(t.seconds)}, ${where}: the products, RMSNorm, SwiGLU, rotary, cross-entropy and AdamW on the engine's kernels, no host fallback.`),
    ...table(
      [
        ['steps (batch ' + c.batch + ' × ' + c.T + ' characters)', fmtInt(t.steps)],
        ['tokens/s', fmtInt(Math.round(t.tokensPerSecond))],
        ['loss (ln vocab = ' + Math.log(t.vocab).toFixed(2) + ')', t.curve.map(([, l]) => l.toFixed(2)).join(' → ')],
        ['held-out loss', t.heldOutLoss.toFixed(3)],
        ['attention kept for backward', `${fmtBytes(t.flashBytes)} (the LSE); naive: ${fmtBytes(t.naiveBytes)} (P)`],
      ],
      '     ',
      'll',
    ),
    ...para(`It writes, with a KV cache (temperature 0.7): "${(t.prompt + t.generated).replace(/\s+/g, ' ').trim()}"`),
    ...para(t.cachedEqualsRecomputed ? 'Checked: greedy generation with the KV cache gives the tokens recomputing the whole sequence gives. Longer runs write better: node packages/autograd/examples/gpt.mjs --seconds 60.' : 'NOT equal: greedy generation with the KV cache differs from recomputing the whole sequence.'),
  ];
}

/** Every part. */
export function storyText(r: DemoResult): string[] {
  return [...header(r), ...part1(r), ...part2(r), ...part3(r), ...part4(r), ...part5(r), ...part6(r), ...part7(r), ...part8(r), ...part9(r)];
}
