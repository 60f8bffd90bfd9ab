import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { prepareDawnForTests } from '../../scripts/vulkan-driver.mjs';

// The cross-backend test runs @fa/webgpu when it can start: use the software Vulkan driver that
// scripts/setup-webgpu.sh installed, unless the caller chose one (as packages/webgpu does).
prepareDawnForTests();

export default defineConfig({
  resolve: {
    // Tests and examples import the built package (the CPU engine of @fa/core runs worker
    // threads from its dist files): build first.
    alias: [{ find: /^@fa\/autograd$/, replacement: fileURLToPath(new URL('./dist/index.js', import.meta.url)) }],
  },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 180_000,
    pool: 'forks',
    // The CPU engine uses every core; run test files one after another.
    fileParallelism: false,
  },
});
