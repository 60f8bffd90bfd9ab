/**
 * The web page (web/) built into dist-web/: `pnpm --filter @fa/demo build:web`. Relative asset
 * paths, so the folder can be served from anywhere; ES-module workers (the CPU engine's worker
 * bundles @fa/core, which loads parts of itself dynamically).
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('./web', import.meta.url)),
  base: './',
  logLevel: 'warn',
  build: {
    outDir: fileURLToPath(new URL('./dist-web', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 2000,
  },
  worker: { format: 'es' },
});
