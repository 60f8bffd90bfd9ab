#!/usr/bin/env node
// Makes the prebuilt addon that @fa/cuda ships, in one command (needs nvcc; after `pnpm build`,
// which builds dist/):
//
//   pnpm --filter @fa/cuda build:prebuilt      (= node scripts/prebuild.mjs)
//
// It builds build/Release/fa_cuda.node from the current csrc/ and binding.gyp (a fresh node-gyp
// build: machine code for sm_90a and sm_80, PTX for compute_80 that newer GPUs JIT), copies it
// stripped to prebuilds/<platform>-<arch>/node.napi.<libc>.node (prebuildify's name, which
// node-gyp-build also reads), checks that it loads in a fresh Node process, lists the GPU code
// it holds (from its fatbins) and the newest glibc/libstdc++ symbols it needs, and writes that, with
// a hash of the sources it was built from, to manifest.json beside it. Commit both files.
//
//   node scripts/prebuild.mjs --check   exit 1 when the prebuilt addon is missing or was built
//                                       from other sources than the current ones
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { cudaHomeOf, findNvcc } from './find-nvcc.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));

/** sha256 over binding.gyp and every file of csrc/ (names and bytes, sorted): what the addon is built from. */
export function sourceHash(dir = root) {
  const h = createHash('sha256');
  const files = ['binding.gyp', ...readdirSync(join(dir, 'csrc')).sort().map((f) => `csrc/${f}`)];
  for (const f of files) {
    h.update(`${f}\0`);
    h.update(readFileSync(join(dir, f)));
    h.update('\0');
  }
  return h.digest('hex');
}

/** The prebuilt addon for this machine and its manifest path (dist/prebuilt.js decides the name). */
async function target() {
  const lookup = join(root, 'dist', 'prebuilt.js');
  if (!existsSync(lookup)) fail('dist/prebuilt.js is missing: run `pnpm --filter @fa/cuda build` first');
  const { currentTarget, prebuiltName, PREBUILDS_DIR } = await import(pathToFileURL(lookup).href);
  const t = currentTarget();
  const dir = join(PREBUILDS_DIR, `${t.platform}-${t.arch}`);
  return { dir, file: join(dir, prebuiltName(t)), manifest: join(dir, 'manifest.json') };
}

function fail(msg) {
  console.error(`prebuild: ${msg}`);
  process.exit(1);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  return r.error ? undefined : r;
}

/** The newest version of each symbol family (GLIBC_, GLIBCXX_) the addon imports. */
function newestSymbols(file) {
  const r = run('objdump', ['-T', file]);
  if (!r || r.status !== 0) return undefined;
  const newest = {};
  for (const m of r.stdout.matchAll(/\((GLIBC|GLIBCXX|CXXABI)_([0-9.]+)\)/g)) {
    const [fam, v] = [m[1], m[2]];
    const cmp = (a, b) => { const x = a.split('.').map(Number), y = b.split('.').map(Number); for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0); return 0; };
    if (!newest[fam] || cmp(v, newest[fam]) > 0) newest[fam] = v;
  }
  return newest;
}

/**
 * The GPU code an addon carries, read from its fatbins (no cuobjdump needed): each fatbin is a
 * 16-byte header (magic 0xBA55ED50, u16 version, u16 header size, u64 size) and entries with a
 * header (u16 kind: 1 PTX, 2 ELF; u32 header size; u64 payload size; u32 arch at byte 28).
 * A cubin names its target inside (sm_90a, sm_80); PTX is listed as compute_<arch>.
 */
export function gpuCode(bytes) {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const cubin = new Set();
  const ptx = new Set();
  const magic = Buffer.from([0x50, 0xed, 0x55, 0xba]);
  for (let i = buf.indexOf(magic); i >= 0 && i + 16 <= buf.length; i = buf.indexOf(magic, i + 4)) {
    if (buf.readUInt16LE(i + 4) !== 1 || buf.readUInt16LE(i + 6) !== 16) continue;
    const end = i + 16 + Number(buf.readBigUInt64LE(i + 8));
    for (let j = i + 16; j + 32 <= Math.min(end, buf.length); ) {
      const kind = buf.readUInt16LE(j);
      const headerSize = buf.readUInt32LE(j + 4);
      const size = Number(buf.readBigUInt64LE(j + 8));
      const arch = buf.readUInt32LE(j + 28);
      if (headerSize < 32 || size <= 0) break;
      const payload = buf.subarray(j + headerSize, j + headerSize + size);
      if (kind === 1) ptx.add(`compute_${arch}`);
      if (kind === 2) cubin.add(/sm_\d+a?/.exec(payload.toString('latin1'))?.[0] ?? `sm_${arch}`);
      j += headerSize + size;
    }
    i = Math.max(i, end - 4);
  }
  const order = (a, b) => parseInt(a.replace(/\D+/g, ''), 10) - parseInt(b.replace(/\D+/g, ''), 10) || a.localeCompare(b);
  return { cubin: [...cubin].sort(order), ptx: [...ptx].sort(order) };
}

async function main() {
  const t = await target();

  if (process.argv.includes('--check')) {
    if (!existsSync(t.file) || !existsSync(t.manifest)) fail(`no prebuilt addon at ${relative(root, t.file)}: run \`pnpm --filter @fa/cuda build:prebuilt\``);
    const m = JSON.parse(readFileSync(t.manifest, 'utf8'));
    const now = sourceHash();
    if (m.sourceHash !== now) fail(`${relative(root, t.file)} was built from other sources (${m.sourceHash.slice(0, 12)}, now ${now.slice(0, 12)}): run \`pnpm --filter @fa/cuda build:prebuilt\` and commit prebuilds/`);
    console.log(`prebuild: ${relative(root, t.file)} matches the sources (${now.slice(0, 12)})`);
    return;
  }

  const nvcc = findNvcc();
  if (!nvcc) fail('nvcc was not found ($FA_NVCC, $CUDA_HOME/bin, /usr/local/cuda/bin, PATH): the prebuilt addon is compiled here');
  const hash = sourceHash();
  const t0 = Date.now();
  const build = run(process.execPath, [join(root, 'scripts', 'build-native.mjs'), '--strict', '--force'], { stdio: 'inherit', env: { ...process.env, FA_SKIP_CUDA: '' } });
  if (!build || build.status !== 0) fail('the build failed');
  if (sourceHash() !== hash) fail('the sources changed during the build; run it again');

  mkdirSync(t.dir, { recursive: true });
  const built = join(root, 'build', 'Release', 'fa_cuda.node');
  copyFileSync(built, t.file);
  const strip = run('strip', ['--strip-unneeded', t.file]);
  if (!strip || strip.status !== 0) console.warn('prebuild: `strip` failed or is missing; the addon keeps its symbols');
  const load = run(process.execPath, ['-e', 'const b = require(process.argv[1]); const p = b.probe(); console.log(JSON.stringify({ version: b.version, runtime: p.runtime }))', t.file]);
  if (!load || load.status !== 0) fail(`the prebuilt addon does not load: ${load?.stderr ?? 'spawn failed'}`);
  const loaded = JSON.parse(load.stdout.trim());
  const nvccVersion = run(nvcc, ['--version'])?.stdout.match(/release [^\n]*/)?.[0] ?? 'unknown';
  const manifest = {
    file: relative(root, t.file),
    bytes: statSync(t.file).size,
    sha256: createHash('sha256').update(readFileSync(t.file)).digest('hex'),
    sourceHash: hash,
    addonVersion: loaded.version,
    cudaRuntime: loaded.runtime,
    nvcc: `${nvccVersion} (${cudaHomeOf(nvcc)})`,
    gpuCode: gpuCode(readFileSync(t.file)),
    needs: newestSymbols(t.file) ?? 'objdump not found',
    node: process.version,
    builtAt: new Date().toISOString(),
  };
  writeFileSync(t.manifest, JSON.stringify(manifest, null, 2) + '\n');
  console.log(`prebuild: wrote ${manifest.file} (${(manifest.bytes / 2 ** 20).toFixed(1)} MiB, ${JSON.stringify(manifest.gpuCode)}, needs ${JSON.stringify(manifest.needs)}) in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
