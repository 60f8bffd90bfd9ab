// What a user gets from `npm install @fa/cuda` on a machine without nvcc: @fa/core and @fa/cuda
// are packed as they would be published (pnpm pack, which turns `workspace:*` into a version),
// installed with npm into an empty project, offline (every package comes from a tarball made
// here; npm's cache is empty, so a registry fetch would fail), with every folder that holds an
// nvcc removed from PATH. The install must use the prebuilt addon (compile nothing), and the
// installed package must load it and report the driver's state.
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const cudaDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const coreDir = join(cudaDir, '..', 'core');
const supported = process.platform === 'linux' && process.arch === 'x64';
const tmp = mkdtempSync(join(tmpdir(), 'fa-pack-install-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function sh(cmd: string, args: string[], opts: SpawnSyncOptions = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 16 << 20, ...opts });
  if (r.error) throw r.error;
  return { status: r.status, stdout: String(r.stdout), stderr: String(r.stderr) };
}

/** npm's CLI script, found on the PATH the tests were started with. */
function npmCli(): string {
  for (const d of (process.env.PATH ?? '').split(delimiter)) {
    if (d && existsSync(join(d, 'npm'))) return realpathSync(join(d, 'npm'));
  }
  throw new Error('npm is not on PATH');
}

/** PATH without any folder that holds an nvcc, with this Node first (as `node`). */
function pathWithoutNvcc(): string {
  const bin = join(tmp, 'bin');
  mkdirSync(bin, { recursive: true });
  if (!existsSync(join(bin, 'node'))) symlinkSync(process.execPath, join(bin, 'node'));
  const dirs = (process.env.PATH ?? '').split(delimiter).filter((d) => d && !existsSync(join(d, 'nvcc')));
  return [bin, ...dirs].join(delimiter);
}

describe.skipIf(!supported)('npm install of the packed @fa/cuda without nvcc (linux-x64)', () => {
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: pathWithoutNvcc(), npm_config_cache: join(tmp, 'npm-cache'), npm_config_update_notifier: 'false' };
  for (const k of ['CUDA_HOME', 'CUDA_PATH', 'FA_NVCC', 'FA_SKIP_CUDA', 'FA_CUDA_BUILD_FROM_SOURCE', 'npm_config_build_from_source', 'PREBUILDS_ONLY']) delete env[k];
  const npm = (args: string[], cwd: string) => sh(process.execPath, [npmCli(), ...args], { cwd, env });
  let tarballs: string[] = [];

  it('packs @fa/core, @fa/cuda (with the prebuilt addon, without dev scripts) and node-addon-api', () => {
    for (const dir of [coreDir, cudaDir]) {
      const r = sh('pnpm', ['pack', '--pack-destination', tmp], { cwd: dir });
      expect(r.status, r.stderr).toBe(0);
    }
    const naa = dirname(createRequire(join(cudaDir, 'package.json')).resolve('node-addon-api/package.json'));
    const r = sh(process.execPath, [npmCli(), 'pack', naa, '--pack-destination', tmp], { cwd: tmp, env });
    expect(r.status, r.stderr).toBe(0);
    tarballs = ['fa-core-0.1.0.tgz', 'fa-cuda-0.1.0.tgz', `node-addon-api-${JSON.parse(readFileSync(join(naa, 'package.json'), 'utf8')).version}.tgz`].map((f) => join(tmp, f));
    for (const t of tarballs) expect(existsSync(t), t).toBe(true);
    const list = sh('tar', ['tzf', tarballs[1]]).stdout.split('\n');
    expect(list).toContain('package/prebuilds/linux-x64/node.napi.glibc.node');
    expect(list).toContain('package/prebuilds/linux-x64/manifest.json');
    expect(list.filter((f) => /gen-wgmma|prebuild\.mjs|\/test\/|\/bench\/|\/dev\/|\/build\//.test(f))).toEqual([]);
    const pkg = JSON.parse(sh('tar', ['xzf', tarballs[1], 'package/package.json', '-O']).stdout) as { dependencies: Record<string, string> };
    expect(pkg.dependencies['@fa/core']).toBe('0.1.0'); // workspace:* rewritten
  });

  /** Installs the tarballs into a fresh project; returns npm's output and the project dir. */
  function install(name: string, extra: string[] = []) {
    const app = join(tmp, name);
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
    const r = npm(['install', '--offline', '--no-audit', '--no-fund', '--foreground-scripts', ...extra, ...tarballs], app);
    return { app, ...r };
  }

  /** Loads @fa/cuda in the project and reports the loader's choice and the engine's state. */
  function state(app: string) {
    writeFileSync(
      join(app, 'state.mjs'),
      `import { listBackends } from '@fa/core';
import { cudaStatus, loadNative } from '@fa/cuda';
const n = loadNative();
const cuda = (await listBackends()).find((b) => b.name === 'cuda');
console.log(JSON.stringify({ load: n.ok ? { ok: true, source: n.source, path: n.path } : n, status: cudaStatus(), cuda }));
`,
    );
    const r = sh(process.execPath, ['state.mjs'], { cwd: app, env });
    expect(r.status, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as {
      load: { ok: boolean; source?: string; path?: string; reason?: string };
      status: { available: boolean; reason?: string; device?: string };
      cuda: { available: boolean; reason?: string };
    };
  }

  function expectPrebuiltLoaded(app: string) {
    const s = state(app);
    expect(s.load).toEqual({ ok: true, source: 'prebuilt', path: join(realpathSync(app), 'node_modules/@fa/cuda/prebuilds/linux-x64/node.napi.glibc.node') });
    if (s.status.available) {
      console.log(`pack-install: the installed @fa/cuda runs on ${s.status.device}`);
    } else {
      // this machine: the addon loads, and says why no GPU can be used (no driver in CI)
      expect(s.status.reason).toMatch(/^unavailable: (no NVIDIA driver found|the NVIDIA driver supports CUDA|no CUDA device found|CUDA driver: )/);
      expect(s.cuda).toMatchObject({ available: false, reason: s.status.reason!.replace(/^unavailable: /, '') });
      console.log(`pack-install: the installed @fa/cuda reports: ${s.status.reason}`);
    }
  }

  it('installs offline with nvcc hidden, using the prebuilt addon: nothing compiled', () => {
    const r = install('app');
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('@fa/cuda: using the prebuilt addon prebuilds/linux-x64/node.napi.glibc.node; nothing to compile.');
    expect(r.stdout).not.toMatch(/building with|node-gyp|nvcc/);
    const cuda = join(r.app, 'node_modules/@fa/cuda');
    expect(existsSync(join(cuda, 'build'))).toBe(false);
    // @fa/core came from its tarball, once (not from a registry, not nested under @fa/cuda)
    const lock = JSON.parse(readFileSync(join(r.app, 'package-lock.json'), 'utf8')) as { packages: Record<string, { resolved?: string }> };
    expect(lock.packages['node_modules/@fa/core'].resolved).toBe('file:../fa-core-0.1.0.tgz');
    expect(existsSync(join(cuda, 'node_modules/@fa/core'))).toBe(false);
    expectPrebuiltLoaded(r.app);
  });

  it('works with install scripts switched off too (the loader finds the prebuilt addon itself)', () => {
    const r = install('app-no-scripts', ['--ignore-scripts']);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).not.toContain('@fa/cuda:');
    expectPrebuiltLoaded(r.app);
  });
});

if (!supported) it.skip(`npm install of the packed @fa/cuda: skipped, the prebuilt addon is for linux-x64 and this is ${process.platform}-${process.arch}`, () => undefined);
