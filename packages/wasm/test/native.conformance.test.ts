/**
 * The shared conformance kit (@fa/core/testing) against the native engine: the wasm engine's
 * sources compiled for x86-64 (native/linux-x64/, src/native.ts), with its wider matrix
 * micro-kernels. Each level this CPU runs gets the kit: x86-64-v4 (AVX-512) and x86-64-v3 (AVX2),
 * as registered (small problems on the calling thread) and through the worker pool, plus device
 * tensors on the best level. Skipped, saying why, where no native build runs (not Linux x86-64,
 * or a CPU without AVX2).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { defineConformanceSuite } from '@fa/core/testing';
import { createWasmBackend, nativeTarget, type NativeLevel } from '../dist/index.js';

const target = await nativeTarget();
const levels: NativeLevel[] = target.level === 'x86-64-v4' ? ['x86-64-v4', 'x86-64-v3'] : target.level ? [target.level] : [];

describe.skipIf(!target.level)(`native engine${target.why ? ` (skipped: ${target.why})` : ''}`, () => {
  for (const [i, level] of levels.entries()) {
    describe(level, async () => {
      const inline = await createWasmBackend({ native: true, nativeLevel: level });
      const pooled = await createWasmBackend({ native: true, nativeLevel: level, inlineBelowFlops: 0, kvChunk: 24 });
      afterAll(async () => {
        await inline.dispose();
        await pooled.dispose();
      });
      it('runs the native build it was asked for', () => {
        expect(inline.name).toBe('native');
        expect(inline.isa).toBe(level);
        expect(inline.device).toContain(`native ${level}`);
      });
      defineConformanceSuite(inline, { describe, it, expect, afterAll }, { count: i === 0 ? 320 : 120, seed: 11 + i, name: `native-${level}` });
      describe('through the worker pool', () => {
        defineConformanceSuite(pooled, { describe, it, expect, afterAll }, { count: 120, seed: 21 + i, name: `native-${level}-pooled` });
      });
      if (i === 0) {
        const device = await createWasmBackend({ native: true, nativeLevel: level, inlineBelowFlops: 0, kvChunk: 24 });
        afterAll(() => device.dispose());
        describe('device tensors', () => {
          defineConformanceSuite(device, { describe, it, expect, afterAll }, { count: 40, quick: true, seed: 27, upload: true, name: `native-${level}-device-tensors` });
        });
      }
    });
  }
});
