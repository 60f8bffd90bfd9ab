/**
 * The web page (web/) built into dist-web/: `pnpm --filter @fa/demo build:web`. Relative asset
 * paths, so the folder can be served from anywhere; ES-module workers (the engine worker bundles
 * @fa/core and @fa/wasm, whose own worker threads and .wasm binaries come along as assets).
 * The dev and preview servers send COOP/COEP, which make the page cross-origin isolated so the
 * wasm engine gets SharedArrayBuffer and its threads; web/public/_headers asks the same of static
 * hosts that read it (Netlify, Cloudflare Pages). Served without them, the page runs the wasm
 * engine on one thread and says so.
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const isolation = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' };

export default defineConfig({
  root: fileURLToPath(new URL('./web', import.meta.url)),
  base: './',
  logLevel: 'warn',
  build: {
    outDir: fileURLToPath(new URL('./dist-web', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 2000,
    // the story, and a page measuring the WebGPU engine's host cost per call (web/percall.ts)
    rollupOptions: { input: { main: fileURLToPath(new URL('./web/index.html', import.meta.url)), percall: fileURLToPath(new URL('./web/percall.html', import.meta.url)) } },
  },
  worker: { format: 'es' },
  server: { headers: isolation },
  preview: { headers: isolation },
});
