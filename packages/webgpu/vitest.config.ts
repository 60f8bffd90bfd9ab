import { defineConfig } from 'vitest/config';
import { prepareDawnForTests } from '../../scripts/vulkan-driver.mjs';

// Use the software Vulkan driver that scripts/setup-webgpu.sh installed, unless the caller chose
// one. The forks pool starts its workers after this runs, so they inherit the variables.
prepareDawnForTests();

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 600_000,
    hookTimeout: 600_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
