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
import { measurePeakExtra, peakExtraFailures, type PeakExtra } from '../dist/testing/index.js';

const T = 32768;
const D = 64;
const MiB = 1024 * 1024;
const LIMIT = 64 * MiB;

describe('memory', () => {
  it('peakExtraFailures names each broken bound and the first non-finite sample', () => {
    const t = (data: Float32Array) => ({ kind: 'host', dtype: 'f32', shape: [data.length], data }) as unknown as HostTensor;
    const ok = t(new Float32Array(2000));
    const bad = t(new Float32Array(2000).fill(Number.NaN, 997));
    const m = { rss: LIMIT, arrayBuffers: LIMIT - 1, kernelCounter: true, kernel: Number.NaN, results: 0, forward: { out: ok, lse: ok }, backward: { dq: ok, dk: bad, dv: ok }, report: [] };
    expect(peakExtraFailures(m as unknown as PeakExtra, LIMIT)).toEqual([
      'peak extra RSS 64.0 MiB is not under 64.0 MiB',
      'peak extra RSS (kernel counter) NaN MiB is not under 64.0 MiB',
      'dk[997] = NaN is not finite',
    ]);
    expect(peakExtraFailures({ ...m, rss: 0, kernel: 0, backward: { dq: ok, dk: ok, dv: ok } } as unknown as PeakExtra, LIMIT)).toEqual([]);
  });

  it(`causal forward + backward at T = ${T}, D = ${D}, one head: peak extra memory < 64 MiB (naive: ${((T * T * 4) / 2 ** 30).toFixed(0)} GiB for the score matrix)`, async () => {
    const be = await createCpuBackend();
    try {
      const m = await measurePeakExtra(be, { t: T, d: D, arrayBuffersNote: "the engine's own buffers: private dQ, Dvec, float64 lse" });
      console.log(m.report.join('\n'));
      // extra memory under the limit, and the results sane (finite wherever sampled)
      expect(peakExtraFailures(m, LIMIT)).toEqual([]);
    } finally {
      await be.dispose();
    }
  }, 1_200_000);
});
