/**
 * The KV-cache kernels' plan (which kernel, its specialisation, the split; no GPU), and the
 * specialised decode kernel — the one real GPUs run (rows in registers, loops unrolled, 16-byte
 * loads, subgroup team sums) — on the local driver against float64 through the kit's KV check.
 * The kit itself runs the generic kernels in conformance.test.ts; CPU drivers compile each
 * specialisation in seconds, so a few cases here reach every code path: 16-byte and element
 * loads (odd D), subgroup and workgroup-memory team sums, prefetch on and off, row tiles, splits,
 * and the variant switches (8-byte chunks of 16-bit rows, q in workgroup memory, lazy rescale —
 * bit-identical to the eager one —, 8 keys per step; KV-4: table lookups a step ahead of the
 * loads, 64/256 threads, fewer rows per workgroup, the softmax spread over a team's lanes).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { FAError, type HostTensor } from '@fa/core';
import { checkKVCacheCase, kvCacheCaseInputs, makeKVCacheCase, type KVCacheCaseSpec } from '@fa/core/testing';
import { createWebGPUBackend, decodeSpec, kvDecodeWGSL, kvDecodeWorkgroupBytes, planKV, type KVCaps, type WebGPUBackend } from '../dist/index.js';

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
    // head dims past 256 (MLA's 576-wide latent rows): the tiled kernel, whatever kvKernel asks
    const mla = problem({ dtype: 'bf16', seqlens: [40], tnew: 1, d: 576, h: 16, hkv: 1 });
    expect(planKV(mla, h200).kernel).toBe('tiled');
    expect(planKV(mla, h200, { kernel: 'decode' }).kernel).toBe('tiled');
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
  it('variant switches: 8-byte chunks of 16-bit rows (twice the lanes), 8 keys per step with subgroup sums only', () => {
    expect(decodeSpec(decode, h200).spec).toMatchObject({ elems: 8, qShared: false, lazyRescale: false });
    // 4 bf16 columns per lane: 32 lanes at D = 128, one slot of q and acc per row → 4 keys by default
    expect(decodeSpec(decode, h200, { chunkBytes: 8 }).spec).toMatchObject({ elems: 4, chunks: 1, lanes: 32, keys: 4, vec: true });
    const d200 = problem({ dtype: 'f16', seqlens: [9], d: 200, h: 2, hkv: 1 });
    expect(decodeSpec(d200, h200, { chunkBytes: 8 }).spec).toMatchObject({ elems: 4, chunks: 2, lanes: 32, vec: true });
    expect(decodeSpec(problem({ dtype: 'f16', seqlens: [9], d: 6, h: 2, hkv: 1 }), h200, { chunkBytes: 8 }).spec).toMatchObject({ elems: 4, lanes: 4, vec: false });
    // f32 rows are 4-element chunks either way
    expect(decodeSpec(problem({ dtype: 'f32', seqlens: [9], d: 128, h: 8, hkv: 2 }), h200, { chunkBytes: 8 }).spec).toMatchObject({ elems: 4, lanes: 32 });
    expect(decodeSpec(decode, h200, { keysPerStep: 8, qShared: true, lazyRescale: true }).spec).toMatchObject({ keys: 8, qShared: true, lazyRescale: true });
    expect(decodeSpec(decode, { ...h200, subgroupMin: 8 }, { keysPerStep: 8 }).spec.keys).toBe(4);
    expect(decodeSpec(decode, h200, { teamSum: 'transpose' }).spec.teamSum).toBe('transpose');
    expect(decodeSpec(decode, { ...h200, subgroupMin: 8 }, { teamSum: 'transpose' }).spec.teamSum).toBe('xor');
    expect(decodeSpec(decode, { ...h200, generic: true }, { teamSum: 'transpose' }).spec.teamSum).toBe('xor');
    let err: unknown;
    try {
      decodeSpec(decode, h200, { chunkBytes: 12 as 8 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FAError);
    expect((err as FAError).code).toBe('E_ARG');
  });
  it('workgroup memory within the adapter limit: fewer keys a step, else kvThreads/kvRows/kvQShared refused with E_ARG', () => {
    // without subgroups the team sums take keys · rows · threads floats: 256 threads, 8 rows need
    // fewer keys a step to stay within WebGPU's guaranteed 16 KiB
    const noSub: KVCaps = { subgroups: false, subgroupMin: 0, generic: false, maxShared: 16384 };
    const wide = problem({ dtype: 'f32', seqlens: [100], d: 128, h: 16, hkv: 2 }); // 8 rows per kv head
    const s = decodeSpec(wide, noSub, { threads: 256 }).spec;
    expect(s).toMatchObject({ threads: 256, rows: 8, subgroups: false });
    expect(kvDecodeWorkgroupBytes(s)).toBeLessThanOrEqual(16384);
    expect(s.keys).toBeLessThan(decodeSpec(wide, { ...noSub, maxShared: 1 << 20 }, { threads: 256 }).spec.keys);
    for (const t of [64, 128, 256]) for (const c of [noSub, h200]) expect(kvDecodeWorkgroupBytes(decodeSpec(wide, c, { threads: t }).spec)).toBeLessThanOrEqual(16384);
    // the merge alone (8 rows of 256 floats) does not fit 4 KiB: refused, not a pipeline error
    let err: unknown;
    try {
      decodeSpec(wide, { ...noSub, maxShared: 4096 }, { threads: 256 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FAError);
    expect((err as FAError).code).toBe('E_ARG');
    expect((err as FAError).message).toMatch(/workgroup memory.*allows 4096/);
  });
  it('kvDecodeWorkgroupBytes counts every var<workgroup> the decode WGSL declares', () => {
    const bytes: Record<string, number> = { f32: 4, i32: 4, u32: 4, 'vec4<f32>': 16, 'vec2<f32>': 8 };
    let n = 0;
    for (const enc of ['f32', 'f16', 'bf16'] as const) for (const rows of [1, 2, 8]) for (const keys of [1, 2, 4]) for (const lanes of [0, 16, 32])
      for (const subgroups of [false, true]) for (const threads of [64, 256]) for (const qShared of [false, true]) {
        const generic = lanes === 0;
        const spec = { enc, rows, elems: enc === 'f32' ? 4 : 8, chunks: 1, keys, lanes, subgroups, vec: !generic, generic, threads, prefetch: false, rowsAhead: false, qShared, lazyRescale: false, teamSum: 'xor' as const, spread: false };
        let declared = 0;
        for (const m of kvDecodeWGSL(spec).matchAll(/var<workgroup>\s+\w+\s*:\s*([^;]+);/g)) {
          const t = m[1].trim();
          const a = /^array<(.+),\s*(\d+)>$/.exec(t);
          const b = a ? bytes[a[1].trim()] * Number(a[2]) : bytes[t];
          expect(b, `workgroup type ${t}`).toBeGreaterThan(0);
          declared += b;
        }
        expect(kvDecodeWorkgroupBytes(spec)).toBe(declared);
        n++;
      }
    expect(n).toBeGreaterThan(100);
  });
  it('KV-4 switches: rows ahead, threads (split target scaled), most rows, spread softmax where R·KB ≤ L', () => {
    const b8 = { ...problem({ dtype: 'f32', seqlens: [100], d: 128, h: 4, hkv: 1 }), batch: 8, hkv: 8, h: 32, tk: 32768 };
    // the defaults where the spread softmax can run: it, with loads one step ahead and lookups before them (run KV-4)
    expect(decodeSpec(b8, h200).spec).toMatchObject({ threads: 128, rowsAhead: true, prefetch: true, spread: true, rows: 4, keys: 4, lanes: 32 });
    // where it cannot (no subgroups wide enough, generic code), or when the team softmax is asked for: none of the three
    for (const [caps, t] of [[{ ...h200, subgroupMin: 8 }, {}], [{ ...h200, generic: true }, {}], [h200, { softmax: 'team' as const }]] as const)
      expect(decodeSpec(b8, caps, t).spec).toMatchObject({ rowsAhead: false, prefetch: false, spread: false });
    expect(planKV(b8, h200, { threads: 64 })).toMatchObject({ groups: 64, splits: 32, chunk: 1024 });
    expect(planKV(b8, h200, { threads: 256 })).toMatchObject({ groups: 64, splits: 8, chunk: 4096 });
    expect(planKV(b8, h200, { rows: 2 })).toMatchObject({ rows: 2, rowTiles: 2, groups: 128, splits: 8 });
    expect(decodeSpec(b8, h200, { rowsAhead: true, prefetch: true }).spec).toMatchObject({ rowsAhead: true, prefetch: true });
    // 4 rows × 4 keys over 32 lanes; f16: 4 × 2 over 16; 4 × 8 = 32 > 16 lanes: the team softmax
    expect(decodeSpec(b8, h200, { softmax: 'spread' }).spec.spread).toBe(true);
    expect(decodeSpec({ ...b8, dtype: 'f16' }, h200, { softmax: 'spread' }).spec).toMatchObject({ spread: true, lanes: 16, keys: 2 });
    expect(decodeSpec({ ...b8, dtype: 'f16' }, h200, { softmax: 'spread', keysPerStep: 8 }).spec.spread).toBe(false);
    expect(decodeSpec(b8, { ...h200, subgroupMin: 8 }, { softmax: 'spread' }).spec.spread).toBe(false);
    expect(decodeSpec(b8, { ...h200, generic: true }, { softmax: 'spread' }).spec.spread).toBe(false);
    for (const bad of [{ threads: 96 }, { rows: 3 }, { softmax: 'lanes' as 'team' }, { keysPerStep: 3 }]) {
      let err: unknown;
      try {
        decodeSpec(b8, h200, bad);
      } catch (e) {
        err = e;
      }
      expect((err as FAError).code, JSON.stringify(bad)).toBe('E_ARG');
    }
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
  // bf16 in 8-byte chunks over 32 lanes, q in workgroup memory, lazy rescale, splits
  ['bf16 D128 8-byte chunks, q in workgroup memory, lazy', { dtype: 'bf16', seqlens: [300, 45], tnew: 1, blockSize: 16, d: 128, h: 4, hkv: 2 }, { kvChunkBytes: 8, kvQShared: true, kvLazyRescale: true, kvMinChunk: 128 }],
  // f16 odd-width rows in 8-byte chunks (element loads), 8 keys per step (subgroup sums where the driver has 4 lanes)
  ['f16 D6 8-byte chunks, 8 keys per step', { dtype: 'f16', seqlens: [50, 9], tnew: 1, d: 6, h: 4, hkv: 1, softcap: 3, window: [20, 0] }, { kvChunkBytes: 8, kvKeysPerStep: 8 }],
  // transpose team sums: 32 values over 4 lanes (reduce-scatter stops at the lanes), and 4 values over 8 lanes (xor steps left)
  ['f16 D32 transpose sums, 8 keys per step', { dtype: 'f16', seqlens: [77, 130], tnew: 2, tq: 2, d: 32, h: 4, hkv: 2, softcap: 4, alibi: 'BH' }, { kvTeamSum: 'transpose', kvKeysPerStep: 8, kvMinChunk: 128 }],
  // KV-4: rows ahead with and without prefetch, 64 / 256 threads, 2 rows per workgroup (two row tiles), odd D
  ['f32 D128 rows ahead + prefetch, 2 rows, 256 threads', { dtype: 'f32', seqlens: [300, 0, 45], tnew: 1, blockSize: 16, d: 128, h: 8, hkv: 2 }, { kvRowsAhead: true, kvPrefetch: true, kvRows: 2, kvThreads: 256, kvMinChunk: 128 }],
  ['bf16 D5 Tq3 rows ahead, 64 threads', { dtype: 'bf16', seqlens: [40, 3], tnew: 3, tq: 3, causal: true, window: [9, 0], d: 5, h: 6, hkv: 1, blockSize: 4 }, { kvRowsAhead: true, kvThreads: 64 }],
  // spread softmax: 4 rows × 2 keys over 8 lanes (f32 D32), softcap, ALiBi, window, splits, prefetch + rows ahead
  ['f32 D32 spread softmax 4×2 over 8 lanes, prefetch, rows ahead', { dtype: 'f32', seqlens: [200, 0, 61], tnew: 1, blockSize: 16, d: 32, h: 8, hkv: 2, softcap: 4, alibi: 'BH', window: [90, 0] }, { kvSoftmax: 'spread', kvKeysPerStep: 2, kvPrefetch: true, kvRowsAhead: true, kvMinChunk: 128 }],
  // 2 rows × 2 keys over 8 lanes (two lanes per pair: xor steps after the reduce-scatter), Tq 2 causal
  ['f32 D32 spread softmax 2×2 over 8 lanes, Tq 2 causal', { dtype: 'f32', seqlens: [77, 130], tnew: 2, tq: 2, causal: true, d: 32, h: 2, hkv: 2, magnitude: 4 }, { kvSoftmax: 'spread', kvKeysPerStep: 2 }],
  // f16 over 4 lanes: 2 rows × 2 keys, 64 threads, q in workgroup memory
  ['f16 D32 spread softmax 2×2 over 4 lanes, q shared, 64 threads', { dtype: 'f16', seqlens: [90, 20], tnew: 1, d: 32, h: 4, hkv: 2, blockSize: 8 }, { kvSoftmax: 'spread', kvKeysPerStep: 2, kvQShared: true, kvThreads: 64 }],
  // cacheLeftpad (keys start at leftpad[b], positions from it): rows ahead + prefetch over splits, and element loads with a causal window
  ['f32 D32 leftpad, rows ahead + prefetch, splits', { dtype: 'f32', seqlens: [300, 45], leftpad: [37, 45], tnew: 1, d: 32, h: 8, hkv: 2 }, { kvRowsAhead: true, kvPrefetch: true, kvMinChunk: 128 }],
  ['bf16 D5 Tq3 leftpad causal window', { dtype: 'bf16', seqlens: [40, 3], leftpad: [11, 1], tnew: 3, tq: 3, causal: true, window: [9, 0], d: 5, h: 6, hkv: 1 }, {}],
  ['bf16 D32 8-byte chunks, transpose sums, one row', { dtype: 'bf16', seqlens: [90, 20], tnew: 1, d: 32, h: 2, hkv: 2, blockSize: 8 }, { kvChunkBytes: 8, kvTeamSum: 'transpose', kvLazyRescale: true }],
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
        // drivers whose subgroups are narrower than the team sum through workgroup memory instead
        if ('kvTeamSum' in opts) expect(plan.decode!.teamSum).toBe(plan.decode!.subgroups ? 'transpose' : 'xor');
        // the spread softmax needs subgroups of at least the team's lanes (lavapipe: 8)
        if ('kvSoftmax' in opts) expect(plan.decode!.spread).toBe(plan.decode!.subgroups);
        if ('kvThreads' in opts) expect(plan.decode!.threads).toBe((opts as { kvThreads: number }).kvThreads);
      } finally {
        if (b !== b0) await b.dispose();
      }
    });
  }
  it('lazy rescale: bit-identical outputs and LSE (generic and specialised kernels)', async () => {
    // large scores (magnitude 4) so that row maxima change often; causal window, softcap, splits
    const x = kvCacheCaseInputs(makeKVCacheCase({ dtype: 'f32', seqlens: [200, 31], tq: 2, causal: true, window: [40, 0], d: 16, h: 4, hkv: 2, softcap: 5, magnitude: 4, blockSize: 16 }));
    const opts = { ...x.options, cacheSeqlens: x.cacheSeqlens, ...(x.blockTable ? { blockTable: x.blockTable } : {}) };
    for (const codegen of ['generic', 'specialised'] as const) {
      const bits: Uint32Array[][] = [];
      for (const kvLazyRescale of [false, true]) {
        const b = await createWebGPUBackend({ codegen, kvKernel: 'decode', kvMinChunk: 128, kvLazyRescale });
        try {
          const r = await b.forwardWithKVCache(x.q, x.kCache, x.vCache, opts);
          expect(b.lastKVPlan!.splits).toBeGreaterThan(1);
          expect(b.lastKVPlan!.decode!.lazyRescale).toBe(kvLazyRescale);
          bits.push([r.out, r.lse].map((t) => new Uint32Array(((t as HostTensor).data as Float32Array).slice().buffer)));
        } finally {
          await b.dispose();
        }
      }
      expect(bits[1][0], `${codegen} out`).toEqual(bits[0][0]);
      expect(bits[1][1], `${codegen} lse`).toEqual(bits[0][1]);
    }
  });
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
