/**
 * The KV-cache kernels' plan (which kernel, its specialisation, the split; no GPU), and the
 * specialised decode kernel — the one real GPUs run (rows in registers, loops unrolled, 16-byte
 * loads, subgroup team sums) — on the local driver against float64 through the kit's KV check.
 * The kit itself runs the generic kernels in conformance.test.ts; CPU drivers compile each
 * specialisation in seconds, so a few cases here reach every code path: 16-byte and element
 * loads (odd D), subgroup and workgroup-memory team sums, prefetch on and off, row tiles, splits.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkKVCacheCase, kvCacheCaseInputs, makeKVCacheCase, type KVCacheCaseSpec } from '@fa/core/testing';
import { createWebGPUBackend, decodeSpec, planKV, type KVCaps, type WebGPUBackend } from '../dist/index.js';

const h200: KVCaps = { subgroups: true, subgroupMin: 32, generic: false };
const problem = (s: KVCacheCaseSpec) => kvCacheCaseInputs(makeKVCacheCase(s)).problem;

describe('webgpu KV plan (no GPU)', () => {
  const decode = problem({ dtype: 'bf16', seqlens: [40, 7], tnew: 1, blockSize: 16, d: 128, h: 8, hkv: 2 });
  it('one rule: decode kernel up to 128 query rows per kv head, tiled above; kvKernel forces either', () => {
    expect(planKV(decode, h200).kernel).toBe('decode');
    const prefill = problem({ dtype: 'f32', seqlens: [10], tnew: 40, tq: 40, causal: true, d: 16, h: 8, hkv: 2 }); // 4 · 40 = 160 rows
    expect(planKV(prefill, h200).kernel).toBe('tiled');
    expect(planKV(prefill, h200, { kernel: 'decode' }).kernel).toBe('decode');
    expect(planKV(decode, h200, { kernel: 'tiled' }).kernel).toBe('tiled');
  });
  it('decode specialisation: rows, lanes per row, 16-byte loads, subgroups where they are wide enough', () => {
    const s = decodeSpec(decode, h200).spec; // 4 rows, 16 bf16 lanes × 8 elements
    expect(s).toMatchObject({ rows: 4, chunks: 1, lanes: 16, keys: 2, subgroups: true, vec: true, generic: false });
    const f32 = decodeSpec(problem({ dtype: 'f32', seqlens: [9], d: 256, h: 8, hkv: 1 }), h200).spec;
    expect(f32).toMatchObject({ rows: 8, chunks: 2, lanes: 32, keys: 2, vec: true });
    expect(decodeSpec(problem({ dtype: 'bf16', seqlens: [9], d: 5, h: 3, hkv: 1 }), h200).spec).toMatchObject({ rows: 4, lanes: 4, vec: false });
    expect(decodeSpec(decode, { ...h200, subgroupMin: 8 }).spec.subgroups).toBe(false);
    expect(decodeSpec(decode, { ...h200, generic: true }).spec).toMatchObject({ rows: 8, lanes: 0, generic: true, vec: false });
  });
  it('split: B·Hkv·splits near the target; rows beyond 8 in row tiles', () => {
    const big = problem({ dtype: 'bf16', seqlens: [100], d: 16, h: 4, hkv: 1 });
    const p = { ...big, batch: 8, hkv: 8, h: 32, tk: 32768 };
    expect(planKV(p, h200)).toMatchObject({ kernel: 'decode', rows: 4, rowTiles: 1, groups: 64, splits: 16, chunk: 2048 });
    const spec = problem({ dtype: 'f16', seqlens: [30], tnew: 4, tq: 4, causal: true, d: 32, h: 8, hkv: 2 }); // 16 rows
    expect(planKV(spec, h200)).toMatchObject({ rows: 8, rowTiles: 2 });
  });
});

let be: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend({ codegen: 'specialised', kvKernel: 'decode' });
} catch (e) {
  why = (e as Error).message;
}

const cases: [string, KVCacheCaseSpec, object][] = [
  // f32, 16-byte loads, 32 lanes per row (workgroup-memory sums where subgroups are narrower), several splits
  ['f32 D128 GQA 4 paged, splits', { dtype: 'f32', seqlens: [300, 0, 45], tnew: 1, blockSize: 16, d: 128, h: 8, hkv: 2 }, { kvMinChunk: 128 }],
  // the same with the next step's loads prefetched
  ['f32 D128 prefetch', { dtype: 'f32', seqlens: [300, 45], tnew: 1, blockSize: 16, d: 128, h: 8, hkv: 2 }, { kvPrefetch: true }],
  // bf16 odd D (element loads, rows start mid-word), Tq > 1 causal with a window, 2 row tiles
  ['bf16 D5 Tq3 causal window, row tiles', { dtype: 'bf16', seqlens: [40, 3], tnew: 3, tq: 3, causal: true, window: [9, 0], d: 5, h: 6, hkv: 1 }, {}],
  // f16, 4 lanes per row (subgroup sums on most drivers), softcap + ALiBi, one key per step
  ['f16 D32 softcap ALiBi', { dtype: 'f16', seqlens: [77, 130], tnew: 2, tq: 2, d: 32, h: 4, hkv: 2, softcap: 4, alibi: 'BH' }, { kvKeysPerStep: 1 }],
];

describe('webgpu specialised KV decode kernel', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b0 = be;
  afterAll(() => b0.dispose());
  for (const [label, spec, opts] of cases) {
    it(label, async () => {
      const b = Object.keys(opts).length ? await createWebGPUBackend({ codegen: 'specialised', kvKernel: 'decode', ...opts }) : b0;
      try {
        const r = await checkKVCacheCase(b, makeKVCacheCase(spec), { upload: true });
        expect(r.pass, r.message).toBe(true);
        const plan = b.lastKVPlan!;
        expect(plan.kernel).toBe('decode');
        expect(plan.decode!.generic).toBe(false);
      } finally {
        if (b !== b0) await b.dispose();
      }
    });
  }
  it('without subgroups (workgroup-memory team sums)', async () => {
    const b = await createWebGPUBackend({ codegen: 'specialised', kvKernel: 'decode', subgroups: false });
    try {
      const r = await checkKVCacheCase(b, makeKVCacheCase(cases[3][1]));
      expect(r.pass, r.message).toBe(true);
      expect(b.lastKVPlan!.decode!.subgroups).toBe(false);
    } finally {
      await b.dispose();
    }
  });
});
