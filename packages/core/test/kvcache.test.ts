/**
 * The KV-cache contract in core: describeKVCacheProblem's rules and codes, the address rule, the
 * host append and gather, the reference (equal to dense attention over the same keys), and the
 * kit's KV-cache checks rejecting engines with one deliberate mistake each.
 */
import { describe, expect, it, vi } from 'vitest';
import {
  appendKVCacheHost, describeKVCacheProblem, gatherKVCache, isFAError, kvCacheRow, referenceForward, referenceKVCache,
  type AttentionBackend, type DeviceIndexTensor, type ForwardResult, type HostTensor, type KVCacheOptions, type KVCacheProblem, type Tensor,
} from '../dist/index.js';
import {
  checkKVCacheBadInputs, checkKVCacheCase, checkKVCacheDecodeLoop, cloneHost, hostTensor, kvCacheCaseInputs, kvCacheCases, makeKVCacheCase,
  randomTensor, randomValues, createRng, referenceBackend, tensorValues,
} from '../dist/testing/index.js';

const rng = createRng(3);
const t = (shape: number[], dtype: 'f32' | 'f16' | 'bf16' = 'f32') => randomTensor(rng, shape, dtype);

function codeOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (!isFAError(e)) throw e;
    expect(e.message).not.toMatch(/\n/);
    return e.code;
  }
  return 'accepted';
}

describe('describeKVCacheProblem', () => {
  const q = t([2, 1, 4, 8]);
  const paged = t([6, 4, 2, 8]);
  const table = [[3, 0, -1], [5, 1, -1]];

  it('resolves a contiguous cache as one block per sequence', () => {
    const c = t([2, 10, 2, 8]);
    const p = describeKVCacheProblem(q, c, c, { cacheSeqlens: [3, 10], causal: true });
    expect(p.paged).toBe(false);
    expect([p.blockSize, p.numBlocks, p.maxBlocksPerSeq, p.capacity]).toEqual([10, 2, 1, 10]);
    expect([...p.blockTable]).toEqual([0, 1]);
    expect([p.tk, p.totalK, p.tnew, p.windowRight]).toEqual([10, 13, 0, 0]);
    expect(kvCacheRow(p, 1, 4)).toBe(14);
    expect(p.lseShape).toEqual([2, 4, 1]);
  });

  it('resolves a paged cache through its block table (flat, nested or an index tensor)', () => {
    const kNew = t([2, 2, 2, 8]);
    const p = describeKVCacheProblem(q, paged, paged, { cacheSeqlens: Int32Array.of(5, 2), blockTable: table, kNew, vNew: kNew });
    expect([p.blockSize, p.numBlocks, p.maxBlocksPerSeq, p.capacity, p.tnew, p.tk]).toEqual([4, 6, 3, 12, 2, 7]);
    expect(kvCacheRow(p, 0, 5)).toBe(0 * 4 + 1);
    expect(kvCacheRow(p, 1, 3)).toBe(5 * 4 + 3);
    const flat = describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [5, 2], blockTable: table.flat() });
    expect([...flat.blockTable]).toEqual(table.flat());
    const idx: DeviceIndexTensor = { kind: 'index', backend: 'x', shape: [2, 3], handle: null, disposed: false, mirror: Int32Array.from(table.flat()) };
    expect(describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [5, 2], blockTable: idx }, 'x').maxBlocksPerSeq).toBe(3);
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [5, 2], blockTable: idx }, 'y'))).toBe('E_ARG');
  });

  it('checks index values only where the call reads or writes', () => {
    // -1 past each sequence's last block is fine; inside it is not
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [8, 2], blockTable: table }))).toBe('accepted');
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [9, 2], blockTable: table }))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [1, 2], blockTable: [[6, 0, 0], [1, 1, 1]] }))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [0, 2], blockTable: [[6, 0, 0], [1, 1, 1]] }))).toBe('accepted');
  });

  it('refuses appends past capacity and sequences that write the same row', () => {
    const kn = t([2, 3, 2, 8]);
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [10, 2], blockTable: [[0, 1, 2], [3, 4, 5]], kNew: kn, vNew: kn }))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [9, 2], blockTable: [[0, 1, 2], [3, 4, 5]], kNew: kn, vNew: kn }))).toBe('accepted');
    // sequence 0 writes block 2 rows 1..3 (positions 9..11), sequence 1 block 2 rows 2..3 (positions 2..4 → block 2 then 3)
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [9, 2], blockTable: [[0, 1, 2], [2, 3, 4]], kNew: kn, vNew: kn }))).toBe('E_ARG');
    // sharing a block both only read (prefix sharing) is fine
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [5, 5], blockTable: [[0, 1, 2], [0, 3, 4]], kNew: kn, vNew: kn }))).toBe('accepted');
  });

  it('says E_SHAPE / E_DTYPE / E_ARG for malformed arguments', () => {
    const c = t([2, 10, 2, 8]);
    expect(codeOf(() => describeKVCacheProblem(q, c, c, {} as KVCacheOptions))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1] }))).toBe('E_SHAPE');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1, 0.5] }))).toBe('E_DTYPE');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1, 11] }))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, c, t([2, 10, 2, 8], 'f16'), { cacheSeqlens: [1, 1] }))).toBe('E_DTYPE');
    expect(codeOf(() => describeKVCacheProblem(q, t([3, 10, 2, 8]), t([3, 10, 2, 8]), { cacheSeqlens: [1, 1] }))).toBe('E_SHAPE');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1, 1], kNew: t([2, 1, 2, 8]) }))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1, 1], kNew: t([2, 1, 1, 8]), vNew: t([2, 1, 1, 8]) }))).toBe('E_SHAPE');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1, 1], softcap: -1 }))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1, 1], alibiSlopes: [1, 2, 3] }))).toBe('E_SHAPE');
    expect(codeOf(() => describeKVCacheProblem(q, c, c, { cacheSeqlens: [1, 1], cuSeqlensQ: [0, 1, 2] } as KVCacheOptions))).toBe('E_ARG');
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [1, 1], blockTable: [1, 2, 3] }))).toBe('E_SHAPE');
    expect(codeOf(() => describeKVCacheProblem(q, paged, paged, { cacheSeqlens: [1, 1], blockTable: [[1, 2], [3]] }))).toBe('E_SHAPE');
  });
});

describe('host append, gather and the reference', () => {
  it('appends exactly the new rows and gathers what each sequence attends to', () => {
    const c = makeKVCacheCase({ dtype: 'bf16', seqlens: [5, 0, 9], tnew: 3, blockSize: 4, d: 8, h: 2, hkv: 1 });
    const x = kvCacheCaseInputs(c);
    const p = x.problem;
    const k = cloneHost(x.kCache);
    const v = cloneHost(x.vCache);
    appendKVCacheHost(p, k, v, x.kNew, x.vNew);
    const w = p.hkv * p.d;
    for (let b = 0; b < p.batch; b++) {
      for (let j = 0; j < p.tnew; j++) {
        const row = kvCacheRow(p, b, p.cacheSeqlens[b] + j);
        expect([...k.data.subarray(row * w, row * w + w)]).toEqual([...x.kNew!.data.subarray((b * p.tnew + j) * w, (b * p.tnew + j + 1) * w)]);
      }
    }
    const g1 = gatherKVCache(p, x.kCache, x.vCache, x.kNew, x.vNew);
    const g2 = gatherKVCache(p, k, v);
    expect([...g1.cuSeqlensK]).toEqual([0, 8, 11, 23]);
    expect([...g1.k.data]).toEqual([...g2.k.data]);
    expect([...g1.v.data]).toEqual([...g2.v.data]);
  });

  it('the reference equals dense attention when the cache holds the whole sequence', () => {
    // one sequence of 20 keys, 4 of them appended, causal with Tq = 4: the last 4 rows of dense causal attention
    const B = 1, T = 20, H = 4, HKV = 2, D = 16;
    const K = t([B, T, HKV, D]);
    const V = t([B, T, HKV, D]);
    const Q = t([B, T, H, D]);
    const dense = referenceForward(Q, K, V, { causal: true, softcap: 7 });
    const cache = (src: HostTensor): HostTensor => {
      const c = cloneHost(hostTensor(new Float32Array(8 * 4 * HKV * D).fill(NaN), [8, 4, HKV, D], 'f32'));
      // blocks in reverse order: sequence 0's block j is block 7 - j
      for (let tok = 0; tok < 16; tok++) c.data.set(src.data.subarray(tok * HKV * D, (tok + 1) * HKV * D), ((7 - Math.floor(tok / 4)) * 4 + (tok % 4)) * HKV * D);
      return c;
    };
    const newOf = (src: HostTensor) => hostTensor(tensorValues(src).subarray(16 * HKV * D), [1, 4, HKV, D], 'f32');
    const q4 = hostTensor(tensorValues(Q).subarray(16 * H * D), [1, 4, H, D], 'f32');
    const r = referenceKVCache(q4, cache(K), cache(V), { cacheSeqlens: [16], blockTable: [[7, 6, 5, 4, 3]], kNew: newOf(K), vNew: newOf(V), causal: true, softcap: 7 });
    expect([...r.out]).toEqual([...dense.out.subarray(16 * H * D)]);
    for (let h = 0; h < H; h++) for (let i = 0; i < 4; i++) expect(r.lse[h * 4 + i]).toBe(dense.lse[h * T + 16 + i]);
  });
});

// ------------------------------------------------------------------------- the kit rejects mistakes

type KVFn = (q: HostTensor, kc: HostTensor, vc: HostTensor, o: KVCacheOptions, p: KVCacheProblem) => ForwardResult;

/** The reference backend with its KV-cache call replaced. */
function kvEngine(name: string, f: KVFn): AttentionBackend {
  const base = referenceBackend({ name });
  return {
    ...base,
    async forwardWithKVCache(q: Tensor, kc: Tensor, vc: Tensor, o: KVCacheOptions) {
      const p = describeKVCacheProblem(q, kc, vc, o, name);
      return f(q as HostTensor, kc as HostTensor, vc as HostTensor, o, p);
    },
  };
}

const correct: KVFn = (q, kc, vc, o, p) => {
  const r = referenceKVCache(q, kc, vc, o);
  appendKVCacheHost(p, kc, vc, o.kNew as HostTensor, o.vNew as HostTensor);
  return { out: hostTensor(r.out, p.qShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
};

const WRONG: Record<string, KVFn> = {
  'does not write the cache': (q, kc, vc, o, p) => correct(q, cloneHost(kc), cloneHost(vc), o, p),
  'appends one row late': (q, kc, vc, o, p) => {
    const r = correct(q, cloneHost(kc), cloneHost(vc), o, p);
    if (p.tnew > 0) appendKVCacheHost({ ...p, cacheSeqlens: p.cacheSeqlens.map((l) => Math.min(l + 1, p.capacity - p.tnew)) }, kc, vc, o.kNew as HostTensor, o.vNew as HostTensor);
    return r;
  },
  'attends to the cached keys only (forgets kNew)': (q, kc, vc, o, p) => {
    const r = referenceKVCache(q, kc, vc, { ...o, kNew: undefined, vNew: undefined });
    appendKVCacheHost(p, kc, vc, o.kNew as HostTensor, o.vNew as HostTensor);
    return { out: hostTensor(r.out, p.qShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
  },
  'ignores the block table (reads blocks in order)': (q, kc, vc, o, p) => {
    const ident = Int32Array.from(p.blockTable, (_, i) => Math.min(i, p.numBlocks - 1));
    const r = referenceKVCache(q, kc, vc, { ...o, blockTable: o.blockTable === undefined ? undefined : ident });
    appendKVCacheHost(p, kc, vc, o.kNew as HostTensor, o.vNew as HostTensor);
    return { out: hostTensor(r.out, p.qShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
  },
  'aligns causal top-left': (q, kc, vc, o, p) => {
    if (!o.causal || p.tq === 1) return correct(q, kc, vc, o, p);
    const r = referenceKVCache(q, kc, vc, { ...o, causal: false, window: [-1, -1] });
    appendKVCacheHost(p, kc, vc, o.kNew as HostTensor, o.vNew as HostTensor);
    return { out: hostTensor(r.out, p.qShape, p.dtype), lse: hostTensor(r.lse, p.lseShape, 'f32') };
  },
  'returns LSE as [H, B·Tq]': (q, kc, vc, o, p) => {
    const r = correct(q, kc, vc, o, p);
    const l = tensorValues(r.lse as HostTensor);
    const t2 = new Float64Array(l.length);
    for (let b = 0; b < p.batch; b++) for (let h = 0; h < p.h; h++) for (let i = 0; i < p.tq; i++) t2[h * p.batch * p.tq + b * p.tq + i] = l[(b * p.h + h) * p.tq + i];
    return { out: r.out, lse: hostTensor(t2, p.lseShape, 'f32') };
  },
};

describe('the kit rejects KV-cache engines with a mistake', () => {
  const cases = kvCacheCases({ quick: true });
  it('accepts the reference on every case and check', async () => {
    const b = referenceBackend();
    for (const c of cases) expect((await checkKVCacheCase(b, c)).pass, c.name).toBe(true);
    expect((await checkKVCacheDecodeLoop(b)).pass).toBe(true);
    expect((await checkKVCacheBadInputs(b)).message).toMatch(/^ok/);
  });
  for (const [what, f] of Object.entries(WRONG)) {
    it(`rejects an engine that ${what}`, async () => {
      const b = kvEngine('wrong', f);
      let failed = 0;
      for (const c of cases) if (!(await checkKVCacheCase(b, c)).pass) failed++;
      const loop = await checkKVCacheDecodeLoop(b);
      expect(failed + (loop.pass ? 0 : 1)).toBeGreaterThan(0);
    });
  }
  it('rejects an engine that writes the cache before validating', async () => {
    const b = kvEngine('eager', (q, kc, vc, o, p) => correct(q, kc, vc, o, p));
    const sloppy: AttentionBackend = {
      ...b,
      async forwardWithKVCache(q, kc, vc, o) {
        // append row 0 of kNew at position 0 of block 0, then validate
        if (o.kNew) (kc as HostTensor).data.set((o.kNew as HostTensor).data.subarray(0, 8), 0);
        return b.forwardWithKVCache(q, kc, vc, o);
      },
    };
    const r = await checkKVCacheBadInputs(sloppy);
    expect(r.pass).toBe(false);
    expect(r.message).toMatch(/must leave unchanged/);
  });
  it('rejects an engine whose errors are not FAErrors', async () => {
    const b = referenceBackend({ name: 'raw' });
    const raw: AttentionBackend = {
      ...b,
      async forwardWithKVCache(q, kc, vc, o) {
        try {
          return await b.forwardWithKVCache(q, kc, vc, o);
        } catch (e) {
          throw new Error(String(e));
        }
      },
    };
    expect((await checkKVCacheBadInputs(raw)).pass).toBe(false);
  });
  it('reports a decline of supportsKVCache as a skip with the reason', async () => {
    const b = referenceBackend({ supportsKVCache: () => ({ ok: false, reason: 'no paged caches' }) });
    const r = await checkKVCacheCase(b, cases[1]);
    expect(r.skipped).toBe(true);
    expect(r.reason).toBe('no paged caches');
  });
});

describe('cpu engine: split-KV decode', () => {
  it('gives bit-identical results inline, on the worker pool and run to run (the plan depends on the problem only)', async () => {
    const { createCpuBackend } = await import('../dist/index.js');
    const inline = await createCpuBackend({ threads: 0, kvChunk: 64 });
    const pooled = await createCpuBackend({ inlineBelowFlops: 0, kvChunk: 64 });
    try {
      const c = makeKVCacheCase({ dtype: 'f32', seqlens: [700, 333, 0], tnew: 1, blockSize: 32, d: 32, h: 8, hkv: 2, causal: true, softcap: 9, seed: 8 });
      const x = kvCacheCaseInputs(c);
      const call = async (be: AttentionBackend) => {
        const r = await be.forwardWithKVCache(x.q, cloneHost(x.kCache), cloneHost(x.vCache), { ...x.options, cacheSeqlens: x.cacheSeqlens, blockTable: x.blockTable, kNew: x.kNew, vNew: x.vNew });
        return [...(r.out as HostTensor).data, ...(r.lse as HostTensor).data];
      };
      const a = await call(inline);
      expect(await call(pooled)).toEqual(a);
      expect(await call(pooled)).toEqual(a);
      // and within the kit's tolerance of the reference
      expect((await checkKVCacheCase(pooled, c)).pass).toBe(true);
    } finally {
      await inline.dispose();
      await pooled.dispose();
    }
  });
});

describe('cpu engine: work units of several kv heads', () => {
  it('computes each kv head of a multi-head unit bit for bit as a unit of its own (every product path, split or not, ALiBi)', async () => {
    const { planKVCache, kvHeadsPerUnit, runKVCache, combineKVCache } = await import('../dist/cpu/kvcache.js');
    const { Workspace, KV_UNIT } = await import('../dist/cpu/job.js');
    const { allocHost } = await import('../dist/index.js');
    const specs: { dtype: 'f32' | 'f16' | 'bf16'; d: number; h: number; hkv: number; tq: number; alibi?: boolean }[] = [
      { dtype: 'f32', d: 33, h: 8, hkv: 2, tq: 1 }, // padded f32 tiles, 4-row blocks
      { dtype: 'f32', d: 32, h: 6, hkv: 3, tq: 3, alibi: true }, // 2 rows a head: single-row products
      { dtype: 'bf16', d: 32, h: 16, hkv: 4, tq: 1 },
      { dtype: 'f16', d: 5, h: 4, hkv: 4, tq: 2 },
    ];
    for (const sp of specs) {
      const c = makeKVCacheCase({ dtype: sp.dtype, seqlens: [300, 77, 0, 150], blockSize: 16, d: sp.d, h: sp.h, hkv: sp.hkv, tq: sp.tq, causal: true, seed: sp.d + sp.h, ...(sp.alibi ? { alibi: 'H' as const } : {}) });
      const x = kvCacheCaseInputs(c);
      const p = describeKVCacheProblem(x.q, x.kCache, x.vCache, { ...x.options, cacheSeqlens: x.cacheSeqlens, blockTable: x.blockTable });
      for (const kvChunk of [64, 1 << 20]) {
        const plan = planKVCache(p, kvChunk);
        const d4 = (p.d + 3) & ~3;
        const run = (heads: number) => {
          const job = {
            kind: 'kvcache' as const, p, qt: plan.qt, rows: plan.rows, chunk: plan.chunk, units: plan.units, heads,
            q: (x.q as HostTensor).data, kCache: (x.kCache as HostTensor).data, vCache: (x.vCache as HostTensor).data,
            out: allocHost(p.dtype, p.batch * p.tq * p.h * p.d), lse: new Float32Array(p.batch * p.h * p.tq),
            pm: new Float64Array(plan.slots * plan.rows), pl: new Float64Array(plan.slots * plan.rows), pacc: new Float64Array(plan.slots * plan.rows * d4),
            counter: new Int32Array(1),
          };
          const ws = new Workspace();
          runKVCache(job, ws);
          if (plan.slots > 0) combineKVCache(job, ws);
          return [...job.out, ...job.lse];
        };
        const heads = kvHeadsPerUnit(p, plan);
        expect(p.hkv % heads).toBe(0);
        expect(plan.units.length / KV_UNIT / heads).toBeGreaterThanOrEqual(1);
        const one = run(1);
        expect(one.some((v) => v !== 0)).toBe(true);
        expect(run(p.hkv), `${sp.dtype} D${sp.d} H${sp.h}/${sp.hkv} chunk ${kvChunk}`).toEqual(one);
      }
    }
  });
});

describe('cpu engine: 16-bit caches read in place', () => {
  it('widens through tables equal to core\'s decode on all 65,536 patterns of f16 and bf16', async () => {
    const { bf16ToF32, f16ToF32 } = await import('../dist/cpu/tileio.js');
    const { decode } = await import('../dist/index.js');
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    for (const [dtype, table] of [['f16', f16ToF32()], ['bf16', bf16ToF32()]] as const) {
      const want = new Uint32Array(decode(dtype, all).buffer);
      const got = new Uint32Array(table.buffer, table.byteOffset, 65536);
      let bad = 0;
      for (let i = 0; i < 65536; i++) if (got[i] !== want[i]) bad++;
      expect(bad, dtype).toBe(0);
    }
  });

  it('computes every head dim (odd ones too) and GQA group (4-row blocks and single rows) in every dtype, rows through off[] and a constant stride (the kit rules)', async () => {
    const { createCpuBackend } = await import('../dist/index.js');
    const be = await createCpuBackend({ inlineBelowFlops: 0, kvChunk: 64 });
    const failed: string[] = [];
    try {
      for (const dtype of ['f32', 'f16', 'bf16'] as const) {
        for (const d of [1, 3, 5, 12, 33]) {
          for (const [h, hkv] of [[8, 2], [6, 2], [5, 1], [2, 2]]) {
            // blocks of 16: a 64-key tile spans 4 blocks (P·V through off[]); contiguous: one stride (pvRows4S / pvRows4TS)
            for (const blockSize of [16, undefined]) {
              const c = makeKVCacheCase({ dtype, seqlens: [90, 17], tnew: 2, tq: 2, causal: true, d, h, hkv, seed: d * 31 + h, ...(blockSize ? { blockSize } : {}) });
              const r = await checkKVCacheCase(be, c);
              if (!r.pass || r.skipped) failed.push(`${dtype} D${d} H${h}/${hkv} ${blockSize ? `paged ${blockSize}` : 'contiguous'}: ${r.message}`);
            }
          }
        }
      }
    } finally {
      await be.dispose();
    }
    expect(failed).toEqual([]);
  });

  it('paged tables whose tiles lie a constant stride apart (blocks in order, reversed, every other one) and repeated blocks match the reference', async () => {
    // the strided P·V kernels (pvRows4S / pvRows4TS) take a tile when every row of it is one
    // stride from the last, across block boundaries too; a stride of 0 (a block listed twice)
    // or one that changes inside the tile takes the off[] kernels
    const { createCpuBackend } = await import('../dist/index.js');
    const be = await createCpuBackend({ inlineBelowFlops: 0, kvChunk: 64, threads: 1 });
    const failed: string[] = [];
    try {
      for (const dtype of ['f32', 'f16', 'bf16'] as const) {
        for (const [bs, layout] of [[1, 'reverse'], [16, 'in order'], [64, 'in order'], [3, 'every other'], [16, 'repeated']] as const) {
          const lens = [150, 70], B = lens.length, d = 5, h = 8, hkv = 2, tq = 1;
          const maxBlocks = Math.max(...lens.map((l) => Math.ceil(l / bs)));
          const slots = B * maxBlocks;
          const table = Int32Array.from({ length: slots }, (_, i) => (layout === 'reverse' ? slots - 1 - i : layout === 'every other' ? 2 * i : layout === 'repeated' ? i % 2 : i));
          const nb = layout === 'every other' ? 2 * slots : layout === 'repeated' ? 2 : slots;
          const rng = createRng(bs * 7 + dtype.length);
          const q = randomTensor(rng, [B, tq, h, d], dtype);
          const kc = randomTensor(rng, [nb, bs, hkv, d], dtype), vc = randomTensor(rng, [nb, bs, hkv, d], dtype);
          const o: KVCacheOptions = { cacheSeqlens: Int32Array.from(lens), blockTable: table, ...(layout === 'repeated' ? {} : { window: [37, 5] as [number, number] }) };
          const ref = referenceKVCache(q, kc, vc, o);
          const r = await be.forwardWithKVCache(q, kc, vc, o);
          const out = tensorValues((await be.read(r.out)) as HostTensor);
          let err = 0, mx = 1e-3;
          for (let i = 0; i < out.length; i++) {
            err = Math.max(err, Math.abs(out[i] - ref.out[i]));
            mx = Math.max(mx, Math.abs(ref.out[i]));
          }
          const tol = dtype === 'f32' ? 1e-5 : dtype === 'f16' ? 2e-3 : 1.6e-2;
          if (!(err <= tol * mx)) failed.push(`${dtype} blocks of ${bs} ${layout}: max error ${err} against max |out| ${mx}`);
        }
      }
    } finally {
      await be.dispose();
    }
    expect(failed).toEqual([]);
  });
});

describe('cpu engine: a failure after validation', () => {
  it('an allocation that fails (E_OOM) leaves the host caches as they were, and the engine usable', async () => {
    const { createCpuBackend } = await import('../dist/index.js');
    const be = await createCpuBackend({ threads: 0 });
    try {
      const c = makeKVCacheCase({ dtype: 'f32', seqlens: [7, 3], tnew: 2, blockSize: 4, d: 8, h: 2, hkv: 1, seed: 4 });
      const x = kvCacheCaseInputs(c);
      const [kc, vc] = [cloneHost(x.kCache), cloneHost(x.vCache)];
      // the output is allocated in shared memory: make that allocation fail, as a full heap would
      vi.stubGlobal('SharedArrayBuffer', class {
        constructor() {
          throw new RangeError('injected: out of memory');
        }
      });
      let code = 'accepted';
      try {
        await be.forwardWithKVCache(x.q, kc, vc, { ...x.options, cacheSeqlens: x.cacheSeqlens, blockTable: x.blockTable, kNew: x.kNew, vNew: x.vNew });
      } catch (e) {
        code = isFAError(e) ? e.code : String(e);
      } finally {
        vi.unstubAllGlobals();
      }
      expect(code).toBe('E_OOM');
      expect(Array.from(kc.data)).toEqual(Array.from(x.kCache.data));
      expect(Array.from(vc.data)).toEqual(Array.from(x.vCache.data));
      expect((await checkKVCacheCase(be, c)).pass).toBe(true);
    } finally {
      await be.dispose();
    }
  });
});

describe("FlashAttention-2's extras in the KV-cache call (issue 26): leftpad, batch index, rotary", () => {
  const B = 2, H = 2, HKV = 1, D = 8, CAP = 12;
  const rng = createRng(31);
  const f32 = (shape: number[]) => hostTensor(randomValues(rng, shape.reduce((a, b) => a * b, 1)), shape, 'f32');
  const q = f32([B, 2, H, D]);
  const kc = f32([B + 1, CAP, HKV, D]);
  const vc = f32([B + 1, CAP, HKV, D]);
  const kn = f32([B, 1, HKV, D]);
  const vn = f32([B, 1, HKV, D]);
  const lens = [5, 9];
  const lp = [2, 0];
  const rows = [2, 0]; // batch entry b uses cache row rows[b]
  const half = 3, maxPos = 16;
  const cos = new Float32Array(maxPos * half), sin = new Float32Array(maxPos * half);
  for (let t = 0; t < maxPos; t++) for (let m = 0; m < half; m++) (cos[t * half + m] = Math.cos(t / (m + 1))), (sin[t * half + m] = Math.sin(t / (m + 1)));
  const tables = { rotaryCos: hostTensor(cos, [maxPos, half], 'f32'), rotarySin: hostTensor(sin, [maxPos, half], 'f32') };
  /** x rotated at pos, GPT-NeoX halves (m, m + half) or GPT-J pairs, written straight from DESIGN.md. */
  const rotate = (x: Float32Array, o: number, pos: number, interleaved: boolean) => {
    for (let m = 0; m < half; m++) {
      const [a, c] = interleaved ? [o + 2 * m, o + 2 * m + 1] : [o + m, o + m + half];
      const [xa, xc] = [x[a], x[c]];
      const [cs, sn] = [cos[pos * half + m], sin[pos * half + m]]; // (the tables' f32 values)
      x[a] = xa * cs - xc * sn;
      x[c] = xc * cs + xa * sn;
    }
  };
  for (const interleaved of [false, true]) {
    it(`equals dense attention over rows leftpad … len + 1 of the picked cache rows, q and the new key rotated at their positions (${interleaved ? 'GPT-J pairs' : 'NeoX halves'}, causal)`, () => {
      const opts = { cacheSeqlens: lens, cacheLeftpad: lp, cacheBatchIdx: rows, kNew: kn, vNew: vn, causal: true, ...tables, rotaryInterleaved: interleaved };
      const r = referenceKVCache(q, kc, vc, opts);
      for (let b = 0; b < B; b++) {
        const n = lens[b] + 1 - lp[b]; // keys the sequence attends to
        const kd = new Float32Array(n * HKV * D), vd = new Float32Array(n * HKV * D);
        for (let j = 0; j < n; j++) {
          const t = lp[b] + j;
          const src = t < lens[b] ? (kc.data as Float32Array).subarray((rows[b] * CAP + t) * D, (rows[b] * CAP + t + 1) * D) : (kn.data as Float32Array).subarray(b * D, (b + 1) * D);
          const vsrc = t < lens[b] ? (vc.data as Float32Array).subarray((rows[b] * CAP + t) * D, (rows[b] * CAP + t + 1) * D) : (vn.data as Float32Array).subarray(b * D, (b + 1) * D);
          kd.set(src, j * D);
          vd.set(vsrc, j * D);
          if (t >= lens[b]) rotate(kd, j * D, t - lp[b], interleaved); // only the new key is rotated by the call
        }
        const qd = Float32Array.from((q.data as Float32Array).subarray(b * 2 * H * D, (b + 1) * 2 * H * D));
        for (let i = 0; i < 2; i++) for (let h = 0; h < H; h++) rotate(qd, (i * H + h) * D, lens[b] - lp[b] + i, interleaved);
        const dense = referenceForward(hostTensor(qd, [1, 2, H, D], 'f32'), hostTensor(kd, [1, n, HKV, D], 'f32'), hostTensor(vd, [1, n, HKV, D], 'f32'), { causal: true });
        for (let x = 0; x < 2 * H * D; x++) expect(r.out[b * 2 * H * D + x]).toBeCloseTo(dense.out[x], 12);
      }
    });
  }
  it('refuses bad extras with one-line FAErrors', () => {
    const base = { cacheSeqlens: lens, kNew: kn, vNew: vn };
    const kc2 = f32([B, CAP, HKV, D]), vc2 = f32([B, CAP, HKV, D]);
    const bad: [string, () => unknown, string][] = [
      ['leftpad past the length', () => describeKVCacheProblem(q, kc2, vc2, { ...base, cacheLeftpad: [6, 0] }), 'E_ARG'],
      ['leftpad of the wrong length', () => describeKVCacheProblem(q, kc2, vc2, { ...base, cacheLeftpad: [1] }), 'E_SHAPE'],
      ['a batch index outside the cache', () => describeKVCacheProblem(q, kc, vc, { ...base, cacheBatchIdx: [0, 3] }), 'E_ARG'],
      ['two sequences appending to one row', () => describeKVCacheProblem(q, kc, vc, { ...base, cacheSeqlens: [5, 5], cacheBatchIdx: [1, 1] }), 'E_ARG'],
      ['a cache with more rows than B and no batch index', () => describeKVCacheProblem(q, kc, vc, base), 'E_SHAPE'],
      ['rotaryCos without rotarySin', () => describeKVCacheProblem(q, kc2, vc2, { ...base, rotaryCos: tables.rotaryCos }), 'E_ARG'],
      ['rotary tables too short for the positions', () => describeKVCacheProblem(q, kc2, vc2, { ...base, rotaryCos: hostTensor(cos.subarray(0, 5 * half), [5, half], 'f32'), rotarySin: hostTensor(sin.subarray(0, 5 * half), [5, half], 'f32') }), 'E_ARG'],
      ['rotaryDim past D', () => describeKVCacheProblem(q, kc2, vc2, { ...base, rotaryCos: hostTensor(new Float32Array(16 * 5), [16, 5], 'f32'), rotarySin: hostTensor(new Float32Array(16 * 5), [16, 5], 'f32') }), 'E_ARG'],
      ['f16 rotary tables', () => describeKVCacheProblem(q, kc2, vc2, { ...base, rotaryCos: hostTensor(new Float32Array(16 * 3), [16, 3], 'f16'), rotarySin: hostTensor(new Float32Array(16 * 3), [16, 3], 'f16') }), 'E_DTYPE'],
    ];
    for (const [name, f, code] of bad) expect(f, name).toThrowError(expect.objectContaining({ code }));
  });
});
