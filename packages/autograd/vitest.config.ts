import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // Tests and examples import the built package (the CPU engine of @fa/core runs worker
    // threads from its dist files); `pnpm build` first.
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
