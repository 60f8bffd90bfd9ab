/**
 * The specialised kernels (the ones real GPUs run: dtype, D, softcap and ALiBi compiled in,
 * paired loads and packed stores) on the local driver. CPU drivers compile each specialisation
 * in seconds, so CI checks a few cases that together reach every code path, with small tiles;
 * FA_WEBGPU_SPECIALISED_BIG=1 adds the full-size default tiles the H200 uses. The layouts (plain,
 * vec4, swizzled, swizzled + prefetch) and both f16 paths (native where the adapter has
 * shader-f16, packed) each get at least one forward + backward case against float64.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkCase, makeCase, type CaseSpec } from '@fa/core/testing';
import { createWebGPUBackend, chooseSpec, type Caps, type WebGPUBackend } from '../dist/index.js';
import { sharedBytes } from '../dist/wgsl/workgroup.js';

const specs: CaseSpec[] = [
  // f32: softcap + ALiBi + window + GQA, Tq != Tk
  { dtype: 'f32', tq: 33, tk: 20, d: 32, h: 2, hkv: 1, alibi: 'H', softcap: 8, window: [6, 2] },
  // f16 packed pairs, varlen with empty sequences, causal
  { dtype: 'f16', seqlensQ: [5, 0, 17, 9], seqlensK: [7, 0, 0, 33], d: 32, h: 4, hkv: 2, causal: true },
  // bf16 with an odd head dim (f32 staging, then the pack pass)
  { dtype: 'bf16', tq: 17, tk: 33, d: 5, h: 2 },
  // a head dim of v's own, wider than q·k's and odd (head-dims.ts pads q and k to 12: 16-bit rows
  // that start mid-word), causal
  { dtype: 'f16', tq: 9, tk: 13, d: 5, dv: 12, h: 2, causal: true },
];
const small = { nr: 16, nc: 16, tr: 8, tc: 8, dk: 8, kc: 8 };
const vec = { nr: 32, nc: 32, tr: 8, tc: 8, dk: 8, kc: 8, vec: 1 };
// The swizzled layouts at a quarter of the H200's tile sizes (the XOR swizzles are non-trivial).
const swizzledPrefetch = { nr: 32, nc: 32, tr: 8, tc: 8, dk: 8, kc: 4, vec: 1, sw: 1, pf: 1 };
const swizzled8x4 = { nr: 32, nc: 16, tr: 4, tc: 4, dk: 8, kc: 8, vec: 1, sw: 1 };

describe('webgpu tile choice (no GPU)', () => {
  const caps: Caps = { maxShared: 49152, maxInvocations: 1024, maxWorkgroupSizeX: 1024, subgroupMin: 32, subgroups: true };
  const base = { storage: 'f32' as const, d: 64, softcap: false, alibi: false, outF32: false };
  it('drops the swizzled layout where D % 4 != 0 (16-byte loads) and keeps it elsewhere', () => {
    const odd = chooseSpec('fwd', { ...base, storage: 'bf16', d: 5, outF32: true }, caps, swizzledPrefetch);
    const even = chooseSpec('fwd', base, caps, swizzledPrefetch);
    expect('spec' in odd && odd.spec.tile.sw === undefined && odd.spec.tile.pf === undefined && odd.spec.tile.vec === 1).toBe(true);
    expect('spec' in even && even.spec.tile.sw === 1 && even.spec.tile.pf === 1).toBe(true);
  });
  it('native f16 stages in half the bytes; prefetch doubles the staging', () => {
    const tile = { nr: 64, nc: 64, tr: 16, tc: 16, dk: 16, kc: 16, vec: 1, sw: 1 };
    const spec = { ...base, d: 128, subgroups: true, tile };
    const stage = 16 * 128; // max(dk·(nr+nc), kc·D) elements
    const p = 64 * 64 * 4;
    expect(sharedBytes(spec)).toBe(4 * stage + p);
    expect(sharedBytes({ ...spec, storage: 'f16', f16: true })).toBe(2 * stage + p);
    expect(sharedBytes({ ...spec, tile: { ...tile, pf: 1 } })).toBe(8 * stage + p);
  });
  it('rejects inconsistent layout flags', () => {
    const r = chooseSpec('fwd', base, caps, { ...swizzledPrefetch, vec: undefined });
    expect('reason' in r && /tile\.sw needs tile\.vec/.test(r.reason)).toBe(true);
  });
});

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
  it('packed f16 kept reachable with nativeF16: false: f16 varlen', async () => {
    const bp = await createWebGPUBackend({ codegen: 'specialised', tile: small, nativeF16: false });
    try {
      const r = await checkCase(bp, makeCase(specs[1]));
      expect(r.pass, r.message).toBe(true);
      expect(bp.nativeF16).toBe(false);
      expect(bp.lastSpecs.every((x) => x.storage === 'f16' && !x.f16)).toBe(true);
      // The native path where the adapter has shader-f16 (the small-tile tests above ran it).
      expect(b.nativeF16).toBe(b.features.has('shader-f16'));
    } finally {
      await bp.dispose();
    }
  });
  it('swizzled + prefetched layout: f32 softcap/ALiBi/window/GQA and f16 varlen (native where available)', async () => {
    const bs = await createWebGPUBackend({ codegen: 'specialised', tile: swizzledPrefetch });
    try {
      for (const spec of specs.slice(0, 2)) {
        const r = await checkCase(bs, makeCase(spec));
        expect(r.pass, r.message).toBe(true);
        expect(bs.lastSpecs.every((x) => x.tile.sw === 1 && x.tile.pf === 1)).toBe(true);
      }
    } finally {
      await bs.dispose();
    }
  });
  it('swizzled layout, 8×4 per thread (the V2 backward shape): f32 softcap/ALiBi/window/GQA', async () => {
    const bs = await createWebGPUBackend({ codegen: 'specialised', tile: swizzled8x4 });
    try {
      const r = await checkCase(bs, makeCase(specs[0]));
      expect(r.pass, r.message).toBe(true);
      expect(bs.lastSpecs.every((x) => x.tile.sw === 1 && !x.tile.pf)).toBe(true);
    } finally {
      await bs.dispose();
    }
  });
  it('dropout on the plain, vec4 and swizzled + prefetched layouts (Philox quads along columns and along dkdv rows)', async () => {
    const drop: CaseSpec = { dtype: 'f32', tq: 37, tk: 45, d: 16, h: 2, hkv: 1, causal: true, dropout: 0.3 };
    for (const tile of [small, vec, swizzledPrefetch]) {
      const bd = await createWebGPUBackend({ codegen: 'specialised', tile });
      try {
        const r = await checkCase(bd, makeCase(drop));
        expect(r.pass, `${JSON.stringify(tile)}: ${r.message}`).toBe(true);
        expect(bd.lastSpecs.every((x) => x.dropout === true && !x.dynamic)).toBe(true);
      } finally {
        await bd.dispose();
      }
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
