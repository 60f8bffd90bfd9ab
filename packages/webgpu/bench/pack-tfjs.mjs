// Bundles tfjs-core + tfjs-backend-webgpu (devDependencies) into one ESM file for the GPU
// machine, which has no registry: node bench/pack-tfjs.mjs <out-file>  (default
// ../../.fa-device/run/tfjs.bundle.mjs). About 1 MB instead of 55 MB of dist folders.
import { build } from 'esbuild';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeFileSync, mkdirSync } from 'node:fs';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? resolve(here, '../../../.fa-device/run/tfjs.bundle.mjs'));
const r = await build({
  stdin: {
    contents: "import * as tf from '@tensorflow/tfjs-core';\nimport '@tensorflow/tfjs-core/dist/register_all_gradients';\nimport '@tensorflow/tfjs-backend-webgpu';\nexport default tf;\n",
    resolveDir: here,
    loader: 'js',
  },
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  minify: true,
  write: false,
  logLevel: 'error',
  banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
});
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, r.outputFiles[0].contents);
console.log(`pack-tfjs: ${out} (${(r.outputFiles[0].contents.length / 1e6).toFixed(2)} MB)`);
