/**
 * The memory claim: forward + backward at T = 32768, D = 64 (one head) never holds anything of
 * size T×T. Naive attention would materialise the 32768² score matrix — 4 GiB in float32 (and
 * again for P and dP in the backward); the tiled engine's extra memory is a few tiles per thread,
 * O(T) row statistics and one private dQ accumulator.
 *
 * How it is measured: measurePeakExtra (@fa/core/testing, src/testing/memory.ts): inputs in
 * shared memory before the baseline, the pool warmed up, the peak RSS (sampled, and the kernel's
 * VmHWM) and arrayBuffers above the baseline, less the results the engine returns.
 *
 * Causal, because the non-causal run takes twice as long on the 2 shared cores of the CI
 * machine; the working set does not depend on it.
 */
import { describe, expect, it } from 'vitest';
import { createCpuBackend, type HostTensor } from '../dist/index.js';
import { measurePeakExtra } from '../dist/testing/index.js';

const T = 32768;
const D = 64;
const MiB = 1024 * 1024;
const LIMIT = 64 * MiB;

describe('memory', () => {
  it(`causal forward + backward at T = ${T}, D = ${D}, one head: peak extra memory < 64 MiB (naive: ${((T * T * 4) / 2 ** 30).toFixed(0)} GiB for the score matrix)`, async () => {
    const be = await createCpuBackend();
    try {
      const m = await measurePeakExtra(be, { t: T, d: D, arrayBuffersNote: "the engine's own buffers: private dQ, Dvec, float64 lse" });
      console.log(m.report.join('\n'));
      expect(m.rss).toBeLessThan(LIMIT);
      expect(m.arrayBuffers).toBeLessThan(LIMIT);
      if (m.kernelCounter) expect(m.kernel).toBeLessThan(LIMIT);
      // and the results are sane: finite everywhere
      for (const t of [m.forward.out, m.backward.dq, m.backward.dk, m.backward.dv]) {
        const x = (t as HostTensor).data as Float32Array;
        for (let i = 0; i < x.length; i += 997) expect(Number.isFinite(x[i])).toBe(true);
      }
    } finally {
      await be.dispose();
    }
  }, 1_200_000);
});
