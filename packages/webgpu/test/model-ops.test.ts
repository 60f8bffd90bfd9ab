/**
 * The model ops on the WebGPU engine's device tensors (issue 25): core's op kit (the gemm and
 * layer-op cases, float64 references, float32's rule) through its device adapter; ops not on
 * this engine yet are listed as skipped with the reason. Bad calls are refused at the call.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { FAError, tensor } from '@fa/core';
import { runDeviceOpConformance } from '@fa/core/testing';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';

let be: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}

describe('webgpu model ops (device tensors)', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be;
  afterAll(() => b.dispose());

  it('the op kit passes (gemm and layer ops against float64)', async () => {
    const s = await runDeviceOpConformance(b, b.deviceOps as never);
    const skipped = new Map<string, number>();
    for (const r of s.results) if (r.skipped) skipped.set(r.skipped, (skipped.get(r.skipped) ?? 0) + 1);
    console.log(`webgpu device op kit: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped (${[...skipped].map(([k, n]) => `${k}: ${n}`).join('; ')})`);
    expect(s.results.filter((r) => !r.pass).map((r) => `${r.name}: ${r.message}`)).toEqual([]);
    expect(s.passed).toBeGreaterThan(150);
  });

  it('refuses bad calls with one line, nothing enqueued', async () => {
    const ops = b.deviceOps;
    const t = async (n: number) => b.upload(tensor(new Float32Array(n).fill(0.5), [n]));
    const code = async (p: Promise<unknown>) => p.then(() => 'no error', (e) => { expect(e).toBeInstanceOf(FAError); expect((e as Error).message).not.toMatch(/\n/); return `${(e as FAError).code}: ${(e as FAError).message}`; });
    const x = await t(6), y = await t(5);
    expect(await code(ops.gelu({ x, y, approximate: 'none' }))).toMatch(/^E_SHAPE: gelu: y holds 5 values, 6 expected/);
    expect(await code(ops.gelu({ x, y: x, approximate: 'tanh' }))).toMatch(/^E_ARG: gelu: y must not share a buffer with x/);
    expect(await code(ops.gelu({ x: tensor(new Float32Array(6), [6]) as never, y, approximate: 'none' }))).toMatch(/^E_ARG: gelu: x must be a webgpu device tensor/);
    expect(await code(ops.adamw({ param: x, grad: await t(6), m: await t(6), v: await t(6), lr: 1e-3, beta1: 0.9, beta2: 1, eps: 1e-8, weightDecay: 0, step: 1 }))).toMatch(/^E_ARG: adamw: beta2 must be in \[0, 1\)/);
    const logits = await t(6), lse = await t(2), loss = await t(2);
    const bad = await b.uploadIndex(Int32Array.of(1, 3));
    expect(await code(ops.crossEntropy({ rows: 2, classes: 3, logits, targets: bad, ignoreIndex: -100, lse, loss }))).toMatch(/^E_ARG: crossEntropy: targets\[1\] = 3 is not a class/);
    expect(await code(ops.crossEntropy({ rows: 2, classes: 3, logits, targets: Int32Array.of(0, 1) as never, ignoreIndex: -100, lse, loss }))).toMatch(/^E_ARG: crossEntropy: targets must be a webgpu index tensor/);
    expect(await code(b.sync())).toBe('no error');
  });
});
