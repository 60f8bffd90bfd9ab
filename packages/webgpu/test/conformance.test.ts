/**
 * The shared conformance kit (@fa/core/testing) against the WebGPU engine, in Node on whatever
 * Vulkan driver Dawn finds (in CI: lavapipe or SwiftShader, installed by scripts/setup-webgpu.sh).
 * Without an adapter the whole suite is registered as skipped, with the reason in its title.
 *
 * FA_WEBGPU_CASES (default 320) and FA_WEBGPU_QUICK (default 0) size the run: a software driver
 * computes ~1 GFLOP/s and compiles each pipeline in seconds; the generic kernels keep the
 * pipeline count at five, so the full kit takes about a minute on lavapipe.
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
} else {
  describe('conformance webgpu', () => {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
  });
}
