/**
 * Memory probes in Node: the process's resident set size (RSS: every thread, so the CPU
 * engine's worker threads too), sampled every few milliseconds while a pass runs, after a
 * garbage collection so that the baseline holds only live data.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { MemoryProbe } from './story/run.js';

let gcFn: (() => void) | undefined | null = null;

/** A full garbage collection when the runtime allows one (best effort). */
export function collectGarbage(): void {
  if (gcFn === null) {
    try {
      setFlagsFromString('--expose-gc');
      gcFn = runInNewContext('gc') as () => void;
    } catch {
      gcFn = undefined;
    }
  }
  try {
    gcFn?.();
  } catch {
    /* best effort */
  }
}

export function rssProbe(intervalMs = 5): MemoryProbe {
  let base = 0;
  let peak = 0;
  let id: ReturnType<typeof setInterval> | undefined;
  const probe: MemoryProbe = {
    method: 'process RSS (all threads), sampled every 5 ms',
    begin() {
      collectGarbage();
      base = process.memoryUsage.rss();
      peak = base;
      id = setInterval(() => probe.sample(), intervalMs);
    },
    sample() {
      const r = process.memoryUsage.rss();
      if (r > peak) peak = r;
    },
    end() {
      if (id !== undefined) clearInterval(id);
      id = undefined;
      probe.sample();
      return Math.max(0, peak - base);
    },
  };
  return probe;
}
