/**
 * The shared conformance kit (@fa/core/testing) against the WebGPU engine, in Node on whatever
 * Vulkan driver Dawn finds (in CI: lavapipe or SwiftShader, installed by scripts/setup-webgpu.sh).
 * Without an adapter the whole suite is registered as skipped, with the reason in its title.
 *
 * FA_WEBGPU_CASES (default 320) and FA_WEBGPU_QUICK (default 0) size the run: a software driver
 * computes ~1 GFLOP/s and compiles each pipeline in seconds; the generic kernels keep the
 * pipeline count at five (eight with native f16), so the full kit takes about a minute on lavapipe.
 *
 * f16 has two paths: native (`enable f16;`, where the adapter has `shader-f16`, the default) and
 * packed (two per u32, every adapter; `nativeF16: false`). The full kit runs with the default
 * path; an f16 subset of the kit (every edge template, FA_WEBGPU_F16_CASES) runs with the other.
 *
 * The KV-cache cases (forwardWithKVCache) run in the first two suites: with host caches and
 * index arrays, then with device caches (upload) and the cases' own index tensors; a third runs
 * them on the tiled KV kernel (kvKernel: 'tiled').
 */
import { afterAll, describe, expect, it } from 'vitest';
import { defineConformanceSuite } from '@fa/core/testing';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';

const count = Number(process.env.FA_WEBGPU_CASES ?? 320);
const quick = (process.env.FA_WEBGPU_QUICK ?? '0') !== '0';
let backend: WebGPUBackend | undefined;
let why = '';
try {
  backend = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}

if (backend) {
  const be = backend;
  afterAll(async () => {
    await be.dispose();
  });
  console.log(`webgpu conformance on ${be.device} (${be.generic ? 'generic' : 'specialised'} kernels), ${count} cases, quick=${quick}`);
  defineConformanceSuite(be, { describe, it, expect, afterAll }, { count, quick, seed: 1, timeout: 600_000 });
  // The same cases with device tensors (upload → forward/backward → read), a smaller set.
  defineConformanceSuite(be, { describe, it, expect, afterAll }, { count: 24, quick: true, seed: 7, upload: true, extras: false, name: 'webgpu-device-tensors', timeout: 600_000 });
  // The KV-cache cases once more on the tiled kernel, which the rule keeps for large Tq (no kit
  // case has that many rows, so the default plan sends every case to the decode kernel).
  const tiled = await createWebGPUBackend({ kvKernel: 'tiled' });
  afterAll(async () => {
    await tiled.dispose();
  });
  defineConformanceSuite(tiled, { describe, it, expect, afterAll }, { cases: [], kvCache: true, seed: 5, upload: true, extras: false, name: 'webgpu-kv-tiled', timeout: 600_000 });

  // The f16 path the default did not take: packed where the adapter has shader-f16, else native
  // (which needs shader-f16, so the subset is then listed as skipped with the reason).
  const otherNative = !be.nativeF16;
  const label = otherNative ? 'webgpu-native-f16' : 'webgpu-packed-f16';
  const other = otherNative && !be.features.has('shader-f16') ? undefined : await createWebGPUBackend({ nativeF16: otherNative });
  if (other) {
    afterAll(async () => {
      await other.dispose();
    });
    console.log(`webgpu conformance, the other f16 path (${otherNative ? 'native' : 'packed'}) on ${other.device}`);
    const f16Count = Number(process.env.FA_WEBGPU_F16_CASES ?? 64);
    // (kvCache: false: the KV-cache kernels read f16 as packed words on either path)
    defineConformanceSuite(other, { describe, it, expect, afterAll }, { count: f16Count, quick: true, seed: 3, dtypes: ['f16'], extras: false, kvCache: false, name: label, timeout: 600_000 });
    describe(label, () => {
      it(`ran the ${otherNative ? 'native' : 'packed'} f16 kernels`, () => {
        expect(other.nativeF16).toBe(otherNative);
        expect(other.lastSpecs.length).toBeGreaterThan(0);
        // The subset is all f16: the last call's kernels are the path under test.
        expect(other.lastSpecs.every((s) => !!s.f16 === otherNative)).toBe(true);
      });
    });
  } else {
    describe(`conformance ${label}`, () => {
      it.skip(`skipped: ${be.device} has no shader-f16, so only the packed f16 path exists here`, () => undefined);
    });
  }
} else {
  describe('conformance webgpu', () => {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
  });
}
