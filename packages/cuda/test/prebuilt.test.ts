// The prebuilt addon: the lookup (node-gyp-build's rules for prebuilds/<platform>-<arch>/), the
// loader's order, the committed linux-x64 binary (built from the current sources, carrying the
// GPU code binding.gyp asks for), and the reasons the engine gives on a machine it cannot use.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { findPrebuilts, prebuiltName, probeReason, PREBUILDS_DIR } from '../src/index.js';
// @ts-expect-error plain ESM helper without types
import { gpuCode, sourceHash } from '../scripts/prebuild.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tmp = mkdtempSync(join(tmpdir(), 'fa-prebuilt-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('findPrebuilts (prebuilds/<platform>-<arch>/<tags>.node, as node-gyp-build reads them)', () => {
  const dir = join(tmp, 'prebuilds');
  const files = {
    'linux-x64': ['node.napi.glibc.node', 'node.napi.musl.node', 'electron.napi.node', 'node.napi.uv1.node', 'manifest.json'],
    'linux-x64+arm64': ['node.napi.node'],
    'linux-arm64': ['node.napi.glibc.node'],
    'darwin-x64': ['node.napi.node'],
    'linux-x64-extra': ['node.napi.node'],
  };
  for (const [d, fs] of Object.entries(files)) {
    mkdirSync(join(dir, d), { recursive: true });
    for (const f of fs) writeFileSync(join(dir, d, f), '');
  }
  const rel = (ps: string[]) => ps.map((p) => p.slice(dir.length + 1));

  it('matches platform, arch and libc; prefers a one-arch folder and the most specific tags', () => {
    expect(rel(findPrebuilts({ platform: 'linux', arch: 'x64', libc: 'glibc' }, dir))).toEqual(['linux-x64/node.napi.glibc.node', 'linux-x64+arm64/node.napi.node']);
    expect(rel(findPrebuilts({ platform: 'linux', arch: 'x64', libc: 'musl' }, dir))).toEqual(['linux-x64/node.napi.musl.node', 'linux-x64+arm64/node.napi.node']);
    expect(rel(findPrebuilts({ platform: 'linux', arch: 'arm64', libc: 'glibc' }, dir))).toEqual(['linux-arm64/node.napi.glibc.node', 'linux-x64+arm64/node.napi.node']);
    expect(findPrebuilts({ platform: 'win32', arch: 'x64', libc: 'glibc' }, dir)).toEqual([]);
    expect(findPrebuilts({ platform: 'linux', arch: 'x64', libc: 'glibc' }, join(tmp, 'none'))).toEqual([]);
  });

  it('the prebuild script writes the name the lookup picks first', () => {
    expect(prebuiltName({ platform: 'linux', arch: 'x64', libc: 'glibc' })).toBe('node.napi.glibc.node');
    expect(prebuiltName({ platform: 'darwin', arch: 'arm64', libc: 'glibc' })).toBe('node.napi.node');
  });
});

describe('the committed prebuilt addon for linux-x64', () => {
  const file = join(PREBUILDS_DIR, 'linux-x64', 'node.napi.glibc.node');
  const manifest = JSON.parse(readFileSync(join(PREBUILDS_DIR, 'linux-x64', 'manifest.json'), 'utf8')) as Record<string, unknown>;
  const bytes = readFileSync(file);

  it('was built from the current csrc/ and binding.gyp', () => {
    const now = sourceHash() as string;
    expect(manifest.sourceHash, `prebuilds/linux-x64 was built from other sources: run \`pnpm --filter @fa/cuda build:prebuilt\` (needs nvcc) and commit prebuilds/`).toBe(now);
    expect(manifest.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(manifest.bytes).toBe(bytes.length);
  });

  it("carries the GPU code binding.gyp asks for: cubins for sm_90a and sm_80, PTX for newer GPUs", () => {
    const gyp = readFileSync(join(root, 'binding.gyp'), 'utf8');
    const asked = [...gyp.matchAll(/-gencode=arch=(compute_\w+),code=(\w+)/g)];
    const want = { cubin: asked.filter((m) => m[2].startsWith('sm_')).map((m) => m[2]).sort(), ptx: asked.filter((m) => m[2].startsWith('compute_')).map((m) => m[2]).sort() };
    expect(want).toEqual({ cubin: ['sm_80', 'sm_90a'], ptx: ['compute_80'] });
    expect(gpuCode(bytes)).toEqual(want);
    expect(manifest.gpuCode).toEqual(want);
  });

  it.skipIf(process.platform !== 'linux' || process.arch !== 'x64')('loads in a fresh Node (no CUDA call on require)', () => {
    const r = spawnSync(process.execPath, ['-e', 'const b = require(process.argv[1]); console.log(b.version, typeof b.probe, typeof b.Context)', file], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe('0.1.0 function function');
  });
});

describe('the loader: a local build first (as node-gyp-build), then the prebuilt addon', () => {
  const load = (env: NodeJS.ProcessEnv) =>
    spawnSync(process.execPath, ['--input-type=module', '-e', "const { loadNative } = await import('./dist/native.js'); const n = loadNative(); console.log(JSON.stringify(n.ok ? { source: n.source, path: n.path } : n));"], { cwd: root, encoding: 'utf8', env: { ...process.env, ...env } });

  it.skipIf(process.platform !== 'linux' || process.arch !== 'x64')('PREBUILDS_ONLY=1 loads the prebuilt addon even beside a local build', () => {
    const r = load({ PREBUILDS_ONLY: '1' });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ source: 'prebuilt', path: join(PREBUILDS_DIR, 'linux-x64', 'node.napi.glibc.node') });
    const d = JSON.parse(load({ PREBUILDS_ONLY: '' }).stdout) as { source: string; path: string };
    expect(d.source).toBe(d.path.endsWith('build/Release/fa_cuda.node') ? 'build' : 'prebuilt');
  });
});

describe('probeReason: what a person can do about a failed probe', () => {
  const insufficient = 'CUDA driver: cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version)';
  it('no driver, an old driver, anything else', () => {
    expect(probeReason({ ok: false, driver: 0, runtime: 13000, reason: insufficient })).toBe(`no NVIDIA driver found (${insufficient})`);
    expect(probeReason({ ok: false, driver: 12040, runtime: 13000, reason: insufficient })).toBe(
      `the NVIDIA driver supports CUDA 12.4; this addon was built with CUDA 13.0 and needs a driver for it (or build it with your CUDA toolkit: npm rebuild @fa/cuda --build-from-source) (${insufficient})`,
    );
    expect(probeReason({ ok: false, driver: 13000, runtime: 13000, reason: 'no CUDA device found' })).toBe('no CUDA device found');
  });
});
