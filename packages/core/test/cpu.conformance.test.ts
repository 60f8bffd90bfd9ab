/**
 * The shared conformance kit (@fa/core/testing) against the CPU engine: 320 seeded cases over
 * every option (causal, window, GQA/MQA, varlen with empty segments, softcap, ALiBi, scale,
 * Tq ≠ Tk, edge lengths, fully masked rows, large-magnitude scores) in f32, f16 and bf16,
 * forward and backward, plus the kit's extra checks (NaN propagation, repeatability, bad
 * inputs). The first suite uses the engine as registered (small problems run inline); the
 * second forces every case through the worker pool (inline threshold 0), and splits every
 * KV-cache key range into chunks of 24 keys (flash-decoding's split and combine on small cases).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createCpuBackend } from '../dist/index.js';
import { defineConformanceSuite } from '../dist/testing/index.js';

const inline = await createCpuBackend();
const pooled = await createCpuBackend({ inlineBelowFlops: 0, kvChunk: 24 });
afterAll(async () => {
  await inline.dispose();
  await pooled.dispose();
});

defineConformanceSuite(inline, { describe, it, expect, afterAll }, { count: 320, seed: 1 });

describe('through the worker pool', () => {
  defineConformanceSuite(pooled, { describe, it, expect, afterAll }, { count: 120, seed: 2, name: 'cpu-pooled' });
});
