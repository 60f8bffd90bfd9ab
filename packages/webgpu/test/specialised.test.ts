/**
 * The specialised kernels (the ones real GPUs run: dtype, D, softcap and ALiBi compiled in,
 * paired loads and packed stores) on the local driver. CPU drivers compile each specialisation
 * in seconds, so CI checks a few cases that together reach every code path, with small tiles;
 * FA_WEBGPU_SPECIALISED_BIG=1 adds the 64×64 tiles the H200 uses.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkCase, makeCase, type CaseSpec } from '@fa/core/testing';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';

const specs: CaseSpec[] = [
  // f32: softcap + ALiBi + window + GQA, Tq != Tk
  { dtype: 'f32', tq: 33, tk: 20, d: 32, h: 2, hkv: 1, alibi: 'H', softcap: 8, window: [6, 2] },
  // f16 packed pairs, varlen with empty sequences, causal
  { dtype: 'f16', seqlensQ: [5, 0, 17, 9], seqlensK: [7, 0, 0, 33], d: 32, h: 4, hkv: 2, causal: true },
  // bf16 with an odd head dim (f32 staging, then the pack pass)
  { dtype: 'bf16', tq: 17, tk: 33, d: 5, h: 2 },
];
const small = { nr: 16, nc: 16, tr: 8, tc: 8, dk: 8, kc: 8 };
const vec = { nr: 32, nc: 32, tr: 8, tc: 8, dk: 8, kc: 8, vec: 1 };

let be: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend({ codegen: 'specialised', tile: small });
} catch (e) {
  why = (e as Error).message;
}

describe('webgpu specialised kernels', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be;
  afterAll(() => b.dispose());
  specs.forEach((spec, i) => {
    const c = makeCase(spec, i);
    it(`small tiles: ${c.name}`, async () => {
      const r = await checkCase(b, c);
      expect(r.pass, r.message).toBe(true);
      expect(b.lastSpecs.every((s) => !s.dynamic)).toBe(true);
    });
  });
  it('vec4 layout: f32 softcap/ALiBi/window/GQA and f16 varlen', async () => {
    const bv = await createWebGPUBackend({ codegen: 'specialised', tile: vec });
    try {
      for (const spec of specs.slice(0, 2)) {
        const r = await checkCase(bv, makeCase(spec));
        expect(r.pass, r.message).toBe(true);
      }
      expect(bv.lastSpecs.every((x) => x.tile.vec === 1)).toBe(true);
    } finally {
      await bv.dispose();
    }
  });
  const big = process.env.FA_WEBGPU_SPECIALISED_BIG === '1';
  (big ? it : it.skip)(`64×64 tiles (the H200's), f32 and f16, D=64 and 128${big ? '' : ' — skipped: set FA_WEBGPU_SPECIALISED_BIG=1 (minutes of compiling on a CPU driver)'}`, async () => {
    const bb = await createWebGPUBackend({ codegen: 'specialised' });
    try {
      for (const spec of [{ dtype: 'f32', tq: 129, tk: 127, d: 64, h: 2, causal: true }, { dtype: 'f16', tq: 65, d: 128, softcap: 5, alibi: 'H' }] as CaseSpec[]) {
        const r = await checkCase(bb, makeCase(spec));
        expect(r.pass, r.message).toBe(true);
      }
    } finally {
      await bb.dispose();
    }
  });
});
