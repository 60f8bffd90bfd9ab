/**
 * The memory claim, measured the same way for every engine that takes host tensors (core's and
 * wasm's memory tests): causal forward + backward of one long head never holds anything of size
 * T×T. Node only (process.memoryUsage, /proc); node:fs is imported when called, so the kit
 * still loads in browsers.
 *
 * How: q, k, v and dOut are allocated (SharedArrayBuffer-backed where available, so a threaded
 * engine copies nothing) and filled before the baseline; the engine's threads are started and
 * every kernel compiled on a smaller problem of the same kind; then process.memoryUsage() (rss:
 * every thread of the process; arrayBuffers) is sampled every 2 ms during the run, and on Linux
 * the kernel's own peak-RSS counter (VmHWM, reset at the baseline) is read at the end.
 * Extra = peak − baseline − the bytes of the results the engine returns (out, lse, dq, dk, dv:
 * outputs, not workspace).
 */
import type { AttentionBackend, BackwardResult, ForwardResult } from '../backend.js';
import { importNode } from '../cpu/engine.js';
import { allocFloat32, tensor, type HostTensor } from '../tensor.js';

const MiB = 1024 * 1024;
const fmt = (b: number) => `${(b / MiB).toFixed(1)} MiB`;

export interface PeakExtraOptions {
  /** Sequence length (default 32768) and head dim (default 64); one head, batch 1, f32, causal. */
  readonly t?: number;
  readonly d?: number;
  /** Length of the warm-up problem (default 4096). */
  readonly warmT?: number;
  /** Said after the arrayBuffers figure: what the engine's own ArrayBuffers are. */
  readonly arrayBuffersNote?: string;
}

export interface PeakExtra {
  /** Peak RSS sampled every 2 ms, less the baseline and the results. */
  readonly rss: number;
  /** Peak process.memoryUsage().arrayBuffers, less the baseline and the results. */
  readonly arrayBuffers: number;
  /** Whether the kernel's peak-RSS counter could be reset at the baseline (Linux). */
  readonly kernelCounter: boolean;
  /** From that counter (VmHWM), less the baseline and the results; NaN without the counter. */
  readonly kernel: number;
  /** Bytes of the results (subtracted above). */
  readonly results: number;
  readonly forward: ForwardResult;
  readonly backward: BackwardResult;
  /** What was measured, in lines to print. */
  readonly report: string[];
}

/** Seeded values in [-0.5, 0.5) (xorshift32), in shared memory where available. */
function filled(n: number, seed: number): Float32Array {
  const a = allocFloat32(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    a[i] = s / 2 ** 32 - 0.5;
  }
  return a;
}

/** Measures the peak extra memory of `backend` over a causal forward + backward (see the module comment). */
export async function measurePeakExtra(backend: AttentionBackend, opts: PeakExtraOptions = {}): Promise<PeakExtra> {
  const fs = (await importNode('node:fs')) as typeof import('node:fs');
  const T = opts.t ?? 32768;
  const D = opts.d ?? 64;
  const w = opts.warmT ?? 4096;
  // Linux: the kernel's peak-RSS counter (VmHWM), which `5 > /proc/self/clear_refs` resets.
  const resetPeakRss = (): boolean => {
    try {
      fs.writeFileSync('/proc/self/clear_refs', '5');
      return true;
    } catch {
      return false;
    }
  };
  const peakRssKernel = (): number => {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  };
  const shape = [1, T, 1, D];
  const q = tensor(filled(T * D, 1), shape, 'f32');
  const k = tensor(filled(T * D, 2), shape, 'f32');
  const v = tensor(filled(T * D, 3), shape, 'f32');
  const dOut = tensor(filled(T * D, 4), shape, 'f32');
  const causal = { causal: true };

  // warm: start the threads and compile every kernel on a smaller problem of the same kind
  await (backend as { warm?: () => Promise<void> }).warm?.();
  const sub = (t: HostTensor) => tensor((t.data as Float32Array).subarray(0, w * D), [1, w, 1, D], 'f32');
  const wf = await backend.forward(sub(q), sub(k), sub(v), causal);
  await backend.backward(sub(q), sub(k), sub(v), wf.out, sub(dOut), wf.lse, causal);
  await new Promise((r) => setTimeout(r, 200));

  const base = process.memoryUsage();
  const hwm = resetPeakRss();
  let peakRss = base.rss;
  let peakAb = base.arrayBuffers;
  const timer = setInterval(() => {
    const m = process.memoryUsage();
    if (m.rss > peakRss) peakRss = m.rss;
    if (m.arrayBuffers > peakAb) peakAb = m.arrayBuffers;
  }, 2);
  let t0 = 0, t1 = 0, t2 = 0;
  let f: ForwardResult, g: BackwardResult;
  try {
    t0 = performance.now();
    f = await backend.forward(q, k, v, causal);
    t1 = performance.now();
    g = await backend.backward(q, k, v, f.out, dOut, f.lse, causal);
    t2 = performance.now();
  } finally {
    clearInterval(timer);
  }
  const end = process.memoryUsage();
  const extraHwm = hwm ? peakRssKernel() - base.rss : NaN;
  peakRss = Math.max(peakRss, end.rss);
  peakAb = Math.max(peakAb, end.arrayBuffers);

  const results = [f.out, f.lse, g.dq, g.dk, g.dv].reduce((a, t) => a + (t as HostTensor).data.byteLength, 0);
  const rss = peakRss - base.rss - results;
  const arrayBuffers = peakAb - base.arrayBuffers - results;
  const kernel = extraHwm - results;
  const flops = (4 * T * T * D) / 2;
  const report = [
    `memory test (${backend.device}), causal T=${T} D=${D} H=1 f32:`,
    `  forward ${((t1 - t0) / 1000).toFixed(1)} s (${(flops / ((t1 - t0) / 1000) / 1e9).toFixed(2)} GFLOP/s), backward ${((t2 - t1) / 1000).toFixed(1)} s (${((2.5 * flops) / ((t2 - t1) / 1000) / 1e9).toFixed(2)} GFLOP/s)`,
    `  inputs q,k,v,dOut ${fmt(4 * T * D * 4)} (before the baseline); results out,lse,dq,dk,dv ${fmt(results)} (subtracted)`,
    `  baseline rss ${fmt(base.rss)}, peak rss ${fmt(peakRss)} (sampled every 2 ms) → extra ${fmt(rss)}`,
    `  peak rss from the kernel (VmHWM, reset at the baseline): ${hwm ? `${fmt(base.rss + extraHwm)} → extra ${fmt(kernel)}` : 'unavailable'}`,
    `  baseline arrayBuffers ${fmt(base.arrayBuffers)}, peak ${fmt(peakAb)} → extra ${fmt(arrayBuffers)}${opts.arrayBuffersNote ? ` (${opts.arrayBuffersNote})` : ''}`,
    ...(Math.min(rss, kernel) < 0 ? ['  (an RSS "extra" below zero: pages the warm-up freed were reused, or V8 returned heap pages; RSS is a whole-process figure with MiB-level noise)'] : []),
    `  naive attention would hold the ${T}×${T} score matrix: ${fmt(T * T * 4)} in float32 (${((T * T * 4) / 2 ** 30).toFixed(1)} GiB)`,
  ];
  return { rss, arrayBuffers, kernelCounter: hwm, kernel, results, forward: f, backward: g, report };
}

/**
 * How a measurement breaks the memory claim, in lines (empty when it holds): extra memory at or
 * above `limit` bytes (RSS, ArrayBuffers, and the kernel's counter where there is one), or a
 * non-finite value among every 997th element of out, dq, dk and dv.
 */
export function peakExtraFailures(m: PeakExtra, limit: number): string[] {
  const out: string[] = [];
  const over = (what: string, bytes: number) => {
    if (!(bytes < limit)) out.push(`${what} ${fmt(bytes)} is not under ${fmt(limit)}`);
  };
  over('peak extra RSS', m.rss);
  over('peak extra ArrayBuffers', m.arrayBuffers);
  if (m.kernelCounter) over('peak extra RSS (kernel counter)', m.kernel);
  const named: [string, unknown][] = [['out', m.forward.out], ['dq', m.backward.dq], ['dk', m.backward.dk], ['dv', m.backward.dv]];
  for (const [name, t] of named) {
    const x = (t as HostTensor).data as Float32Array;
    for (let i = 0; i < x.length; i += 997) {
      if (!Number.isFinite(x[i])) {
        out.push(`${name}[${i}] = ${x[i]} is not finite`);
        break;
      }
    }
  }
  return out;
}
