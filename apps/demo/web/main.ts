/**
 * The web page: the story of `fa demo` in a browser. WebGPU through @fa/webgpu when the browser
 * has a hardware adapter (imported dynamically, so the page works without it), otherwise
 * @fa/wasm's WebAssembly SIMD engine in a Web Worker (with worker threads of its own when the page
 * is cross-origin isolated: the Vite server and the built page's _headers send COOP/COEP), and
 * @fa/core's CPU engine in a Web Worker where WebAssembly SIMD is missing. A software WebGPU
 * adapter (SwiftShader) is slower than both CPU engines and is used only when asked for.
 * Controls for T, D and causal; the memory, traffic and throughput charts (the same SVG code as
 * `fa demo --report`); the online softmax animated tile by tile.
 *
 * Part 9 trains a small GPT in the CPU engine's worker (src/story/train.ts) when asked.
 *
 * URL parameters (for links and the browser test): T, D, causal=1,
 * engine=auto|webgpu|wasm|cpu, autorun=1, train=SECONDS (part 9 after the run).
 */
import { askSupports, describeProblemShapes, type AttentionBackend } from '@fa/core';
import { intensityChart, ioChart, memoryChart, throughputChart } from '../src/story/figures.js';
import { fmtBytes, fmtInt, fmtRate, fmtSeconds } from '../src/story/format.js';
import { backwardPart, FULL_T, ioSummary, naivePart, walkthroughPart } from '../src/story/parts.js';
import type { DemoResult, MemoryPoint, PassSummary, ThroughputEntry } from '../src/story/result.js';
import type { Progress } from '../src/story/run.js';
import { isSoftwareAdapter } from '../src/story/engine-kind.js';
import { part1, part3, part4, part5, part6, part9 } from '../src/story/text.js';
import type { TrainingResult } from '../src/story/train.js';
import { runOnBackend, type RunReport, type RunRequest } from './session.js';
import { buildSteps, renderStep } from './walkthrough.js';

type Engine =
  | { readonly kind: 'webgpu'; readonly backend: AttentionBackend; readonly device: string; readonly maxBuffer: number | null }
  | { readonly kind: 'worker'; readonly name: WorkerEngine; readonly worker: Worker; readonly device: string };
type WorkerEngine = 'wasm' | 'cpu';

const $ = <T extends HTMLElement = HTMLElement>(sel: string): T => {
  const el = document.querySelector<T>(sel);
  if (!el) throw new Error(`missing ${sel}`);
  return el;
};
const story = (part: number): HTMLElement => $(`#part${part} pre.story`);
const params = new URLSearchParams(location.search);
const setStatus = (s: string) => {
  document.body.dataset.status = s;
};

// ------------------------------------------------------------------ engines

let engine: Engine | undefined;
let webgpuFailure: string | undefined;
/** Why this run left a started WebGPU engine for a CPU worker (choice by problem). */
let declined: string | undefined;
const rates = new Map<string, number>();

async function startWebGPU(): Promise<Engine | string> {
  if (!('gpu' in navigator) || !(navigator as { gpu?: unknown }).gpu) return 'navigator.gpu is missing (no WebGPU in this browser, or it is turned off)';
  try {
    const mod = await import('@fa/webgpu');
    const b = await mod.createWebGPUBackend();
    const lim = (b as unknown as { gpuDevice?: { limits?: { maxBufferSize?: number } } }).gpuDevice?.limits;
    return { kind: 'webgpu', backend: b, device: b.device, maxBuffer: lim?.maxBufferSize ?? null };
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

const workers = new Map<WorkerEngine, Promise<Engine>>();
let wasmFailure: string | undefined;

/** Starts a CPU engine in its own Web Worker (engine-worker.ts), once. */
function startWorker(name: WorkerEngine): Promise<Engine> {
  let started = workers.get(name);
  if (started) return started;
  started = new Promise<Engine>((resolve, reject) => {
    const w = new Worker(new URL('./engine-worker.ts', import.meta.url), { type: 'module' });
    const onMsg = (e: MessageEvent<{ type: string; device?: string; message?: string }>) => {
      if (e.data.type === 'ready') {
        w.removeEventListener('message', onMsg);
        resolve({ kind: 'worker', name, worker: w, device: e.data.device ?? 'Web Worker' });
      } else if (e.data.type === 'failed') {
        w.removeEventListener('message', onMsg);
        w.terminate();
        reject(new Error(e.data.message ?? 'unknown reason'));
      }
    };
    w.addEventListener('message', onMsg);
    w.addEventListener('error', (e) => reject(new Error(`the ${name} worker failed to start: ${e.message}`)));
    w.postMessage({ type: 'start', engine: name });
  });
  started.catch(() => workers.delete(name));
  workers.set(name, started);
  return started;
}

async function chooseEngine(pref: string): Promise<Engine> {
  if (pref === 'auto' || pref === 'webgpu') {
    const g = await startWebGPU();
    if (typeof g === 'string') webgpuFailure = g;
    else if (pref === 'webgpu' || !isSoftwareAdapter({ name: 'webgpu', device: g.device })) return g;
    else webgpuFailure = `only a software adapter (${g.device}), slower than the CPU engines; choose webgpu to use it`;
    if (pref === 'webgpu') throw new Error(`WebGPU is unavailable: ${webgpuFailure}`);
  }
  if (pref === 'auto' || pref === 'wasm') {
    try {
      return await startWorker('wasm');
    } catch (e) {
      wasmFailure = e instanceof Error ? e.message : String(e);
      if (pref === 'wasm') throw new Error(`the wasm engine is unavailable: ${wasmFailure}`);
    }
  }
  return startWorker('cpu');
}

/**
 * The engine for this run: choice by problem, as `fa` and resolveBackend() do. On "auto", a
 * WebGPU engine that declines the run's problem (a buffer larger than the adapter allows, say)
 * hands it to the wasm worker (the cpu worker where wasm is missing), and the engine line says
 * why; asked for by name, it is an error.
 */
async function engineFor(e: Engine, pref: string, req: RunRequest): Promise<Engine> {
  if (e.kind !== 'webgpu') return e;
  const s = askSupports(e.backend, describeProblemShapes([1, req.T, 1, req.D], [1, req.T, 1, req.D], 'f32', { causal: req.causal }));
  if (s.ok) {
    if (declined !== undefined) {
      declined = undefined;
      showEngine(e);
    }
    return e;
  }
  if (pref === 'webgpu') throw new Error(`webgpu cannot compute this problem: ${s.reason}`);
  let cpu: Engine;
  try {
    cpu = await startWorker('wasm');
  } catch (err) {
    wasmFailure = err instanceof Error ? err.message : String(err);
    cpu = await startWorker('cpu');
  }
  declined = `webgpu declines this problem (${s.reason}); running it on ${engineName(cpu)}`;
  showEngine(cpu);
  return cpu;
}

function engineName(e: Engine): string {
  return e.kind === 'webgpu' ? 'webgpu' : e.name;
}

function showEngine(e: Engine): void {
  const el = $('#engine');
  el.dataset.engine = engineName(e);
  const gpuNote = declined ? ` — ${declined}` : webgpuFailure ? ` — WebGPU unavailable: ${webgpuFailure}` : '';
  if (e.kind === 'webgpu') el.textContent = `Engine: webgpu on ${e.device}`;
  else if (e.name === 'wasm') el.textContent = `Engine: wasm, @fa/wasm's WebAssembly SIMD engine in a Web Worker: ${e.device}${gpuNote}`;
  else el.textContent = `Engine: cpu, @fa/core's CPU engine in a Web Worker (one thread; the page stays responsive)${wasmFailure ? ` — wasm unavailable: ${wasmFailure}` : ''}${gpuNote}`;
}

let nextId = 1;
function runOnWorker(w: Worker, req: RunRequest, progress: (p: Progress) => void): Promise<RunReport> {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    const onMsg = (e: MessageEvent<{ type: string; id: number; p?: Progress; report?: RunReport; message?: string }>) => {
      const m = e.data;
      if (m.id !== id) return;
      if (m.type === 'progress' && m.p) progress(m.p);
      else if (m.type === 'result' && m.report) {
        w.removeEventListener('message', onMsg);
        resolve(m.report);
      } else if (m.type === 'error') {
        w.removeEventListener('message', onMsg);
        reject(new Error(m.message));
      }
    };
    w.addEventListener('message', onMsg);
    w.postMessage({ type: 'run', id, req });
  });
}

// ------------------------------------------------------------------ the story

const measuredPoints: MemoryPoint[] = [];
const throughput: ThroughputEntry[] = [];

function machine(e: Engine | undefined): DemoResult['machine'] {
  const dm = (navigator as { deviceMemory?: number }).deviceMemory;
  const ram = typeof dm === 'number' ? dm * 2 ** 30 : 8 * 2 ** 30;
  return {
    runtime: navigator.userAgent,
    cpus: navigator.hardwareConcurrency ?? 1,
    ramTotal: ram,
    ramFree: ram,
    gpuTotal: null,
    gpuFree: null,
    maxBufferBytes: e?.kind === 'webgpu' ? e.maxBuffer : null,
    maxBindingBytes: null,
  };
}

function renderPart1(e: Engine | undefined): void {
  const m = machine(e);
  const dm = (navigator as { deviceMemory?: number }).deviceMemory;
  const label = typeof dm === 'number' ? `about ${dm} GiB of RAM as the browser reports it (navigator.deviceMemory, a rounded figure)` : 'RAM the page cannot see (assumed 8 GiB)';
  const naive = naivePart('f32', m.ramTotal, label);
  const lines = part1({ naive, engine: { name: e ? engineName(e) : '-', device: e?.device ?? '-', dtype: 'f32', onDevice: e?.kind === 'webgpu' }, machine: m });
  story(1).textContent = lines.slice(2).join('\n');
}

function summary(p: { seconds: number; flops: number; chunks: number; peakExtra: number | null }): PassSummary {
  return { seconds: p.seconds, flops: p.flops, rate: p.flops / p.seconds, chunks: p.chunks, peakExtraBytes: p.peakExtra };
}

function renderCharts(D: number, e: Engine | undefined): void {
  const limits = [];
  if (e?.kind === 'webgpu' && e.maxBuffer) limits.push({ y: e.maxBuffer, label: `WebGPU maxBufferSize here: ${fmtBytes(e.maxBuffer)}` });
  const dm = (navigator as { deviceMemory?: number }).deviceMemory;
  if (typeof dm === 'number') limits.push({ y: dm * 2 ** 30, label: `navigator.deviceMemory: ${dm} GiB` });
  $('#charts').innerHTML = [
    memoryChart({ dtype: 'f32', points: measuredPoints, limits }),
    ioChart(D, 'f32'),
    intensityChart(D, 'f32'),
    throughput.length ? throughputChart(throughput) : '',
  ].join('\n');
}

function renderResult(r: RunReport, e: Engine): void {
  const { T, D, causal } = r.request;
  const fwd = summary(r.forward);
  const bwd = summary(r.backward ?? { seconds: NaN, flops: 0, chunks: 0, peakExtra: null });
  const full = 4 * FULL_T * FULL_T * D * (causal ? 0.5 : 1);
  const perFlopF = r.forward.seconds / r.forward.flops;
  const perFlopB = r.backward ? r.backward.seconds / r.backward.flops : perFlopF;
  story(2).textContent = [
    `Engine: ${engineName(e)} (${e.device}), f32, one head, T = ${fmtInt(T)}, D = ${D}${causal ? ', causal' : ''}`,
    `forward    ${fmtSeconds(fwd.seconds).padStart(9)}   ${fmtRate(fwd.rate).padStart(13)}${fwd.chunks > 1 ? `   (${fwd.chunks} query chunks)` : ''}`,
    r.backward ? `backward   ${fmtSeconds(bwd.seconds).padStart(9)}   ${fmtRate(bwd.rate).padStart(13)}${bwd.chunks > 1 ? `   (${bwd.chunks} query chunks)` : ''}` : 'backward   not run',
    `At this speed, forward + backward at ${fmtInt(FULL_T)} tokens would take about ${fmtSeconds(full * perFlopF + 2.5 * full * perFlopB)}.`,
  ].join('\n');

  const x = r.check;
  const exactness: DemoResult['exactness'] = { rows: x.rows.length, sampledRows: x.rows, out: x.out, lse: x.lse, dq: x.dq ?? null, rule: x.rule, verified: x.verified, seconds: x.seconds };
  story(3).textContent = part3({ exactness }).slice(2).join('\n');
  const v = $('#verdict');
  v.dataset.verified = String(x.verified);
  v.textContent = x.verified ? `verified exact (${x.rows.length} rows)` : 'NOT verified';

  if (r.forward.peakExtra !== null) measuredPoints.push({ T, flash: r.forward.peakExtra });
  measuredPoints.sort((a, b) => a.T - b.T);
  throughput.push({ backend: engineName(e), device: e.device, D, dtype: 'f32', causal, T, forwardSeconds: fwd.seconds, backwardSeconds: bwd.seconds, forwardRate: fwd.rate, backwardRate: r.backward ? bwd.rate : 0 });
  renderCharts(D, e);
  const config = { T, D, causal, seed: r.request.seed, budgetSeconds: 0, tokensFrom: 'flag' as const };
  const eng = { name: engineName(e), device: e.device, dtype: 'f32' as const, onDevice: e.kind === 'webgpu' };
  const nm = { forward: 2 * T * T * 4, backward: 3 * T * T * 4 };
  const memory: DemoResult['memory'] = {
    method: r.memoryMethod ?? 'not measured in the browser (the CPU engine runs in a Web Worker)',
    tileBytes: null,
    forwardPeakExtra: r.forward.peakExtra,
    backwardPeakExtra: r.backward?.peakExtra ?? null,
    naiveForwardBytes: nm.forward,
    naiveBackwardBytes: nm.backward,
    points: measuredPoints,
    io: ioSummary(T, D, 'f32'),
    io100k: ioSummary(FULL_T, D, 'f32'),
  };
  const run: DemoResult['run'] = { calibration: [], predicted: { forwardSeconds: 0, backwardSeconds: 0 }, forward: fwd, backward: bwd, fullRunSeconds: 0 };
  story(4).textContent = part4({ memory, config, engine: eng, run, throughput: throughput.filter((t) => t.backwardRate > 0) }).slice(2).join('\n');
  const naive = naivePart('f32', 1, '');
  story(6).textContent = part6({ backward: backwardPart(T, D, causal, 'f32', r.backward?.peakExtra ?? null), config, engine: eng, naive }).slice(2).join('\n');
}

// ------------------------------------------------------------------ controls

function request(): RunRequest {
  const T = Number($<HTMLSelectElement>('#T').value);
  const D = Number($<HTMLSelectElement>('#D').value);
  return {
    T,
    D,
    causal: $<HTMLInputElement>('#causal').checked,
    backward: $<HTMLInputElement>('#backward').checked,
    seed: 1,
    rows: 64,
    ...(engine && rates.has(engineName(engine)) ? { rate: rates.get(engineName(engine))! } : {}),
  };
}

function onProgress(p: Progress): void {
  const bar = $<HTMLProgressElement>('#progress');
  bar.value = Math.min(1, p.done);
  $('#progressText').textContent = `${p.phase} ${Math.floor(p.done * 100)}%${p.estimated ? ' (est.)' : ''}, ${fmtSeconds(p.elapsed)}, ETA ${fmtSeconds(p.eta)}`;
}

async function runNow(): Promise<void> {
  const btn = $<HTMLButtonElement>('#run');
  btn.disabled = true;
  setStatus('running');
  try {
    const pref = $<HTMLSelectElement>('#engineChoice').value;
    if (!engine || (pref !== 'auto' && engineName(engine) !== pref)) {
      engine = await chooseEngine(pref);
      showEngine(engine);
      renderPart1(engine);
    }
    const req = request();
    const e = await engineFor(engine, pref, req);
    const t0 = performance.now();
    const r = e.kind === 'webgpu' ? await runOnBackend(e.backend, req, onProgress) : await runOnWorker(e.worker, req, onProgress);
    rates.set(engineName(e), (r.forward.flops + (r.backward?.flops ?? 0)) / (r.forward.seconds + (r.backward?.seconds ?? 0)));
    renderResult(r, e);
    $('#progressText').textContent = `done in ${fmtSeconds((performance.now() - t0) / 1e3)}`;
    $<HTMLProgressElement>('#progress').value = 1;
    setStatus('done');
  } catch (err) {
    story(2).textContent = `Error: ${err instanceof Error ? err.message : String(err)}`;
    setStatus('error');
  } finally {
    btn.disabled = false;
  }
}

// ------------------------------------------------------------------ part 9: a model

/** Trains the GPT for `seconds` in the CPU engine's worker (wasm, else cpu), showing the loss as it falls. */
async function trainNow(seconds: number): Promise<void> {
  const btn = $<HTMLButtonElement>('#train');
  btn.disabled = true;
  const out = story(9);
  document.body.dataset.train = 'running';
  try {
    let e: Engine;
    try {
      e = await startWorker('wasm');
    } catch {
      e = await startWorker('cpu');
    }
    if (e.kind !== 'worker') throw new Error('no CPU engine worker');
    const w = e.worker;
    out.textContent = `training on ${e.name} (${e.device}) for ${seconds} s…`;
    const id = Math.floor(Math.random() * 2 ** 31);
    const result = await new Promise<TrainingResult>((resolve, reject) => {
      const onMsg = (ev: MessageEvent<{ type: string; id: number; step?: number; loss?: number; seconds?: number; result?: TrainingResult; message?: string }>) => {
        const m = ev.data;
        if (m.id !== id) return;
        if (m.type === 'trainstep') out.textContent = `training on ${e.name}: step ${m.step}, loss ${m.loss?.toFixed(3)}, ${m.seconds?.toFixed(1)} of ${seconds} s`;
        else if (m.type === 'trained' || m.type === 'error') {
          w.removeEventListener('message', onMsg);
          if (m.type === 'trained') resolve(m.result!);
          else reject(new Error(m.message));
        }
      };
      w.addEventListener('message', onMsg);
      w.postMessage({ type: 'train', id, seconds });
    });
    out.textContent = part9({ training: result }).slice(2).join('\n');
    document.body.dataset.train = result.cachedEqualsRecomputed && result.lastLoss < result.firstLoss ? 'done' : 'failed';
  } catch (err) {
    out.textContent = `Error: ${err instanceof Error ? err.message : String(err)}`;
    document.body.dataset.train = 'error';
  } finally {
    btn.disabled = false;
  }
}

// ------------------------------------------------------------------ walkthrough animation

const steps = buildSteps();
let walkAt = -1;
let walkTimer: ReturnType<typeof setInterval> | undefined;
function showWalk(): void {
  const { svg, caption } = renderStep(steps, walkAt);
  $('#walk').innerHTML = svg;
  $('#walkCaption').textContent = caption;
  $('#walk').dataset.step = String(walkAt + 1);
}
function stopWalk(): void {
  if (walkTimer) clearInterval(walkTimer);
  walkTimer = undefined;
  $('#walkPlay').textContent = 'Play';
}
function playWalk(): void {
  if (walkTimer) return stopWalk();
  if (walkAt >= steps.length - 1) walkAt = -1;
  $('#walkPlay').textContent = 'Pause';
  walkTimer = setInterval(() => {
    walkAt++;
    showWalk();
    if (walkAt >= steps.length - 1) stopWalk();
  }, 1200);
}

// ------------------------------------------------------------------ start

function applyParams(): void {
  const set = (id: string, v: string | null) => {
    if (v === null) return;
    const el = $<HTMLSelectElement>(id);
    if (!Array.from({ length: el.options.length }, (_, i) => el.options[i].value).includes(v)) el.add(new Option(v, v));
    el.value = v;
  };
  set('#T', params.get('T'));
  set('#D', params.get('D'));
  if (params.get('causal') === '1') $<HTMLInputElement>('#causal').checked = true;
  if (params.get('backward') === '0') $<HTMLInputElement>('#backward').checked = false;
  const eng = params.get('engine');
  if (eng === 'webgpu' || eng === 'wasm' || eng === 'cpu' || eng === 'auto') $<HTMLSelectElement>('#engineChoice').value = eng;
}

async function main(): Promise<void> {
  applyParams();
  renderPart1(undefined);
  renderCharts(Number($<HTMLSelectElement>('#D').value), undefined);
  const w = walkthroughPart();
  $('#explain').textContent = part5({ walkthrough: w }).slice(2).join('\n');
  showWalk();
  $('#walkReset').addEventListener('click', () => {
    stopWalk();
    walkAt = -1;
    showWalk();
  });
  $('#walkStep').addEventListener('click', () => {
    stopWalk();
    walkAt = Math.min(steps.length - 1, walkAt + 1);
    showWalk();
  });
  $('#walkPlay').addEventListener('click', playWalk);
  $('#run').addEventListener('click', () => void runNow());
  $('#D').addEventListener('change', () => renderCharts(Number($<HTMLSelectElement>('#D').value), engine));
  try {
    engine = await chooseEngine($<HTMLSelectElement>('#engineChoice').value);
    showEngine(engine);
    renderPart1(engine);
    renderCharts(Number($<HTMLSelectElement>('#D').value), engine);
  } catch (err) {
    $('#engine').textContent = `No engine: ${err instanceof Error ? err.message : String(err)}`;
  }
  $<HTMLButtonElement>('#run').disabled = false;
  $('#train').addEventListener('click', () => void trainNow(8));
  $<HTMLButtonElement>('#train').disabled = false;
  setStatus('idle');
  playWalk();
  if (params.get('autorun') === '1') await runNow();
  const train = Number(params.get('train'));
  if (train > 0) await trainNow(train);
}

void main();
