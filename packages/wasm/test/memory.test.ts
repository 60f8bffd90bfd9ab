/**
 * The memory claim for the wasm engine, measured as packages/core/test/memory.test.ts measures
 * the cpu engine's: causal forward + backward at T = 32768, D = 64 (one head) never holds
 * anything of size T×T. The engine's extra memory is its WebAssembly memory: float32 copies of
 * the inputs (out written over q, dK/dV over k/v), K^T and V tiles (forward), the dQ accumulator
 * and one private dQ accumulator (backward: one head, two threads), per-thread tiles — all
 * O(T), about 48 MiB here; naive attention would hold the 32768² score matrix, 4 GiB in float32.
 *
 * How it is measured: q, k, v and dOut are allocated (SharedArrayBuffer-backed) and filled
 * before the baseline, the engine and its threads are warmed up on a smaller problem of the same
 * kind, then process.memoryUsage() (rss: every thread of the process; arrayBuffers) is sampled
 * every 2 ms during the run, and on Linux the kernel's own peak-RSS counter (VmHWM, reset at the
 * baseline) is read at the end. Extra = peak − baseline − the bytes of the results the engine
 * returns (out, lse, dq, dk, dv: outputs, not workspace). The WebAssembly memory grows during the
 * run and is counted in full (rss); it is not an ArrayBuffer V8 counts in arrayBuffers.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { allocFloat32, tensor, type HostTensor } from '@fa/core';
import { createWasmBackend } from '../dist/index.js';

const T = 32768;
const D = 64;
const MiB = 1024 * 1024;
const LIMIT = 64 * MiB;

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

const fmt = (b: number) => `${(b / MiB).toFixed(1)} MiB`;

/** Linux: the kernel's peak-RSS counter (VmHWM), which `5 > /proc/self/clear_refs` resets. */
function resetPeakRss(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}
function peakRssKernel(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

describe('memory', () => {
  it(`causal forward + backward at T = ${T}, D = ${D}, one head: peak extra memory < 64 MiB (naive: ${((T * T * 4) / 2 ** 30).toFixed(0)} GiB for the score matrix)`, async () => {
    const be = await createWasmBackend();
    try {
      const shape = [1, T, 1, D];
      const q = tensor(filled(T * D, 1), shape, 'f32');
      const k = tensor(filled(T * D, 2), shape, 'f32');
      const v = tensor(filled(T * D, 3), shape, 'f32');
      const dOut = tensor(filled(T * D, 4), shape, 'f32');
      const opts = { causal: true };

      // warm: start the threads and compile every kernel on a smaller problem of the same kind
      await be.warm();
      const w = 4096;
      const ws = [1, w, 1, D];
      const sub = (t: HostTensor) => tensor((t.data as Float32Array).subarray(0, w * D), ws, 'f32');
      const wf = await be.forward(sub(q), sub(k), sub(v), opts);
      await be.backward(sub(q), sub(k), sub(v), wf.out, sub(dOut), wf.lse, opts);
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

      const t0 = performance.now();
      const f = await be.forward(q, k, v, opts);
      const t1 = performance.now();
      const g = await be.backward(q, k, v, f.out, dOut, f.lse, opts);
      const t2 = performance.now();
      clearInterval(timer);
      const end = process.memoryUsage();
      const extraHwm = hwm ? peakRssKernel() - base.rss : NaN;
      peakRss = Math.max(peakRss, end.rss);
      peakAb = Math.max(peakAb, end.arrayBuffers);

      const results = [f.out, f.lse, g.dq, g.dk, g.dv].reduce((a, t) => a + (t as HostTensor).data.byteLength, 0);
      const extraRss = peakRss - base.rss - results;
      const extraAb = peakAb - base.arrayBuffers - results;
      const extraKernel = extraHwm - results;
      const flops = (4 * T * T * D) / 2;
      console.log(
        [
          `memory test (${be.device}), causal T=${T} D=${D} H=1 f32:`,
          `  forward ${((t1 - t0) / 1000).toFixed(1)} s (${(flops / ((t1 - t0) / 1000) / 1e9).toFixed(2)} GFLOP/s), backward ${((t2 - t1) / 1000).toFixed(1)} s (${((2.5 * flops) / ((t2 - t1) / 1000) / 1e9).toFixed(2)} GFLOP/s)`,
          `  inputs q,k,v,dOut ${fmt(4 * T * D * 4)} (before the baseline); results out,lse,dq,dk,dv ${fmt(results)} (subtracted)`,
          `  baseline rss ${fmt(base.rss)}, peak rss ${fmt(peakRss)} (sampled every 2 ms) → extra ${fmt(extraRss)}`,
          `  peak rss from the kernel (VmHWM, reset at the baseline): ${hwm ? `${fmt(base.rss + extraHwm)} → extra ${fmt(extraKernel)}` : 'unavailable'}`,
          `  baseline arrayBuffers ${fmt(base.arrayBuffers)}, peak ${fmt(peakAb)} → extra ${fmt(extraAb)}`,
          `  WebAssembly memory after the run: ${fmt(be.memoryBytes)}`,
          ...(Math.min(extraRss, extraKernel) < 0 ? ['  (an RSS "extra" below zero: pages the warm-up freed were reused, or V8 returned heap pages; RSS is a whole-process figure with MiB-level noise)'] : []),
          `  naive attention would hold the ${T}×${T} score matrix: ${fmt(T * T * 4)} in float32 (${((T * T * 4) / 2 ** 30).toFixed(1)} GiB)`,
        ].join('\n'),
      );
      expect(extraRss).toBeLessThan(LIMIT);
      expect(extraAb).toBeLessThan(LIMIT);
      if (hwm) expect(extraKernel).toBeLessThan(LIMIT);
      // and the results are sane: finite everywhere
      for (const t of [f.out, g.dq, g.dk, g.dv]) {
        const x = (t as HostTensor).data as Float32Array;
        for (let i = 0; i < x.length; i += 997) expect(Number.isFinite(x[i])).toBe(true);
      }
    } finally {
      await be.dispose();
    }
  }, 1_200_000);
});
