// The @fa/core conformance kit on the CUDA backend. Runs where a GPU and the addon are present;
// elsewhere (CI) it is reported as skipped with the reason. On the GPU machine, without vitest,
// bench/conformance.mjs runs the same kit and prints the summary.
import { defineConformanceSuite } from '@fa/core/testing';
import { afterAll, describe, expect, it } from 'vitest';
import { createCudaBackend, cudaStatus } from '../src/index.js';

const st = cudaStatus();
if (st.available) {
  const backend = await createCudaBackend();
  defineConformanceSuite(backend, { describe, it, expect, afterAll });
  defineConformanceSuite(backend, { describe, it, expect }, { upload: true, dtypes: ['bf16', 'f32'], count: 96, extras: false, name: 'cuda (device tensors)' });
  // the plain float32 FFMA kernels (what GPUs whose shared memory cannot hold the split tiles run)
  const ffma = await createCudaBackend({ f32: 'ffma' });
  defineConformanceSuite(ffma, { describe, it, expect }, { dtypes: ['f32'], count: 160, name: 'cuda (f32 on FFMA)' });
} else {
  describe('conformance cuda', () => {
    it.skip(`skipped: ${st.reason}`, () => undefined);
  });
}
