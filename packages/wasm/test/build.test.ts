/**
 * The shipped binaries (wasm/*.wasm and the native addons native/linux-x64/*.node, committed so
 * users need no toolchain) are what the sources build to: scripts/build-wasm.sh and
 * build-native.sh rebuild them into a temporary folder and each must match byte for byte; the
 * generated micro-kernel headers must be what their templates generate.
 *
 * Needs clang-19 and lld-19 (scripts/setup-wasm.sh at the repository root installs them, and
 * scripts/test.sh runs it first). Without them the rebuild is skipped with the reason, except
 * under CI (CI set), where it fails.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cc = process.env.FA_WASM_CC ?? 'clang-19';
const haveCc = spawnSync(cc, ['--version'], { encoding: 'utf8' }).status === 0;
const why = `${cc} not found (bash scripts/setup-wasm.sh from the repository root installs clang-19 and lld-19)`;

describe('the shipped WebAssembly binaries', () => {
  it('csrc/gen/f32-gemm.h and f32-gemm-x86.h are what scripts/gen-kernels.mjs generates', () => {
    const r = spawnSync(process.execPath, ['scripts/gen-kernels.mjs', '--check'], { cwd: root, encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
  });

  if (!haveCc && !process.env.CI) {
    it.skip(`skipped: ${why}`, () => undefined);
    return;
  }

  it('match a fresh build from csrc/ byte for byte', () => {
    expect(haveCc, why).toBe(true);
    const out = mkdtempSync(join(process.env.TMPDIR ?? tmpdir(), 'fa-wasm-build-'));
    try {
      const r = spawnSync('bash', ['scripts/build-wasm.sh', out], { cwd: root, encoding: 'utf8', env: { ...process.env, FA_WASM_NO_GEN: '1' } });
      expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
      const shipped = readdirSync(join(root, 'wasm')).filter((f) => f.endsWith('.wasm')).sort();
      expect(readdirSync(out).sort()).toEqual(shipped);
      expect(shipped).toEqual(['fa-relaxed-mt.wasm', 'fa-relaxed-st.wasm', 'fa-simd128-mt.wasm', 'fa-simd128-st.wasm']);
      for (const f of shipped) {
        const fresh = readFileSync(join(out, f));
        const have = readFileSync(join(root, 'wasm', f));
        expect(Buffer.compare(fresh, have), `${f} differs from a fresh build: run pnpm --filter @fa/wasm build:wasm and commit wasm/`).toBe(0);
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 120_000);

  it('the native addons match a fresh build from csrc/ byte for byte', () => {
    expect(haveCc, why).toBe(true);
    const out = mkdtempSync(join(process.env.TMPDIR ?? tmpdir(), 'fa-native-build-'));
    try {
      const r = spawnSync('bash', ['scripts/build-native.sh', out], { cwd: root, encoding: 'utf8', env: { ...process.env, FA_WASM_NO_GEN: '1' } });
      expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
      const shipped = readdirSync(join(root, 'native', 'linux-x64')).sort();
      expect(readdirSync(out).sort()).toEqual(shipped);
      expect(shipped).toEqual(['fa-x86-64-v3.node', 'fa-x86-64-v4.node']);
      for (const f of shipped) {
        const fresh = readFileSync(join(out, f));
        const have = readFileSync(join(root, 'native', 'linux-x64', f));
        expect(Buffer.compare(fresh, have), `${f} differs from a fresh build: run pnpm --filter @fa/wasm build:native and commit native/`).toBe(0);
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 300_000);
});
