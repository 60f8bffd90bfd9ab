/**
 * Memory probes in Node for the CPU engine and the textbook naive attention.
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

/**
 * Bytes of ArrayBuffers and SharedArrayBuffers of the process (process.memoryUsage(): every
 * tensor, result and scratch array the CPU engine allocates for a call is one), sampled every
 * few milliseconds and after each chunk, with a garbage collection at the start and between
 * chunks. Garbage can linger: a SharedArrayBuffer the worker threads saw stays counted until
 * their own collector runs, and its release can come in the middle of a pass. The baseline
 * therefore follows the lowest level seen (never above what is live), so a release is not
 * mistaken for memory the pass did not use; the peak is the largest level above it. Exact for
 * what it counts, and unlike RSS not fooled by the allocator reusing freed pages. It does not see
 * the worker threads' own tiles (allocated once per thread and kept between calls).
 */
export function bufferProbe(intervalMs = 5): MemoryProbe {
  let base = 0;
  let peak = 0;
  let id: ReturnType<typeof setInterval> | undefined;
  const probe: MemoryProbe = {
    method: 'ArrayBuffer memory of the process (sampled every 5 ms and after each chunk)',
    begin() {
      collectGarbage();
      base = process.memoryUsage().arrayBuffers;
      peak = 0;
      id = setInterval(() => probe.sample(), intervalMs);
      id.unref?.();
    },
    sample() {
      const r = process.memoryUsage().arrayBuffers;
      if (r < base) base = r;
      if (r - base > peak) peak = r - base;
    },
    settle() {
      // chunk results already copied out are garbage: collect it so that the peak is live memory
      collectGarbage();
      probe.sample();
    },
    end() {
      if (id !== undefined) clearInterval(id);
      id = undefined;
      probe.sample();
      return peak;
    },
  };
  return probe;
}
