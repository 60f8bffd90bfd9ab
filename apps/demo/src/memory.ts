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
    // twice: an ArrayBuffer's memory is released by the collection after the one that finds it dead
    gcFn?.();
    gcFn?.();
  } catch {
    /* best effort */
  }
}

/**
 * Bytes of ArrayBuffers and SharedArrayBuffers of the process (process.memoryUsage(): every
 * tensor, result and scratch array the CPU engine allocates for a call is one). Exact for what
 * it counts, and unlike RSS not fooled by the allocator reusing freed pages; it does not see
 * the worker threads' own tiles (allocated once per thread and kept between calls).
 *
 * Engine calls are measured one by one through level() (see MemoryProbe.level): a call's
 * allocations are all alive when it returns. Garbage can linger (a SharedArrayBuffer the worker
 * threads saw stays counted until their own collector runs) but it is in the level before and
 * after a call alike. For code that runs on this thread (naive attention), begin/sample/end
 * track the peak over a baseline that follows the lowest level seen, with a garbage collection
 * at the start and between chunks.
 */
export function bufferProbe(intervalMs = 5): MemoryProbe {
  let base = 0;
  let peak = 0;
  let id: ReturnType<typeof setInterval> | undefined;
  const probe: MemoryProbe = {
    method: 'ArrayBuffer memory held by each engine call when it returns',
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
    level() {
      return process.memoryUsage().arrayBuffers;
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
