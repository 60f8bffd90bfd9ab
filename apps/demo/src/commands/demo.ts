/**
 * `fa demo` — the 100K-token story, with real numbers from this machine:
 *   1. what naive attention would need at 100K tokens, against what the machine has;
 *   2. exact FlashAttention at the size the engine does within the time budget (100K on a GPU);
 *   3. exactness on sampled rows against the float64 reference;
 *   4. measured peak extra memory, the IO model's traffic and intensity, time and throughput;
 *   5. the online-softmax walkthrough (core's explainOnlineSoftmax);
 *   6. the backward pass: recomputation against storing P;
 *   7. generating with a KV cache at a 100K-token context: per-token latency, bytes read per
 *      token against the engine's copy bandwidth, cache memory against T×T, and a check against
 *      recomputing attention over the whole sequence;
 *   8. past one GPU: how ring attention (context parallelism) shards the sequence over GPUs;
 *   9. a model on the engines: a small GPT trains for a few seconds on the repository's corpus
 *      (loss, tokens/s, attention memory against naive) and generates with a KV cache.
 * --json prints the same results as JSON; --report FILE writes a self-contained HTML report.
 */
import { cpus, freemem, totalmem } from 'node:os';
import { writeFile } from 'node:fs/promises';
import { askSupports, describeProblemShapes, FAError, forwardFlops, parseDType, workingSetBytes, type AttentionBackend, type AttentionProblem, type DType, type TileSizes } from '@fa/core';
import { parseCount, parseFlags, parseNumber, type FlagSpec } from '../args.js';
import { flagHelp80 } from '../helptext.js';
import { argError } from '../errors.js';
import { BACKEND_CHOICES } from '../engines.js';
import type { Io } from '../io.js';
import { bufferProbe } from '../memory.js';
import { isSoftwareAdapter, pickStoryBackend, type Candidate } from '../pick.js';
import { progressBar } from '../progress.js';
import { reportHtml } from '../report.js';
import { checkRows, sampleRows } from '../story/exact.js';
import { fmtBytes } from '../story/format.js';
import { onCpu, onHardwareGpu } from '../story/engine-kind.js';
import { gpuMemoryProbe } from '../story/gpumem.js';
import { wasmMemoryProbe } from '../story/wasmmem.js';
import { naiveMemory } from '../story/model.js';
import { naiveAttention } from '../story/naive.js';
import { backwardPart, FULL_T, ioSummary, naivePart, parallelPart, walkthroughPart } from '../story/parts.js';
import { SCHEMA, type DemoResult, type MemoryPoint, type Rates, type ThroughputEntry } from '../story/result.js';
import { AttentionRun, makeInputs, type MemoryProbe, type PassOptions } from '../story/run.js';
import { header, part1, part2, part3, part4, part5, part6, part7, part8, part9 } from '../story/text.js';
import { runTraining, TRAIN_DEFAULTS } from '../story/train.js';
import { runGeneration } from '../story/generate.js';
import { copyBandwidth } from '../story/bandwidth.js';

const SPEC: FlagSpec = {
  backend: { type: 'string', value: 'NAME', help: `engine: ${BACKEND_CHOICES.join(', ')} (default auto: cuda, then webgpu on a hardware adapter, then wasm, then cpu)` },
  tokens: { type: 'string', value: 'T', help: 'tokens (default: 100000 on a GPU; on a CPU the largest T that fits --budget)' },
  seq: { type: 'string', value: 'T', help: 'same as --tokens' },
  budget: { type: 'string', value: 'SECONDS', help: 'time for forward + backward when T is chosen for you (default 50)' },
  dim: { type: 'string', value: 'D', help: 'head dim (default 64 on a CPU, 128 on a GPU)' },
  dtype: { type: 'string', value: 'f32|f16|bf16', help: 'compute dtype (default f32, or bf16 where the engine has no f32)' },
  causal: { type: 'boolean', help: 'causal mask' },
  rows: { type: 'string', value: 'N', help: 'query rows checked against the float64 reference (default 64)' },
  'gen-tokens': { type: 'string', value: 'N', help: 'part 7: tokens generated with a KV cache (default 8; 0 skips the part)' },
  context: { type: 'string', value: 'T', help: 'part 7: tokens in the KV cache (default --tokens if given, else 100000)' },
  'train-seconds': { type: 'string', value: 'S', help: 'part 9: seconds a small GPT trains (default 8; 0 skips the part)' },
  seed: { type: 'string', value: 'N', help: 'random seed of the inputs (default 1)' },
  json: { type: 'boolean', help: 'print the results as JSON (progress still goes to stderr)' },
  report: { type: 'string', value: 'FILE.html', help: 'also write a self-contained HTML report with charts' },
  help: { type: 'boolean', short: 'h', help: 'show this help' },
};

export const demoHelp = `usage: fa demo [--backend NAME] [--tokens T] [--budget SECONDS] [--dim D]
               [--dtype f32|f16|bf16] [--causal] [--rows N] [--seed N]
               [--json] [--report FILE.html]

How exact attention over 100K tokens fits in memory, measured on this machine:
naive attention's memory at 100K tokens; exact FlashAttention forward and
backward (100K tokens on a GPU; on a CPU the largest size that fits the time
budget); exactness against the float64 reference on sampled rows; peak memory,
HBM traffic and throughput; the online softmax step by step; the backward pass;
generating tokens with a KV cache at a 100K-token context; how ring attention
shards the sequence over several GPUs.

${flagHelp80(SPEC)}`;

interface Opts {
  backend: string;
  tokens?: number;
  budget: number;
  dim?: number;
  dtype?: DType;
  causal: boolean;
  rows: number;
  seed: number;
  json: boolean;
  report?: string;
  genTokens: number;
  context?: number;
  trainSeconds: number;
}

function parseOpts(args: readonly string[]): Opts | 'help' {
  const p = parseFlags('demo', args, SPEC);
  if (p.booleans.has('help')) return 'help';
  const s = (n: string) => p.strings.get(n);
  if (s('tokens') !== undefined && s('seq') !== undefined) throw argError('give --tokens or --seq, not both');
  const tok = s('tokens') ?? s('seq');
  const budget = s('budget') !== undefined ? parseNumber('budget', s('budget')!) : DEFAULT_BUDGET;
  if (!(budget > 0) || !Number.isFinite(budget)) throw argError(`--budget expects a positive number of seconds, got ${JSON.stringify(s('budget'))}`);
  const o: Opts = {
    backend: s('backend') ?? 'auto',
    budget,
    causal: p.booleans.has('causal'),
    rows: s('rows') !== undefined ? parseCount('rows', s('rows')!) : 64,
    seed: s('seed') !== undefined ? parseCount('seed', s('seed')!, 0) : 1,
    json: p.booleans.has('json'),
    genTokens: s('gen-tokens') !== undefined ? parseCount('gen-tokens', s('gen-tokens')!, 0) : 8,
    trainSeconds: s('train-seconds') !== undefined ? parseNumber('train-seconds', s('train-seconds')!) : TRAIN_DEFAULTS.seconds,
  };
  if (!(o.trainSeconds >= 0) || !Number.isFinite(o.trainSeconds)) throw argError(`--train-seconds expects a number of seconds >= 0, got ${JSON.stringify(s('train-seconds'))}`);
  if (s('context') !== undefined) o.context = parseCount('context', s('context')!);
  if (tok !== undefined) o.tokens = parseCount(s('tokens') !== undefined ? 'tokens' : 'seq', tok);
  if (s('dim') !== undefined) o.dim = parseCount('dim', s('dim')!);
  if (s('dtype') !== undefined) o.dtype = parseDType(s('dtype'), '--dtype');
  if (s('report') !== undefined) o.report = s('report');
  return o;
}

/** Seconds for forward + backward on a CPU: about a minute with calibration and checks, leaving room for setup in the 3-minute quick start. */
export const DEFAULT_BUDGET = 50;

function probeFor(b: AttentionBackend): MemoryProbe | undefined {
  return b.name === 'cpu' ? bufferProbe() : (wasmMemoryProbe(b) ?? gpuMemoryProbe(b));
}

/** Forward + backward once at size T (calibration or a throughput entry). */
async function measure(b: AttentionBackend, T: number, D: number, dtype: DType, causal: boolean, seed: number, memory?: MemoryProbe): Promise<{ rates: Rates; fwdExtra?: number }> {
  const run = new AttentionRun(b, makeInputs(T, D, dtype, seed, b.name === 'cpu'), causal);
  try {
    const o: PassOptions = { single: true, ...(memory ? { memory } : {}) };
    const f = await run.forward(o);
    const g = await run.backward({ single: true });
    return {
      rates: { T, forwardSeconds: f.seconds, backwardSeconds: g.seconds, forwardRate: f.flops / f.seconds, backwardRate: g.flops / g.seconds },
      ...(f.peakExtra !== undefined ? { fwdExtra: f.peakExtra } : {}),
    };
  } finally {
    run.dispose();
  }
}

/** Largest T (a multiple of 256, at least 256, at most 100K) whose forward + backward fits `budget`. */
export function tokensForBudget(budget: number, D: number, causal: boolean, fwdRate: number, bwdRate: number): number {
  const perT2 = forwardFlops({ batch: 1, heads: 1, tq: 1, d: D }, causal) * (1 / fwdRate + 2.5 / bwdRate);
  const T = Math.sqrt(budget / perT2);
  return Math.max(256, Math.min(FULL_T, Math.floor(T / 256) * 256));
}

function machineInfo(b: AttentionBackend): DemoResult['machine'] {
  const x = b as unknown as { memInfo?: () => { free: number; total: number }; gpuDevice?: { limits?: { maxBufferSize?: number; maxStorageBufferBindingSize?: number } } };
  let gpuTotal: number | null = null;
  let gpuFree: number | null = null;
  let maxBuf: number | null = null;
  let maxBind: number | null = null;
  try {
    if (typeof x.memInfo === 'function') {
      const m = x.memInfo.call(b);
      gpuTotal = m.total;
      gpuFree = m.free;
    }
    const lim = b.name === 'webgpu' ? x.gpuDevice?.limits : undefined;
    if (lim && typeof lim.maxBufferSize === 'number') maxBuf = lim.maxBufferSize;
    if (lim && typeof lim.maxStorageBufferBindingSize === 'number') maxBind = lim.maxStorageBufferBindingSize;
  } catch {
    /* informational */
  }
  return { runtime: `Node ${process.versions.node}`, cpus: cpus().length, ramTotal: totalmem(), ramFree: freemem(), gpuTotal, gpuFree, maxBufferBytes: maxBuf, maxBindingBytes: maxBind };
}

/** The story's dtype and head dim on an engine: f32 unless the engine declines it (then bf16). */
function storyShape(b: AttentionBackend, o: Opts): { dtype: DType; D: number } {
  const D = o.dim ?? (onHardwareGpu(b) ? 128 : 64);
  if (o.dtype) return { dtype: o.dtype, D };
  const T = o.tokens ?? FULL_T;
  return { dtype: askSupports(b, describeProblemShapes([1, T, 1, D], [1, T, 1, D], 'f32', { causal: o.causal })).ok ? 'f32' : 'bf16', D };
}

/** The largest problem the story runs on an engine (100K tokens unless --tokens), for choosing one. */
function storyProblem(b: AttentionBackend, o: Opts): AttentionProblem {
  const { dtype, D } = storyShape(b, o);
  const T = o.tokens ?? FULL_T;
  return describeProblemShapes([1, T, 1, D], [1, T, 1, D], dtype, { causal: o.causal });
}

function say(io: Io, json: boolean, lines: readonly string[]): void {
  if (!json) for (const l of lines) io.out(l);
}

export async function demoCommand(args: readonly string[], io: Io): Promise<number> {
  const o = parseOpts(args);
  if (o === 'help') {
    io.out(demoHelp);
    return 0;
  }
  const { backend, candidates } = await pickStoryBackend(o.backend, (b) => storyProblem(b, o));
  const gpu = onHardwareGpu(backend);
  const { dtype, D } = storyShape(backend, o);
  const causal = o.causal;
  const machine = machineInfo(backend);
  const engine = { name: backend.name, device: backend.device, dtype, onDevice: !onCpu(backend) };

  // 1. naive attention at 100K tokens
  const available = machine.gpuTotal ?? machine.ramTotal;
  const availableLabel = machine.gpuTotal !== null ? `${fmtBytes(machine.gpuTotal)} of GPU memory (${fmtBytes(machine.gpuFree ?? 0)} free)` : `${fmtBytes(machine.ramTotal)} of RAM (${fmtBytes(machine.ramFree)} free)`;
  const naive = naivePart(dtype, available, availableLabel);
  const pre = { engine, candidates: candidates.map((c: Candidate) => ({ name: c.name, status: c.status })), machine, naive };

  // 2. calibrate, choose T, run
  const software = isSoftwareAdapter(backend);
  // calibrate where the engine's per-call costs (copies, thread round trips) no longer dominate
  const calT = Math.min(o.tokens ?? Infinity, gpu ? 8192 : backend.name === 'wasm' || backend.name === 'native' ? 4096 : 1024);
  const points: MemoryPoint[] = [];
  const headerLines = header({ engine, candidates: pre.candidates, config: { T: 0, D, causal, seed: o.seed, budgetSeconds: o.budget, tokensFrom: 'flag' } });
  say(io, o.json, [...headerLines, ...part1(pre)]);

  // warm-up (worker threads, JIT, shader pipelines), then the calibration run
  const warmTs = gpu ? [Math.min(calT, 1024)] : [...new Set([256, 512, calT / 4].map((t) => Math.min(t, calT)))].filter((t) => t < calT || calT <= 256);
  for (const t of warmTs) {
    const w = await measure(backend, t, D, dtype, causal, o.seed + 100 + t, probeFor(backend));
    if (w.fwdExtra !== undefined) points.push({ T: t, flash: w.fwdExtra });
  }
  const cal = await measure(backend, calT, D, dtype, causal, o.seed + 200, probeFor(backend));
  if (cal.fwdExtra !== undefined) upsert(points, { T: calT, flash: cal.fwdExtra });
  const calibration = [cal.rates];
  let T: number;
  let tokensFrom: DemoResult['config']['tokensFrom'];
  if (o.tokens !== undefined) {
    T = o.tokens;
    tokensFrom = 'flag';
  } else if (gpu) {
    T = FULL_T;
    tokensFrom = 'gpu-default';
  } else {
    T = tokensForBudget(o.budget, D, causal, cal.rates.forwardRate, cal.rates.backwardRate);
    tokensFrom = 'budget';
  }
  const fwdFlops = forwardFlops({ batch: 1, heads: 1, tq: T, d: D }, causal);
  const predicted = { forwardSeconds: fwdFlops / cal.rates.forwardRate, backwardSeconds: (2.5 * fwdFlops) / cal.rates.backwardRate };
  const config = { T, D, causal, seed: o.seed, budgetSeconds: o.budget, tokensFrom };

  // naive attention measured at small sizes (host memory, a textbook implementation)
  if (backend.name === 'cpu' || software || !gpu) {
    for (const t of [256, 512, 1024, 2048]) {
      if (t > Math.max(T, 1024) || (t === 2048 && o.budget < 30)) break;
      const inp = makeInputs(t, D, 'f32', o.seed + 300);
      const nv = naiveAttention(inp.q.data as Float32Array, inp.k.data as Float32Array, inp.v.data as Float32Array, t, D, causal, bufferProbe());
      upsert(points, { T: t, naive: nv.peakExtra ?? 0 });
    }
  }

  const inputs = makeInputs(T, D, dtype, o.seed, backend.name === 'cpu');
  const run = new AttentionRun(backend, inputs, causal);
  let fwd;
  let bwd;
  try {
    await run.prepare();
    const long = (s: number) => s >= 2;
    const barF = progressBar('forward ');
    try {
      fwd = await run.forward({ predictedSeconds: predicted.forwardSeconds, ...(long(predicted.forwardSeconds) ? { progress: barF.update } : {}), ...(probeOpt(backend)) });
    } finally {
      barF.done();
    }
    const bwdPredicted = predicted.backwardSeconds * (fwd.seconds / Math.max(1e-9, predicted.forwardSeconds));
    const barB = progressBar('backward');
    try {
      bwd = await run.backward({ predictedSeconds: bwdPredicted, ...(long(bwdPredicted) ? { progress: barB.update } : {}), ...(probeOpt(backend)) });
    } finally {
      barB.done();
    }
  } finally {
    run.dispose();
  }
  if (fwd.peakExtra !== undefined) upsert(points, { T, flash: fwd.peakExtra });
  points.sort((a, b) => a.T - b.T);
  const full = forwardFlops({ batch: 1, heads: 1, tq: FULL_T, d: D }, causal);
  const runPart: DemoResult['run'] = {
    calibration,
    predicted,
    forward: { seconds: fwd.seconds, flops: fwd.flops, rate: fwd.flops / fwd.seconds, chunks: fwd.chunks, peakExtraBytes: fwd.peakExtra ?? null },
    backward: { seconds: bwd.seconds, flops: bwd.flops, rate: bwd.flops / bwd.seconds, chunks: bwd.chunks, peakExtraBytes: bwd.peakExtra ?? null },
    fullRunSeconds: full / (fwd.flops / fwd.seconds) + (2.5 * full) / (bwd.flops / bwd.seconds),
  };
  say(io, o.json, part2({ config, run: runPart }));

  // 3. exactness on sampled rows
  const rows = sampleRows(T, Math.min(o.rows, T), o.seed + 7);
  const chk = checkRows({ q: inputs.q, k: inputs.k, v: inputs.v, dOut: inputs.dOut, causal, out: fwd.out, lse: fwd.lse, dq: bwd.dq }, rows);
  const exactness: DemoResult['exactness'] = {
    rows: rows.length,
    sampledRows: rows,
    out: chk.out,
    lse: chk.lse,
    dq: chk.dq ?? null,
    rule: chk.rule,
    verified: chk.verified,
    seconds: chk.seconds,
  };
  say(io, o.json, part3({ exactness }));

  // 4. memory, traffic, time; throughput of the other engines at a small size
  const throughput: ThroughputEntry[] = [{ backend: backend.name, device: backend.device, D, dtype, causal, T, forwardSeconds: fwd.seconds, backwardSeconds: bwd.seconds, forwardRate: fwd.flops / fwd.seconds, backwardRate: bwd.flops / bwd.seconds }];
  for (const c of candidates) {
    const b = c.backend;
    if (!b || b === backend || isSoftwareAdapter(b)) continue; // software adapters: minutes of shader compilation
    const t = onHardwareGpu(b) ? 8192 : isSoftwareAdapter(b) ? 512 : 1024;
    const shapeOf = (d: DType) => describeProblemShapes([1, t, 1, D], [1, t, 1, D], d, { causal });
    const dt = ([dtype, 'f32', 'bf16'] as const).find((d) => askSupports(b, shapeOf(d)).ok);
    if (dt === undefined) continue; // an engine that computes none of them is left out of the table
    try {
      // once to warm it (threads started, code compiled: a WebAssembly engine runs its first call
      // in V8's baseline compiler), then the measured run
      await measure(b, t, D, dt, causal, o.seed + 400);
      const m = await measure(b, t, D, dt, causal, o.seed + 400);
      throughput.push({ backend: b.name, device: b.device, D, dtype: dt, causal, ...m.rates });
    } catch {
      /* an engine that fails here is left out of the table */
    }
  }
  const memory: DemoResult['memory'] = {
    method: fwd.peakExtra !== undefined ? probeFor(backend)!.method : 'not measured (the engine reports no memory use)',
    tileBytes: cpuTileBytes(backend, D),
    forwardPeakExtra: fwd.peakExtra ?? null,
    backwardPeakExtra: bwd.peakExtra ?? null,
    naiveForwardBytes: naiveMemory(T, dtype).forward,
    naiveBackwardBytes: naiveMemory(T, dtype).backward,
    points,
    io: ioSummary(T, D, dtype),
    io100k: ioSummary(FULL_T, D, dtype),
  };
  const walkthrough = walkthroughPart();
  const backwardInfo = backwardPart(T, D, causal, dtype, bwd.peakExtra ?? null);
  say(io, o.json, [...part4({ memory, config, engine, run: runPart, throughput }), ...part5({ walkthrough }), ...part6({ backward: backwardInfo, config, engine, naive })]);
  // 7. generation with a KV cache at a long context (100K unless told otherwise: a decode step
  // reads the cache once, so even a CPU does it in well under a second a token)
  let generation: DemoResult['generation'];
  if (o.genTokens > 0) {
    const context = o.context ?? o.tokens ?? FULL_T;
    generation = await runGeneration(backend, { context, steps: o.genTokens, d: D, dtype, seed: o.seed + 500 }, (kc, bytes) => copyBandwidth(backend, kc, bytes));
    say(io, o.json, part7({ generation, engine }));
  }

  // 8. past one GPU: how ring attention shards the sequence, and whether NCCL is here
  const parallel = parallelPart(await ncclLine());
  say(io, o.json, part8({ parallel }));

  // 9. a model on the engines: attention on the story's engine, the other ops on its model ops
  // (or the best host engine's), a few seconds of training, then generation with the cache
  let training: DemoResult['training'];
  if (o.trainSeconds > 0) {
    const hosts = candidates.map((c: Candidate) => c.backend).filter((b): b is AttentionBackend => b !== undefined && b.modelOps !== undefined);
    hosts.sort((a, b) => HOST_ORDER.indexOf(a.name) - HOST_ORDER.indexOf(b.name));
    training = await runTraining(backend, hosts, { ...TRAIN_DEFAULTS, seconds: o.trainSeconds });
    say(io, o.json, part9({ training }));
  }

  const result: DemoResult = {
    schema: SCHEMA,
    createdAt: new Date().toISOString(),
    ...pre,
    config,
    run: runPart,
    exactness,
    memory,
    walkthrough,
    backward: backwardInfo,
    throughput,
    ...(generation ? { generation } : {}),
    parallel,
    ...(training ? { training } : {}),
  };
  if (o.report) {
    try {
      await writeFile(o.report, reportHtml(result));
    } catch (e) {
      throw new FAError('E_IO', `cannot write the report ${o.report}: ${(e as Error).message}`, { cause: e });
    }
    say(io, o.json, ['', `Report with charts written to ${o.report}`]);
  }
  if (o.json) io.out(JSON.stringify(result, jsonReplacer, 2));
  if (!exactness.verified) throw new FAError('E_DEVICE', `the ${backend.name} result is outside the float64 reference's tolerance on sampled rows (see part 3)`);
  if (training && !training.cachedEqualsRecomputed) throw new FAError('E_DEVICE', `the GPT's generation with the ${training.attention} KV cache differs from recomputing the sequence (see part 9)`);
  if (generation && 'pass' in generation && !generation.pass) throw new FAError('E_DEVICE', `generation with the ${backend.name} KV cache differs from recomputing attention over the sequence (see part 7)`);
  return 0;
}

/** The engines part 9 may run model ops on when the story's engine has none, best first. */
const HOST_ORDER = ['native', 'wasm', 'cpu'];

/** Whether NCCL (for ring attention over GPUs) is usable here, in a few words. */
async function ncclLine(): Promise<string> {
  try {
    const spec: string = '@fa/cuda'; // optional, as in engines.ts
    const { ncclStatus } = (await import(spec)) as { ncclStatus: () => { available: boolean; version?: string; path?: string; reason?: string } };
    const s = ncclStatus();
    return s.available ? `NCCL ${s.version} at ${s.path}` : (s.reason ?? '').replace(/; (install|point).*$/, '');
  } catch (e) {
    return `@fa/cuda did not load (${e instanceof Error ? e.message.split('\n')[0] : String(e)})`;
  }
}

/** The CPU engine's per-thread tiles (the larger working set, backward), all threads. */
function cpuTileBytes(b: AttentionBackend, D: number): number | null {
  const c = b as unknown as { threads?: number; tileSizes?: (d: number, pass: 'forward' | 'backward') => TileSizes };
  if (b.name !== 'cpu' || typeof c.tileSizes !== 'function') return null;
  const t = c.tileSizes.call(b, D, 'backward');
  return Math.max(1, c.threads ?? 1) * workingSetBytes('backward', t.br, t.bc, D);
}

/** Adds a measurement to the point of the same T. */
function upsert(points: MemoryPoint[], p: MemoryPoint): void {
  const i = points.findIndex((x) => x.T === p.T);
  if (i < 0) points.push(p);
  else points[i] = { ...points[i], ...p };
}

function probeOpt(b: AttentionBackend): { memory?: MemoryProbe } {
  const p = probeFor(b);
  return p ? { memory: p } : {};
}

/** JSON without NaN/Infinity surprises: non-finite numbers become strings. */
function jsonReplacer(_k: string, v: unknown): unknown {
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return v;
}
