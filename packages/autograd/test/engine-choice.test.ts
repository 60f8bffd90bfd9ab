/**
 * Engine choice by problem through the tape: with an engine above cpu that declines f32 (as a
 * GPU engine without f32 does), attention() without a backend (core's auto backend) or with a
 * list runs on the next engine, forward and backward; a single name fails with one FAError; and
 * examples/reverse.mjs ends such a run with one line instead of a stack trace. A KVCache on the
 * auto backend lives on the first engine that takes its KV-cache call.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FAError, registerBackend, resetBackends, unregisterBackend } from '@fa/core';
import { decliningBackend } from '@fa/core/testing';
import { KVCache, Rng, attention, noGrad, randn, sum, type AttentionCallOptions } from '@fa/autograd';

const REASON = 'f32 is not computed natively on this GPU; use f16 or bf16';
const calls = { forward: 0 };

describe('attention() when the best engine declines the problem', () => {
  beforeAll(() => {
    registerBackend(
      'fakegpu',
      async () => {
        const d = decliningBackend({ name: 'fakegpu', dtypes: ['f16', 'bf16'], declines: (p) => (p.dtype === 'f32' ? REASON : undefined) });
        return { ...d, forward: (...a: Parameters<typeof d.forward>) => (calls.forward++, d.forward(...a)) };
      },
      1000,
    );
  });
  afterAll(async () => {
    await resetBackends();
    unregisterBackend('fakegpu');
  });

  /** Output and input gradients of sum(attention(q, k, v) * w) with these options. */
  async function run(opts: AttentionCallOptions) {
    const rng = new Rng(3);
    const [q, k, v] = [randn([2, 5, 2, 8], { rng, requiresGrad: true }), randn([2, 6, 1, 8], { rng, requiresGrad: true }), randn([2, 6, 1, 8], { rng, requiresGrad: true })];
    const y = await attention(q, k, v, { causal: true, ...opts });
    await sum(y).backward();
    return [y.data, q.grad!.data, k.grad!.data, v.grad!.data];
  }

  it('without a backend (auto) or with a list, f32 runs on cpu with one note; the results are the cpu engine\'s', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      const want = await run({ backend: 'cpu' });
      expect(await run({})).toEqual(want);
      expect(await run({ backend: ['fakegpu', 'cpu'] })).toEqual(want);
      expect(calls.forward).toBe(0);
      expect(warn.mock.calls).toEqual([[`@fa: fakegpu declines this problem (${REASON}); running it on cpu`]]);
    } finally {
      warn.mockRestore();
    }
  });

  it('runs where the engine accepts the problem (bf16 on fakegpu)', async () => {
    const before = calls.forward;
    const [y] = await run({ dtype: 'bf16' });
    expect(y.length).toBe(2 * 5 * 2 * 8);
    expect(calls.forward).toBe(before + 1);
  });

  it('a single name that declines is one FAError that says what to do', async () => {
    const e = await run({ backend: 'fakegpu' }).then(() => undefined, (x: unknown) => x);
    expect(e).toBeInstanceOf(FAError);
    expect((e as FAError).code).toBe('E_UNSUPPORTED');
    expect((e as FAError).message).toBe(`attention on backend fakegpu: ${REASON} (pass dtype: 'bf16' to compute in 16 bits; or backend: 'auto' lets another engine compute it)`);
  });
});

describe('examples/reverse.mjs with an engine that declines f32 (preloaded with --import)', () => {
  const dir = fileURLToPath(new URL('..', import.meta.url));
  const reverse = (...args: string[]) =>
    spawnSync(process.execPath, ['--import', './test/fixtures/declining-engine.mjs', 'examples/reverse.mjs', '--steps', '3', '--heldOut', '20', ...args], { cwd: dir, encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } });

  it('--backend fakegpu: one line "reverse: E_UNSUPPORTED: ..." and exit 1, no stack trace', () => {
    const r = reverse('--backend', 'fakegpu');
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`reverse: E_UNSUPPORTED: attention on backend fakegpu: ${REASON} (pass dtype: 'bf16' to compute in 16 bits; or backend: 'auto' lets another engine compute it)\n`);
  });

  it('--backend fakegpu,cpu: trains on cpu, with one note', () => {
    const r = reverse('--backend', 'fakegpu,cpu');
    expect(r.stderr).toBe(`@fa: fakegpu declines this problem (${REASON}); running it on cpu\n`);
    expect(r.stdout).toMatch(/held-out \(20 sequences\)/);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!).parameters).toBeGreaterThan(0);
  });

  it('--backend fakegpu --dtype bf16 trains there; a bad option or engine is one line too', () => {
    const r = reverse('--backend', 'fakegpu', '--dtype', 'bf16');
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/trained 3 steps .* on fakegpu \(bf16\)/);
    const bad = reverse('--backend', 'nosuch');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toBe('reverse: E_ARG: unknown engine "nosuch"; engines: cpu, wasm, native, webgpu, cuda, or auto\n');
    expect(reverse('--bogus', '1').stderr).toMatch(/^reverse: E_ARG: unknown option --bogus; options: [^\n]+\n$/);
  });
});

describe('KVCache on the auto backend when the best engine has no KV-cache kernels (as @fa/cuda today)', () => {
  const NO_KV = 'no KV-cache kernels on this fake GPU';
  beforeAll(() => {
    registerBackend('nokv', async () => decliningBackend({ name: 'nokv', dtypes: ['f16', 'bf16'], declines: () => undefined, declinesKVCache: () => NO_KV }), 2000);
  });
  afterAll(async () => {
    await resetBackends();
    unregisterBackend('nokv');
  });

  it('puts caches and lengths on the first engine that takes the call (not where upload() would put bf16), with one note', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      const cfg = { layers: 1, batch: 2, capacity: 8, kvHeads: 1, headDim: 8 };
      const auto = await KVCache.create({ ...cfg, backend: ['nokv', 'cpu'], dtype: 'bf16' });
      expect(auto.backend.name).toBe('cpu');
      expect(warn.mock.calls).toEqual([[`@fa: nokv declines this problem (${NO_KV}); running it on cpu`]]);
      const cpu = await KVCache.create({ ...cfg, backend: 'cpu', dtype: 'bf16' });
      const rng = new Rng(7);
      const [q, k, v] = [randn([2, 3, 2, 8], { rng }), randn([2, 3, 1, 8], { rng }), randn([2, 3, 1, 8], { rng })];
      const a = await noGrad(() => auto.attend(0, q, k, v, { causal: true }));
      const b = await noGrad(() => cpu.attend(0, q, k, v, { causal: true }));
      expect(a.data).toEqual(b.data);
      auto.dispose();
      cpu.dispose();
    } finally {
      warn.mockRestore();
    }
  });
});

describe('examples/engines.mjs', () => {
  it('names the package that registers an engine (native and wasm are @fa/wasm)', async () => {
    const { ENGINE_PACKAGES } = await import('../examples/engines.mjs');
    expect(ENGINE_PACKAGES).toMatchObject({ cpu: 'core', native: 'wasm', wasm: 'wasm', webgpu: 'webgpu', cuda: 'cuda' });
  });
});
