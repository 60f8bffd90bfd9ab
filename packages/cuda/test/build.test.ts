// The build-skipped path: without nvcc (or with FA_SKIP_CUDA=1) the install script explains and
// exits 0, and the loader reports "unavailable: built without CUDA (...)".
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
// @ts-expect-error plain ESM helper without types
import { findNvcc } from '../scripts/find-nvcc.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

describe('native build script', () => {
  it('skips with a clear message and exit 0 when FA_SKIP_CUDA=1', () => {
    const r = spawnSync(process.execPath, ['scripts/build-native.mjs', '--dry-run'], { cwd: root, env: { ...process.env, FA_SKIP_CUDA: '1', FA_CUDA_BUILD_FROM_SOURCE: '1' }, encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/Skipping the CUDA build: @fa\/cuda installs and loads, and its backend reports "unavailable: built without CUDA \(FA_SKIP_CUDA=1 at build time\)" unless a prebuilt addon fits this machine/);
  });

  it.skipIf(process.platform !== 'linux' || process.arch !== 'x64')('at install time uses the prebuilt addon that loads here, before looking for nvcc', () => {
    const env = { ...process.env, FA_SKIP_CUDA: '', FA_CUDA_BUILD_FROM_SOURCE: '', npm_config_build_from_source: '' };
    const r = spawnSync(process.execPath, ['scripts/build-native.mjs', '--dry-run'], { cwd: root, env, encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('@fa/cuda: using the prebuilt addon prebuilds/linux-x64/node.napi.glibc.node; nothing to compile.\n');
    // --build-from-source (npm's flag) and the build script go to the source build instead
    for (const [args, e] of [[['--dry-run'], { npm_config_build_from_source: 'true' }], [['--dry-run', '--strict'], {}]] as const) {
      const s = spawnSync(process.execPath, ['scripts/build-native.mjs', ...args], { cwd: root, env: { ...env, ...e }, encoding: 'utf8' });
      expect(s.status).toBe(0);
      expect(s.stdout).not.toMatch(/using the prebuilt/);
    }
  });

  it('finds no nvcc in an environment without one', () => {
    expect(findNvcc({ PATH: '/nonexistent' }, [])).toBeUndefined();
    expect(findNvcc({ PATH: '/nonexistent', FA_NVCC: '/nonexistent/nvcc' }, [])).toBeUndefined();
  });

  it('plans a node-gyp build when nvcc is present (dry run)', () => {
    const r = spawnSync(process.execPath, ['scripts/build-native.mjs', '--dry-run', '--force'], { cwd: root, env: { ...process.env, FA_SKIP_CUDA: '' }, encoding: 'utf8' });
    expect(r.status).toBe(0);
    if (findNvcc()) expect(r.stdout).toMatch(/would run: .*node-gyp.* rebuild/);
    else expect(r.stdout).toMatch(/nvcc was not found/);
  });
});
