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
    const r = spawnSync(process.execPath, ['scripts/build-native.mjs', '--dry-run'], { cwd: root, env: { ...process.env, FA_SKIP_CUDA: '1' }, encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/Skipping the CUDA build: @fa\/cuda installs and loads, and its backend reports "unavailable: built without CUDA \(FA_SKIP_CUDA=1 at build time\)"/);
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
