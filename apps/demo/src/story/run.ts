/**
 * One head of exact attention, forward then backward, on any engine, with progress and
 * memory probes. Runs in Node and in browsers (main thread or a Web Worker): no node:* imports.
 *
 * Engines that take host tensors (the CPU engine) run long problems in query chunks, so that
 * progress is measured, not guessed: rows [a, b) with keys [0, b) when causal (bottom-right
 * alignment makes that exactly rows a..b−1 of the full problem), all keys otherwise. The
 * backward's dk and dv are then sums over the chunks (accumulated in float64). Engines with
 * device tensors (GPUs) get the inputs uploaded once and one call per pass; their progress is
 * an estimate from the calibration, and says so.
 */
import {
  allocHost,
  bytesPerElement,
  forwardFlops,
  tensor,
  type AttentionBackend,
  type AttentionOptions,
  type DType,
  type HostTensor,
  type Tensor,
} from '@fa/core';
import { valuesOf } from './exact.js';
import { gaussian, hostIn, rng } from './random.js';

export interface Inputs {
  readonly q: HostTensor;
  readonly k: HostTensor;
  readonly v: HostTensor;
  readonly dOut: HostTensor;
}

/**
 * Seeded standard-normal q, k, v, dOut of shape [batch, T, heads, D] (default [1, T, 1, D]).
 * `shared`: in SharedArrayBuffer memory where available (the CPU engine's worker threads then
 * need no copy); GPU engines get ordinary ArrayBuffers (Dawn's writeBuffer refuses shared ones).
 */
export function makeInputs(T: number, D: number, dtype: DType, seed: number, shared = true, batch = 1, heads = 1): Inputs {
  const next = rng(seed);
  const n = batch * T * heads * D;
  const make = (): HostTensor => hostIn(gaussian(n, next), dtype, [batch, T, heads, D], shared);
  return { q: make(), k: make(), v: make(), dOut: make() };
}

/** Peak extra memory during a pass: a baseline, samples, the peak above the baseline. */
export interface MemoryProbe {
  /** How it measures, in a few words. */
  readonly method: string;
  begin(): void;
  sample(): void;
  /** Called between chunks, after sample(): lets a probe drop garbage (Node: a GC). */
  settle?(): void;
  /**
   * The current level (bytes), when the probe can read one. Host engines then measure each call
   * on its own: the level after it returns minus the level before, less the call's outputs; the
   * largest over the chunks is the pass's peak extra. Results of earlier chunks that the runtime
   * has not reclaimed yet are in both levels and cancel out.
   */
  level?(): number;
  /** Peak minus baseline, in bytes (stops sampling). */
  end(): number;
}

export interface Progress {
  readonly phase: 'forward' | 'backward';
  /** 0..1 of the pass's FLOPs. */
  readonly done: number;
  /** True when `done` is a time-based estimate (one GPU call), false when measured (chunks). */
  readonly estimated: boolean;
  readonly elapsed: number;
  /** Seconds left (estimated). */
  readonly eta: number;
}

export type ProgressFn = (p: Progress) => void;

export interface PassOptions {
  /** Expected seconds (from the calibration): sets the number of chunks and the estimate. */
  readonly predictedSeconds?: number;
  readonly progress?: ProgressFn;
  readonly memory?: MemoryProbe;
  /** Target seconds per chunk for host engines (default 1). */
  readonly chunkSeconds?: number;
  /** Never split (calibration runs). */
  readonly single?: boolean;
}

export interface PassResult {
  readonly seconds: number;
  /** FLOPs as DESIGN.md counts them (forward 4·T²·D, half when causal; backward 2.5×). */
  readonly flops: number;
  readonly chunks: number;
  /** Peak extra bytes seen by the memory probe (undefined without a probe). */
  readonly peakExtra?: number;
}

export interface ForwardOutcome extends PassResult {
  /** out as float32 values [T·D], lse [T]. */
  readonly out: Float32Array;
  readonly lse: Float32Array;
}

export interface BackwardOutcome extends PassResult {
  readonly dq: Float32Array;
}

type Syncable = { sync?: () => Promise<void>; synchronize?: () => Promise<void> };

/** Rows [0, T) cut into `n` chunks of about equal FLOPs, boundaries at multiples of 64. */
export function chunkBounds(T: number, n: number, causal: boolean): number[] {
  const b = [0];
  for (let c = 1; c < n; c++) {
    const x = causal ? T * Math.sqrt(c / n) : (T * c) / n;
    const r = Math.round(x / 64) * 64;
    if (r > b[b.length - 1] && r < T) b.push(r);
  }
  b.push(T);
  return b;
}

const chunkFlops = (a: number, b: number, T: number, D: number, causal: boolean): number =>
  causal ? 2 * D * (b * (b + 1) - a * (a + 1)) : 4 * (b - a) * T * D;

/** A problem [1, T, 1, D] on one engine: forward, then backward from the forward's results. */
export class AttentionRun {
  readonly T: number;
  readonly D: number;
  private device: { q: Tensor; k: Tensor; v: Tensor; dOut: Tensor } | undefined;
  private fwdDevice: { out: Tensor; lse: Tensor } | undefined;
  private hostOut: HostTensor | undefined;
  private hostLse: HostTensor | undefined;
  private prepared = false;

  constructor(
    readonly backend: AttentionBackend,
    readonly inputs: Inputs,
    readonly causal: boolean,
  ) {
    this.T = inputs.q.shape[1];
    this.D = inputs.q.shape[3];
  }

  get opts(): AttentionOptions {
    return this.causal ? { causal: true } : {};
  }

  /** Forward FLOPs of the whole problem. */
  get forwardFlops(): number {
    return forwardFlops({ batch: 1, heads: 1, tq: this.T, d: this.D }, this.causal);
  }

  /** True when the engine keeps its own device tensors (inputs uploaded once, one call a pass). */
  get onDevice(): boolean {
    return this.device !== undefined;
  }

  /** Uploads the inputs to engines with device memory (not timed). */
  async prepare(): Promise<void> {
    if (this.prepared) return;
    this.prepared = true;
    const b = this.backend;
    const q = await b.upload(this.inputs.q);
    if (q.kind === 'host') return; // host engine: chunks of views, nothing to upload
    this.device = { q, k: await b.upload(this.inputs.k), v: await b.upload(this.inputs.v), dOut: await b.upload(this.inputs.dOut) };
    await this.sync();
  }

  private async sync(t?: Tensor): Promise<void> {
    const s = this.backend as unknown as Syncable;
    if (typeof s.sync === 'function') await s.sync.call(this.backend);
    else if (typeof s.synchronize === 'function') await s.synchronize.call(this.backend);
    else if (t) await this.backend.read(t);
  }

  private chunkCount(o: PassOptions): number {
    if (o.single || this.onDevice) return 1;
    const pred = o.predictedSeconds ?? 0;
    const n = Math.ceil(pred / (o.chunkSeconds ?? 1));
    return Math.max(1, Math.min(256, n, Math.floor(this.T / 256)));
  }

  /** Calls `progress` with a time-based estimate every 250 ms until stopped (one long call). */
  private ticker(phase: Progress['phase'], o: PassOptions, t0: number): () => void {
    const pred = o.predictedSeconds;
    if (!o.progress || !pred) return () => undefined;
    const tick = () => {
      const el = (performance.now() - t0) / 1e3;
      o.progress!({ phase, done: Math.min(0.99, el / pred), estimated: true, elapsed: el, eta: Math.max(0, pred - el) });
    };
    tick();
    const id = setInterval(tick, 250);
    return () => clearInterval(id);
  }

  async forward(o: PassOptions = {}): Promise<ForwardOutcome> {
    await this.prepare();
    const b = this.backend;
    const { T, D } = this;
    const flops = this.forwardFlops;
    if (this.device) {
      const d = this.device;
      o.memory?.begin();
      const t0 = performance.now();
      const stop = this.ticker('forward', o, t0);
      let r;
      try {
        r = await b.forward(d.q, d.k, d.v, this.opts);
        await this.sync(r.out);
      } finally {
        stop();
      }
      const seconds = (performance.now() - t0) / 1e3;
      const peak = o.memory?.end();
      const outBytes = deviceBytes(r.out) + deviceBytes(r.lse);
      o.progress?.({ phase: 'forward', done: 1, estimated: false, elapsed: seconds, eta: 0 });
      this.fwdDevice = r;
      const out = valuesOf(await b.read(r.out));
      const lse = valuesOf(await b.read(r.lse));
      return { seconds, flops, chunks: 1, out, lse, ...(peak !== undefined ? { peakExtra: Math.max(0, peak - outBytes) } : {}) };
    }
    // host engine: chunks of query rows, results copied into full-size outputs (allocated
    // before the memory baseline: they are the pass's outputs, not extra memory)
    const { q, k, v } = this.inputs;
    const dtype = q.dtype;
    const bounds = chunkBounds(T, this.chunkCount(o), this.causal);
    const chunked = bounds.length > 2;
    let outData = chunked ? allocHost(dtype, T * D) : undefined;
    let lseData = chunked ? (allocHost('f32', T) as Float32Array) : undefined;
    const mem = o.memory;
    mem?.begin();
    let callPeak = 0;
    const t0 = performance.now();
    let doneFlops = 0;
    o.progress?.({ phase: 'forward', done: 0, estimated: false, elapsed: 0, eta: o.predictedSeconds ?? 0 });
    for (let c = 0; c + 1 < bounds.length; c++) {
      const [a, e] = [bounds[c], bounds[c + 1]];
      const kEnd = this.causal ? e : T;
      const before = mem?.level?.() ?? 0;
      const r = await b.forward(rowsOf(q, a, e), rowsOf(k, 0, kEnd), rowsOf(v, 0, kEnd), this.opts);
      mem?.sample();
      const ro = (r.out as HostTensor).data;
      const rl = (r.lse as HostTensor).data as Float32Array;
      if (mem?.level) callPeak = Math.max(callPeak, mem.level() - before - ro.byteLength - rl.byteLength);
      if (outData && lseData) {
        (outData as Float32Array).set(ro as Float32Array, a * D);
        lseData.set(rl, a);
      } else {
        outData = ro;
        lseData = rl;
      }
      o.memory?.settle?.();
      doneFlops += chunkFlops(a, e, T, D, this.causal);
      const el = (performance.now() - t0) / 1e3;
      o.progress?.({ phase: 'forward', done: doneFlops / flops, estimated: false, elapsed: el, eta: (el * (flops - doneFlops)) / doneFlops });
    }
    const seconds = (performance.now() - t0) / 1e3;
    const sampled = mem?.end();
    this.hostOut = tensor(outData!, [1, T, 1, D], dtype);
    this.hostLse = tensor(lseData!, [1, 1, T], 'f32');
    const peak = mem ? (mem.level ? callPeak : Math.max(0, sampled! - (chunked ? 0 : outData!.byteLength + lseData!.byteLength))) : undefined;
    return { seconds, flops, chunks: bounds.length - 1, out: valuesOf(this.hostOut), lse: lseData!, ...(peak !== undefined ? { peakExtra: Math.max(0, peak) } : {}) };
  }

  async backward(o: PassOptions = {}): Promise<BackwardOutcome> {
    const b = this.backend;
    const { T, D } = this;
    const flops = 2.5 * this.forwardFlops;
    if (this.device) {
      const d = this.device;
      const f = this.fwdDevice;
      if (!f) throw new Error('backward() before forward()');
      o.memory?.begin();
      const t0 = performance.now();
      const stop = this.ticker('backward', o, t0);
      let g;
      try {
        g = await b.backward(d.q, d.k, d.v, f.out, d.dOut, f.lse, this.opts);
        await this.sync(g.dq);
      } finally {
        stop();
      }
      const seconds = (performance.now() - t0) / 1e3;
      const peak = o.memory?.end();
      const gradBytes = deviceBytes(g.dq) + deviceBytes(g.dk) + deviceBytes(g.dv);
      o.progress?.({ phase: 'backward', done: 1, estimated: false, elapsed: seconds, eta: 0 });
      const dq = valuesOf(await b.read(g.dq));
      for (const t of [g.dq, g.dk, g.dv]) b.disposeTensor(t);
      return { seconds, flops, chunks: 1, dq, ...(peak !== undefined ? { peakExtra: Math.max(0, peak - gradBytes) } : {}) };
    }
    const out = this.hostOut;
    const lse = this.hostLse;
    if (!out || !lse) throw new Error('backward() before forward()');
    const { q, k, v, dOut } = this.inputs;
    const dtype = q.dtype;
    const bounds = chunkBounds(T, this.chunkCount(o), this.causal);
    const chunked = bounds.length > 2;
    let dqData = chunked ? allocHost(dtype, T * D) : undefined;
    const dkAcc = chunked ? new Float64Array(T * D) : undefined;
    const dvAcc = chunked ? new Float64Array(T * D) : undefined;
    let outputs = 0;
    const mem = o.memory;
    mem?.begin();
    let callPeak = 0;
    const t0 = performance.now();
    let doneFlops = 0;
    o.progress?.({ phase: 'backward', done: 0, estimated: false, elapsed: 0, eta: o.predictedSeconds ?? 0 });
    const lseAll = lse.data as Float32Array;
    for (let c = 0; c + 1 < bounds.length; c++) {
      const [a, e] = [bounds[c], bounds[c + 1]];
      const kEnd = this.causal ? e : T;
      const lseChunk = tensor(lseAll.subarray(a, e), [1, 1, e - a], 'f32');
      const before = mem?.level?.() ?? 0;
      const g = await b.backward(rowsOf(q, a, e), rowsOf(k, 0, kEnd), rowsOf(v, 0, kEnd), rowsOf(out, a, e), rowsOf(dOut, a, e), lseChunk, this.opts);
      mem?.sample();
      const [gq, gk, gv] = [(g.dq as HostTensor).data, (g.dk as HostTensor).data, (g.dv as HostTensor).data];
      if (mem?.level) callPeak = Math.max(callPeak, mem.level() - before - gq.byteLength - gk.byteLength - gv.byteLength);
      if (dqData && dkAcc && dvAcc) {
        (dqData as Float32Array).set(gq as Float32Array, a * D);
        const dk = valuesOf(g.dk as HostTensor);
        const dv = valuesOf(g.dv as HostTensor);
        for (let x = 0; x < dk.length; x++) {
          dkAcc[x] += dk[x];
          dvAcc[x] += dv[x];
        }
      } else {
        dqData = gq;
        outputs = gq.byteLength + gk.byteLength + gv.byteLength;
      }
      o.memory?.settle?.();
      doneFlops += 2.5 * chunkFlops(a, e, T, D, this.causal);
      const el = (performance.now() - t0) / 1e3;
      o.progress?.({ phase: 'backward', done: doneFlops / flops, estimated: false, elapsed: el, eta: (el * (flops - doneFlops)) / doneFlops });
    }
    const seconds = (performance.now() - t0) / 1e3;
    const sampled = mem?.end();
    const peak = mem ? (mem.level ? callPeak : Math.max(0, sampled! - outputs)) : undefined;
    return { seconds, flops, chunks: bounds.length - 1, dq: valuesOf(tensor(dqData!, [1, T, 1, D], dtype)), ...(peak !== undefined ? { peakExtra: Math.max(0, peak) } : {}) };
  }

  /** Frees the engine's tensors. */
  dispose(): void {
    const b = this.backend;
    for (const t of [this.device?.q, this.device?.k, this.device?.v, this.device?.dOut, this.fwdDevice?.out, this.fwdDevice?.lse]) if (t) b.disposeTensor(t);
    this.device = undefined;
    this.fwdDevice = undefined;
  }
}

/** Rows [a, b) of a [1, T, 1, D] host tensor, as a view (no copy). */
export function rowsOf(t: HostTensor, a: number, b: number): HostTensor {
  const D = t.shape[3];
  if (a === 0 && b === t.shape[1]) return t;
  return tensor(t.data.subarray(a * D, b * D), [1, b - a, 1, D], t.dtype);
}

function deviceBytes(t: Tensor): number {
  const h = (t as { handle?: { bytes?: unknown } }).handle;
  if (h && typeof h.bytes === 'number') return h.bytes;
  return t.shape.reduce((a, x) => a * x, 1) * bytesPerElement(t.dtype);
}
