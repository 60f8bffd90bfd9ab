/**
 * The memory claim for the wasm engine (and the native one, where it runs), measured as packages/core/test/memory.test.ts measures
 * the cpu engine's (measurePeakExtra, @fa/core/testing): causal forward + backward at T = 32768,
 * D = 64 (one head) never holds anything of size T×T. The engine's extra memory is its
 * WebAssembly memory: float32 copies of the inputs (out written over q, dK/dV over k/v), K^T and
 * V tiles (forward), the dQ accumulator and one private dQ accumulator (backward: one head, two
 * threads), per-thread tiles — all O(T), about 48 MiB here; naive attention would hold the
 * 32768² score matrix, 4 GiB in float32.
 *
 * Extra = peak − baseline − the bytes of the results the engine returns. The WebAssembly memory
 * grows during the run and is counted in full (rss); it is not an ArrayBuffer V8 counts in
 * arrayBuffers.
 */
import { describe, expect, it } from 'vitest';
import { measurePeakExtra, peakExtraFailures } from '@fa/core/testing';
import { createWasmBackend, nativeTarget } from '../dist/index.js';

const native = await nativeTarget();

const T = 32768;
const D = 64;
const MiB = 1024 * 1024;
const LIMIT = 64 * MiB;

describe('memory', () => {
  // the wasm engine, and the native one where it runs (the same memory layout, its own kernels)
  it.each(native.level ? ['wasm', 'native'] : ['wasm'])(`%s: causal forward + backward at T = ${T}, D = ${D}, one head: peak extra memory < 64 MiB (naive: ${((T * T * 4) / 2 ** 30).toFixed(0)} GiB for the score matrix)`, async (engine) => {
    const be = await createWasmBackend({ native: engine === 'native' });
    try {
      const m = await measurePeakExtra(be, { t: T, d: D });
      console.log([...m.report, `  WebAssembly memory after the run: ${(be.memoryBytes / MiB).toFixed(1)} MiB`].join('\n'));
      // extra memory under the limit, and the results sane (finite wherever sampled)
      expect(peakExtraFailures(m, LIMIT)).toEqual([]);
    } finally {
      await be.dispose();
    }
  }, 1_200_000);
});
