import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // the CLI tests spawn the command and the web test drives Chromium: one file at a time on
    // small machines keeps timings (and the CPU engine's threads) predictable
    fileParallelism: false,
  },
});
