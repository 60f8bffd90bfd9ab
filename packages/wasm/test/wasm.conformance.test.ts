/**
 * The shared conformance kit (@fa/core/testing) against the WebAssembly engine: 320 seeded cases
 * over every option in f32, f16 and bf16, forward and backward, the KV-cache cases
 * (forwardWithKVCache: contiguous and paged caches, appends, GQA, every score option, index
 * tensors), plus the kit's extra checks. Four configurations, each with its own binary or path:
 *   - as registered (SIMD128 in Node 20; small problems run on the calling thread);
 *   - through the worker pool (inline threshold 0: every case on the threads, shared memory;
 *     KV-cache key ranges split every 24 keys, so the chunks' merge runs too);
 *   - relaxed SIMD (fused multiply-add), with V8's flag set for this process, single-threaded
 *     on the unshared-memory binary a page without cross-origin isolation loads;
 *   - device tensors (upload(): dense inputs and outputs in the engine's memory, KV caches read
 *     and appended in place there), through the worker pool.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { defineConformanceSuite } from '@fa/core/testing';
import { createWasmBackend } from '../dist/index.js';

const inline = await createWasmBackend();
const pooled = await createWasmBackend({ inlineBelowFlops: 0, kvChunk: 24 });
const device = await createWasmBackend({ inlineBelowFlops: 0, kvChunk: 24 });
const relaxed = await createWasmBackend({ relaxedSimd: true, threads: 0 });
afterAll(async () => {
  await inline.dispose();
  await pooled.dispose();
  await relaxed.dispose();
  await device.dispose();
});

defineConformanceSuite(inline, { describe, it, expect, afterAll }, { count: 320, seed: 1 });

describe('through the worker pool', () => {
  defineConformanceSuite(pooled, { describe, it, expect, afterAll }, { count: 120, seed: 2, name: 'wasm-pooled' });
});

describe('relaxed SIMD, one thread, unshared memory', () => {
  it('runs the relaxed binary without threads', () => {
    expect(relaxed.isa).toBe('relaxed');
    expect(relaxed.threads).toBe(0);
  });
  defineConformanceSuite(relaxed, { describe, it, expect, afterAll }, { count: 80, seed: 3, name: 'wasm-relaxed' });
});

describe('device tensors', () => {
  defineConformanceSuite(device, { describe, it, expect, afterAll }, { count: 40, quick: true, seed: 7, upload: true, name: 'wasm-device-tensors' });
});
