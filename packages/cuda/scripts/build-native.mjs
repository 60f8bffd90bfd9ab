#!/usr/bin/env node
// The install script, and the native half of `build`. At install time it uses the prebuilt
// addon of prebuilds/<platform>-<arch>/ when one fits this machine and loads: no compiler
// needed. Otherwise it builds build/Release/fa_cuda.node with node-gyp where nvcc is found;
// without nvcc (or with FA_SKIP_CUDA=1) it says so and exits 0: the package still installs and
// loads, and its backend reports "unavailable: built without CUDA (...)".
//
//   node scripts/build-native.mjs            install-time: prebuilt if it fits, else build; a
//                                            failed compile warns, exits 0
//   node scripts/build-native.mjs --strict   (the `build` script) build from source; a failed
//                                            compile fails
//   node scripts/build-native.mjs --force    rebuild even when up to date
//   node scripts/build-native.mjs --dry-run  only print what would happen
// `npm install --build-from-source` (npm_config_build_from_source) or FA_CUDA_BUILD_FROM_SOURCE=1
// skip the prebuilt addon at install time.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { cudaHomeOf, findNvcc } from './find-nvcc.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const args = new Set(process.argv.slice(2));
const strict = args.has('--strict');
const dry = args.has('--dry-run');
const force = args.has('--force');
const addon = join(root, 'build', 'Release', 'fa_cuda.node');
const skipFile = join(root, 'build', 'skip-reason.txt');
const log = (m) => console.log(`@fa/cuda: ${m}`);
const truthy = (v) => v !== undefined && v !== '' && v !== '0' && v !== 'false';

/**
 * The prebuilt addon for this machine that loads in a fresh process, or undefined (saying why).
 * The lookup is dist/prebuilt.js (the loader's own); a checkout that has not been built yet has
 * no dist/ and builds from source.
 */
async function usablePrebuilt() {
  const lookup = join(root, 'dist', 'prebuilt.js');
  if (!existsSync(lookup)) return undefined;
  const { findPrebuilts } = await import(pathToFileURL(lookup).href);
  for (const file of findPrebuilts()) {
    const r = spawnSync(process.execPath, ['-e', 'require(process.argv[1]).probe()', file], { encoding: 'utf8' });
    if (r.status === 0) return file;
    log(`the prebuilt addon ${relative(root, file)} does not load here: ${(r.stderr || '').trim().split('\n').find((l) => /Error/.test(l)) ?? `exit ${r.status}`}`);
  }
  return undefined;
}

const installTime = !strict && !force;
const fromSource = truthy(process.env.npm_config_build_from_source) || truthy(process.env.FA_CUDA_BUILD_FROM_SOURCE);
const prebuilt = installTime && !fromSource ? await usablePrebuilt() : undefined;
if (prebuilt) {
  log(`using the prebuilt addon ${relative(root, prebuilt)}; nothing to compile.`);
  process.exit(0);
}

function skip(reason, detail) {
  log(`${detail} Skipping the CUDA build: @fa/cuda installs and loads, and its backend reports ` +
    `"unavailable: built without CUDA (${reason})" unless a prebuilt addon fits this machine.`);
  if (!dry && !existsSync(addon)) {
    mkdirSync(dirname(skipFile), { recursive: true });
    writeFileSync(skipFile, `${reason}\n`);
  }
  process.exit(0);
}

if (process.env.FA_SKIP_CUDA === '1') skip('FA_SKIP_CUDA=1 at build time', 'FA_SKIP_CUDA=1.');
const nvcc = findNvcc();
if (!nvcc) skip('nvcc not found at build time', 'nvcc was not found ($FA_NVCC, $CUDA_HOME/bin, /usr/local/cuda/bin, PATH).');
const cudaHome = cudaHomeOf(nvcc);

function newest(dir) {
  let t = 0;
  for (const f of readdirSync(dir)) t = Math.max(t, statSync(join(dir, f)).mtimeMs);
  return t;
}
if (!force && existsSync(addon)) {
  const src = Math.max(newest(join(root, 'csrc')), statSync(join(root, 'binding.gyp')).mtimeMs);
  if (statSync(addon).mtimeMs > src) {
    log(`native addon is up to date (${addon}).`);
    process.exit(0);
  }
}

const require = createRequire(import.meta.url);
let gyp = process.env.npm_config_node_gyp;
try { gyp = require.resolve('node-gyp/bin/node-gyp.js'); } catch { /* npm's bundled node-gyp, if any */ }
if (!gyp) skip('node-gyp not found at build time', 'nvcc was found but node-gyp was not.');
const nodedir = process.env.npm_config_nodedir || (existsSync('/usr/include/node/node_api.h') ? '/usr' : undefined);
const nd = nodedir ? [`--nodedir=${nodedir}`] : [];
// An existing build tree is reused (make recompiles only what changed); --force starts afresh.
const fresh = force || !existsSync(join(root, 'build', 'Makefile'));
const steps = fresh ? [[gyp, 'rebuild', '--jobs=max', ...nd]] : [[gyp, 'configure', ...nd], [gyp, 'build', '--jobs=max', ...nd]];
log(`building with ${nvcc} (CUDA at ${cudaHome}); this compiles the kernels and takes a few minutes.`);
if (dry) {
  for (const step of steps) log(`would run: node ${step.join(' ')}`);
  process.exit(0);
}
const t0 = Date.now();
let r = { status: 0 };
for (const step of steps) {
  r = spawnSync(process.execPath, step, { cwd: root, stdio: 'inherit', env: { ...process.env, CUDA_HOME: cudaHome, FA_NVCC: nvcc } });
  if (r.status !== 0) break;
}
if (r.status !== 0) {
  const msg = `the native build failed (node-gyp exit ${r.status ?? r.signal}).`;
  if (strict) {
    console.error(`@fa/cuda: ${msg}`);
    process.exit(1);
  }
  rmSync(addon, { force: true });
  skip('the native build failed at install time', msg);
}
rmSync(skipFile, { force: true });
log(`built ${addon} in ${((Date.now() - t0) / 1000).toFixed(0)} s.`);
