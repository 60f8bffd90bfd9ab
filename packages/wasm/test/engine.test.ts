/**
 * The engine's own contract beyond the kit: options and their errors, the device string, the
 * memory ceiling (supports() declines and a call fails cleanly with E_TOO_LARGE, the backend
 * stays usable), concurrent calls, results independent of the thread count in the forward,
 * disposal, and Node started with V8 flags (workers must still start).
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { AutoBackend, describeKVCacheProblemShapes, describeProblem, isFAError, resolveBackend, tensor, type HostTensor, type Tensor } from '@fa/core';
import { makeCase, runConformance } from '@fa/core/testing';
import { addonUrl, createWasmBackend, levelFromCpuinfo, NATIVE_PRIORITY, nativeTarget, WASM_PRIORITY } from '../dist/index.js';
import { loadAddon } from '../dist/native.js';

const native = await nativeTarget();

function rand(shape: number[], seed: number): HostTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const a = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = s / 2 ** 32 - 0.5;
  }
  return tensor(a, shape, 'f32');
}

/** The float32 data of a host result. */
const f32 = (t: Tensor): Float32Array => (t as HostTensor).data as Float32Array;
const same = (a: Float32Array, b: Float32Array): boolean => Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return isFAError(e) ? e.code : `not an FAError: ${String(e)}`;
  }
}

describe('wasm engine', () => {
  it('sits between cpu and webgpu in the registry', () => {
    expect(WASM_PRIORITY).toBeGreaterThan(0);
    expect(WASM_PRIORITY).toBeLessThan(50);
  });

  it('is one of the auto backend\'s engines, above cpu, and takes its dense and KV-cache calls', async () => {
    const auto = await resolveBackend();
    expect(auto).toBeInstanceOf(AutoBackend);
    const names = (auto as AutoBackend).engines.map((c) => c.name);
    expect(names.indexOf('wasm')).toBeGreaterThanOrEqual(0);
    expect(names.indexOf('wasm')).toBeLessThan(names.indexOf('cpu'));
    // where the native build runs (Node on Linux x86-64 with AVX2) it comes first; else wasm
    const first = native.level ? 'native' : 'wasm';
    if (native.level) expect(names.indexOf('native')).toBeLessThan(names.indexOf('wasm'));
    else expect(names).not.toContain('native');
    const kv = describeKVCacheProblemShapes([1, 1, 8, 64], [1, 128, 2, 64], 'bf16', { cacheSeqlens: [100], newShape: [1, 1, 2, 64] });
    expect((auto as AutoBackend).resolve(kv).backend.name).toBe(first);
    expect((auto as AutoBackend).resolve(describeProblem(rand([1, 64, 2, 32], 1), rand([1, 64, 2, 32], 2), rand([1, 64, 2, 32], 3))).backend.name).toBe(first);
    // caches uploaded through the auto backend go to that engine, and its KV-cache calls run there
    const kc = await auto.upload(rand([1, 128, 2, 64], 4));
    expect(kc.kind === 'device' && kc.backend).toBe(first);
    await auto.dispose();
  });

  it('refuses bad options with E_ARG', async () => {
    for (const o of [{ threads: -1 }, { threads: 1.5 }, { relaxedSimd: 'yes' }, { native: 'yes' }, { native: true, nativeLevel: 'x86-64-v2' }, { tiles: { br: 0, bc: 64 } }, { tiles: { br: 64 } }, { backwardTiles: { br: 64, bc: 5000 } }, { inlineBelowFlops: -1 }, { maxMemoryBytes: 10 }, { kvChunk: 0 }]) {
      expect(await code(createWasmBackend(o as never)), JSON.stringify(o)).toBe('E_ARG');
    }
  });

  it('native: above wasm in the registry; its level from the CPU flags; unavailable with the reason where it cannot run', async () => {
    expect(NATIVE_PRIORITY).toBeGreaterThan(WASM_PRIORITY);
    expect(NATIVE_PRIORITY).toBeLessThan(50);
    const v3 = 'avx2 fma bmi1 bmi2 f16c movbe sse4_2';
    expect(levelFromCpuinfo(`processor : 0\nflags : ${v3} avx512f avx512bw avx512cd avx512dq avx512vl\n`)).toBe('x86-64-v4');
    expect(levelFromCpuinfo(`flags\t\t: ${v3} avx512f\n`)).toBe('x86-64-v3');
    expect(levelFromCpuinfo('flags : sse4_2 avx fma\n')).toBeUndefined();
    expect(levelFromCpuinfo('Features : fp asimd\n')).toBeUndefined();
    if (native.level) {
      const be = await createWasmBackend({ native: true, threads: 0 });
      expect(be.name).toBe('native');
      expect(be.device).toBe(`native ${native.level} (${native.level === 'x86-64-v4' ? 'AVX-512' : 'AVX2'}) ×1 thread`);
      await be.dispose();
      // a folder without the addons: E_DEVICE naming the file; a nativePath that is no folder here: E_ARG
      expect(await code(createWasmBackend({ native: true, nativePath: new URL('file:///nonexistent/') }))).toBe('E_DEVICE');
      expect(await code(createWasmBackend({ native: true, nativePath: '/nonexistent/folder' }))).toBe('E_DEVICE');
      expect(await code(createWasmBackend({ native: true, nativePath: 'https://example.com/fa/' }))).toBe('E_ARG');
      expect(await code(createWasmBackend({ native: true, nativePath: 42 as never }))).toBe('E_ARG');
      expect(await code(createWasmBackend({ nativeLevel: 'x86-64-v3' }))).toBe('E_ARG');
      // a path (relative to the working directory) to the package's own folder loads
      const rel = relative(process.cwd(), fileURLToPath(new URL('../native/linux-x64/', import.meta.url)));
      const byPath = await createWasmBackend({ native: true, nativePath: rel, threads: 0 });
      expect(byPath.name).toBe('native');
      await byPath.dispose();
      // a file that claims the other level is refused before anything runs on it
      if (native.level === 'x86-64-v4') {
        const dir = mkdtempSync(join(tmpdir(), 'fa-native-'));
        copyFileSync(fileURLToPath(addonUrl('x86-64-v3')), join(dir, 'fa-x86-64-v4.node'));
        expect(await code(createWasmBackend({ native: true, nativeLevel: 'x86-64-v4', nativePath: dir }))).toBe('E_DEVICE');
        rmSync(dir, { recursive: true, force: true });
      }
      // the addon relies on a shared memory keeping its address when it grows
      const addon = await loadAddon(addonUrl(native.level));
      const mem = new WebAssembly.Memory({ initial: 1, maximum: 65536, shared: true });
      const before = addon.address(new Uint8Array(mem.buffer, 0, 1));
      mem.grow(4096);
      expect(addon.address(new Uint8Array(mem.buffer, 0, 1))).toBe(before);
    } else {
      expect(await code(createWasmBackend({ native: true }))).toBe('E_DEVICE');
    }
  });

  it('says in its device string which instruction set ran and on how many threads', async () => {
    const one = await createWasmBackend({ threads: 0, relaxedSimd: false });
    const two = await createWasmBackend({ threads: 2, relaxedSimd: false });
    expect(one.device).toBe('WebAssembly SIMD128 ×1 thread');
    expect(two.device).toBe('WebAssembly SIMD128 ×2 threads');
    expect([one.isa, one.threads, two.threads]).toEqual(['simd128', 0, 2]);
    await one.dispose();
    await two.dispose();
  });

  it('declines what does not fit its memory, fails such a call with E_TOO_LARGE, and stays usable', async () => {
    const be = await createWasmBackend({ threads: 0, maxMemoryBytes: 2 * 2 ** 20 });
    const small = [1, 64, 2, 32];
    const big = [1, 2048, 4, 64];
    const [q, k, v] = [rand(big, 1), rand(big, 2), rand(big, 3)];
    const s = be.supports(describeProblem(q, k, v));
    expect(s.ok).toBe(false);
    if (!s.ok) expect(s.reason).toMatch(/needs about .* of WebAssembly memory/);
    expect(await code(be.forward(q, k, v))).toBe('E_TOO_LARGE');
    const [qs, ks, vs] = [rand(small, 1), rand(small, 2), rand(small, 3)];
    expect(be.supports(describeProblem(qs, ks, vs)).ok).toBe(true);
    const f = await be.forward(qs, ks, vs);
    expect(Number.isFinite(f32(f.out)[0])).toBe(true);
    await be.dispose();
  });

  it('serialises concurrent calls: each gets the result it would get alone', async () => {
    const be = await createWasmBackend({ inlineBelowFlops: 0 });
    const shapes = [[2, 100, 4, 32], [1, 77, 2, 64], [3, 50, 2, 16]];
    const inputs = shapes.map((s, i) => [rand(s, 3 * i + 1), rand(s, 3 * i + 2), rand(s, 3 * i + 3)] as const);
    const alone: Float32Array[] = [];
    for (const [q, k, v] of inputs) alone.push(f32((await be.forward(q, k, v, { causal: true })).out).slice());
    const together = await Promise.all(inputs.map(([q, k, v]) => be.forward(q, k, v, { causal: true })));
    together.forEach((r, i) => expect(same(f32(r.out), alone[i])).toBe(true));
    await be.dispose();
  });

  it('gives bit-identical forward results on one thread and on two', async () => {
    const one = await createWasmBackend({ threads: 0 });
    const two = await createWasmBackend({ threads: 2, inlineBelowFlops: 0 });
    const s = [1, 300, 4, 64];
    const [q, k, v] = [rand(s, 7), rand(s, 8), rand(s, 9)];
    const a = await one.forward(q, k, v, { window: [40, 3] });
    const b = await two.forward(q, k, v, { window: [40, 3] });
    expect(same(f32(a.out), f32(b.out))).toBe(true);
    expect(same(f32(a.lse), f32(b.lse))).toBe(true);
    await one.dispose();
    await two.dispose();
  });

  it('keeps its memory for the next call and reports the largest call', async () => {
    const be = await createWasmBackend({ threads: 0 });
    const s = [1, 512, 2, 64];
    const [q, k, v] = [rand(s, 1), rand(s, 2), rand(s, 3)];
    be.resetCallBytesPeak();
    await be.forward(q, k, v);
    const grown = be.memoryBytes;
    const peak = be.callBytesPeak;
    // q, k, v as float32 at least; far below the 512² score matrix of one head
    expect(peak).toBeGreaterThan(3 * 512 * 2 * 64 * 4);
    expect(peak).toBeLessThan(512 * 512 * 4 * 2 + 3 * 512 * 2 * 64 * 4 * 3);
    await be.forward(q, k, v);
    expect(be.memoryBytes).toBe(grown);
    await be.dispose();
  });

  // the wasm build, and each native level this CPU runs (their own micro-kernel shapes: 8x32, 6x16)
  const builds: { name: string; opts: object }[] = [{ name: 'wasm', opts: {} }];
  if (native.level === 'x86-64-v4') builds.push({ name: 'native x86-64-v4', opts: { native: true, nativeLevel: 'x86-64-v4' } });
  if (native.level) builds.push({ name: 'native x86-64-v3', opts: { native: true, nativeLevel: 'x86-64-v3' } });
  it.each(builds)('$name: passes the kit with any tile sizes (1×1, odd, wider than the sequences) and any head dim', async ({ opts }) => {
    for (const tiles of [{ br: 1, bc: 1 }, { br: 5, bc: 7 }, { br: 33, bc: 200 }, { br: 13, bc: 40 }]) {
      const be = await createWasmBackend({ ...opts, threads: 0, tiles, backwardTiles: { br: tiles.bc, bc: tiles.br } });
      const s = await runConformance(be, { count: 40, seed: 9, extras: false });
      expect(s.failures.map((f) => f.message), JSON.stringify(tiles)).toEqual([]);
      await be.dispose();
    }
    const be = await createWasmBackend({ ...opts, inlineBelowFlops: 0 });
    const cases = [3, 12, 200, 1000].flatMap((d) => [makeCase({ dtype: 'f32', d, tq: 37, tk: 45, h: 2, hkv: 1, causal: true }), makeCase({ dtype: 'bf16', d, tq: 20, h: 2, softcap: 5 })]);
    const s = await runConformance(be, { cases, extras: false });
    expect(s.failures.map((f) => f.message)).toEqual([]);
    expect(s.passed).toBe(cases.length);
    await be.dispose();
  });

  it('is unusable after dispose, with E_DEVICE', async () => {
    const be = await createWasmBackend();
    await be.dispose();
    const s = [1, 8, 1, 8];
    expect(await code(be.forward(rand(s, 1), rand(s, 2), rand(s, 3)))).toBe('E_DEVICE');
    await be.dispose(); // twice is fine
  });

  it('starts its worker threads under `node --experimental-wasm-relaxed-simd` (V8 flags cannot go to workers)', () => {
    const index = fileURLToPath(new URL('../dist/index.js', import.meta.url));
    const core = fileURLToPath(new URL('../node_modules/@fa/core/dist/index.js', import.meta.url));
    const script = `
      const { createWasmBackend } = await import(${JSON.stringify(index)});
      const { tensor } = await import(${JSON.stringify(core)});
      const be = await createWasmBackend({ threads: 2, inlineBelowFlops: 0 });
      const t = () => tensor(Float32Array.from({ length: 2 * 64 * 2 * 32 }, (_, i) => Math.sin(i)), [2, 64, 2, 32], 'f32');
      const f = await be.forward(t(), t(), t());
      console.log(be.device, Number.isFinite(f.out.data[5]));
      await be.dispose();`;
    const r = spawnSync(process.execPath, ['--experimental-wasm-relaxed-simd', '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('WebAssembly relaxed SIMD ×2 threads true');
  });
});
