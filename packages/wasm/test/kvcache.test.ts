/**
 * The wasm engine's KV-cache call (and the native engine's, on each level this CPU runs) and device tensors beyond the kit: results independent of the
 * thread count and of the split (bit for bit), a decode loop on uploaded caches appended in
 * place (outputs on the device when q is), what a call costs in memory (uploaded caches: none of
 * the cache; host caches: the blocks it reads, not the pool), the life of device tensors
 * (dispose frees, a disposed or foreign tensor is E_ARG, E_TOO_LARGE leaves the engine usable),
 * and the copy loop the decode benchmark measures against.
 */
import { describe, expect, it } from 'vitest';
import { appendKVCacheHost, createCpuBackend, decode, describeKVCacheProblem, describeKVCacheProblemShapes, encode, FAError, isFAError, referenceKVCache, tensor, type DType, type HostData, type HostTensor, type KVCacheOptions, type Tensor } from '@fa/core';
import { checkKVCacheCase, makeKVCacheCase } from '@fa/core/testing';
import { createWasmBackend as createEngine, nativeTarget, type WasmBackend, type WasmBackendOptions } from '../dist/index.js';

// the wasm engine, and the native one's levels where they run (their own KV kernels: kv-x86.h)
const native = await nativeTarget();
const ENGINES: { name: string; opts: WasmBackendOptions }[] = [
  { name: 'wasm', opts: {} },
  ...(native.level === 'x86-64-v4' ? [{ name: 'native x86-64-v4', opts: { native: true, nativeLevel: 'x86-64-v4' as const } }] : []),
  ...(native.level ? [{ name: 'native x86-64-v3', opts: { native: true, nativeLevel: 'x86-64-v3' as const } }] : []),
];

function values(n: number, seed: number): Float32Array {
  const a = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = s / 2 ** 32 - 0.5;
  }
  return a;
}

function rand(shape: number[], seed: number, dtype: DType = 'f32'): HostTensor {
  const f = values(shape.reduce((a, b) => a * b, 1), seed);
  return tensor(dtype === 'f32' ? f : encode(dtype, f), shape, dtype);
}

const bytesOf = (d: HostData) => Buffer.from(d.buffer, d.byteOffset, d.byteLength);
const same = (a: HostData, b: HostData) => Buffer.compare(bytesOf(a), bytesOf(b)) === 0;
const clone = (t: HostTensor): HostTensor => tensor(t.data.slice() as HostData, t.shape, t.dtype);

async function code(p: Promise<unknown> | (() => unknown)): Promise<string> {
  try {
    await (typeof p === 'function' ? p() : p);
    return 'ok';
  } catch (e) {
    return isFAError(e) ? e.code : `not an FAError: ${String(e)}`;
  }
}

/** B = 2 sequences (lengths 700 and 1300, one token appended), paged blocks of 64 in shuffled order, H 8 / Hkv 2, D 96, Tq 3 causal. */
function decodeCase(dtype: DType) {
  const [B, bs, hkv, h, d, tq] = [2, 64, 2, 8, 96, 3];
  const lens = [700, 1300];
  const per = Math.ceil((Math.max(...lens) + 1) / bs);
  const blocks = B * per;
  const order = Array.from({ length: blocks }, (_, i) => (i * 5 + 3) % blocks); // a permutation: blocks = 42
  return {
    q: rand([B, tq, h, d], 1, dtype),
    kCache: rand([blocks, bs, hkv, d], 2, dtype),
    vCache: rand([blocks, bs, hkv, d], 3, dtype),
    opts: { cacheSeqlens: lens, blockTable: Int32Array.from(order), kNew: rand([B, 1, hkv, d], 4, dtype), vNew: rand([B, 1, hkv, d], 5, dtype), causal: true, softcap: 20 } satisfies KVCacheOptions,
  };
}

async function run(be: WasmBackend, dtype: DType) {
  const x = decodeCase(dtype);
  const r = await be.forwardWithKVCache(x.q, clone(x.kCache), clone(x.vCache), x.opts);
  return { out: (r.out as HostTensor).data, lse: (r.lse as HostTensor).data };
}

for (const engine of ENGINES) describe(`${engine.name} KV-cache call`, () => {
  const createWasmBackend = (o: WasmBackendOptions = {}) => createEngine({ ...o, ...engine.opts });
  it('gives the same bits inline, on 2 and 3 threads, split or not split over the keys, run after run', async () => {
    const engines = [
      await createWasmBackend({ threads: 0 }),
      await createWasmBackend({ threads: 2, inlineBelowFlops: 0 }),
      await createWasmBackend({ threads: 3, inlineBelowFlops: 0 }),
    ];
    const split = [await createWasmBackend({ threads: 0, kvChunk: 256 }), await createWasmBackend({ threads: 2, inlineBelowFlops: 0, kvChunk: 256 })];
    for (const dtype of ['f32', 'bf16'] as const) {
      const base = await run(engines[0], dtype);
      for (const be of engines) {
        const r = await run(be, dtype);
        expect(same(r.out, base.out) && same(r.lse, base.lse), `${dtype} on ${be.device}`).toBe(true);
      }
      // a split key range merges the chunks in order: its bits differ from the unsplit ones, but not between thread counts
      const s0 = await run(split[0], dtype);
      const s1 = await run(split[1], dtype);
      expect(same(s0.out, s1.out) && same(s0.lse, s1.lse)).toBe(true);
      expect(same(await run(split[1], dtype).then((r) => r.out), s1.out)).toBe(true);
    }
    for (const be of [...engines, ...split]) await be.dispose();
  });

  it('computes head dims with a remainder past the 8-wide chunks, and GQA groups that are not a multiple of 4, in every dtype (the kit rules)', async () => {
    const be = await createWasmBackend({ threads: 2, inlineBelowFlops: 0, kvChunk: 40 });
    const failed: string[] = [];
    let n = 0;
    for (const dtype of ['f32', 'f16', 'bf16'] as const) {
      for (const d of [3, 12, 100, 129, 200, 300]) {
        for (const [h, hkv] of [[5, 1], [6, 2], [8, 2]]) {
          const c = makeKVCacheCase({ dtype, seqlens: [90, 17], tnew: 2, tq: 2, blockSize: 16, causal: true, d, h, hkv, seed: d * 31 + h });
          for (const upload of [false, true]) {
            const r = await checkKVCacheCase(be, c, { upload });
            n++;
            if (!r.pass || r.skipped) failed.push(`${dtype} D${d} H${h}/${hkv}${upload ? ' device' : ''}: ${r.message}`);
          }
        }
      }
    }
    expect(failed).toEqual([]);
    expect(n).toBe(108);
    await be.dispose();
  });

  it('f16 caches with an infinity or NaN in some tiles (which take the exact widening) and none in others (the short one) give what the cpu engine gives', async () => {
    const be = await createWasmBackend({ threads: 2, inlineBelowFlops: 0, kvChunk: 128 });
    const cpu = await createCpuBackend({ threads: 0 });
    const x = decodeCase('f16');
    const [bs, hkv, d] = [64, 2, 96];
    const row = (blk: number, t: number, kvh: number) => ((blk * bs + t) * hkv + kvh) * d;
    const order = x.opts.blockTable;
    // sequence 0: NaN in the K row of key 70 (block order[1]), kv head 1, and −∞ in key 5's (kv head 0: softcap makes
    // its score finite); sequence 1 (blocks order[21…]): +∞ in the V row of key 1000, kv head 0
    const k = clone(x.kCache), v = clone(x.vCache);
    (k.data as Uint16Array)[row(order[1], 70 - 64, 1) + 17] = 0x7e00;
    (k.data as Uint16Array)[row(order[0], 5, 0) + 40] = 0xfc00;
    (v.data as Uint16Array)[row(order[21 + 15], 1000 - 15 * 64, 0) + 3] = 0x7c00;
    const r = await be.forwardWithKVCache(x.q, clone(k), clone(v), x.opts);
    const c = await cpu.forwardWithKVCache(x.q, clone(k), clone(v), x.opts);
    const out = (r.out as HostTensor).data as Uint16Array, want = (c.out as HostTensor).data as Uint16Array;
    const f = decode('f16', out), g = decode('f16', want);
    let nan = 0, inf = 0, bad = 0;
    for (let i = 0; i < f.length; i++) {
      if (Number.isNaN(g[i])) nan++;
      else if (!Number.isFinite(g[i])) inf++;
      if (!Number.isFinite(g[i]) || !Number.isFinite(f[i])) {
        if (!Object.is(f[i], g[i]) && !(Number.isNaN(f[i]) && Number.isNaN(g[i]))) bad++;
      } else if (Math.abs(f[i] - g[i]) > 2e-3 * (1 + Math.abs(g[i]))) bad++;
    }
    expect(nan).toBeGreaterThan(0); // the NaN reaches the outputs of its kv head's queries
    expect(inf).toBeGreaterThan(0); // and the infinity those of its column
    expect(nan + inf).toBeLessThan(f.length / 2); // the other heads and sequences stay finite
    expect(bad).toBe(0);
    await be.dispose();
    await cpu.dispose();
  });

  it('runs a decode loop on uploaded caches: appended and read in place, outputs on the device, index tensors advanced with writeIndex', async () => {
    const be = await createWasmBackend({ threads: 2, inlineBelowFlops: 0 });
    const x = decodeCase('f16');
    const hostK = clone(x.kCache);
    const hostV = clone(x.vCache);
    const kc = await be.upload(x.kCache);
    const vc = await be.upload(x.vCache);
    expect(kc.kind).toBe('device');
    const lens = await be.uploadIndex(x.opts.cacheSeqlens);
    const table = await be.uploadIndex(x.opts.blockTable, [2, x.opts.blockTable.length / 2]);
    let now = [...x.opts.cacheSeqlens];
    for (let step = 0; step < 3; step++) {
      const q = rand([2, 1, 8, 96], 10 + step, 'f16');
      const kNew = rand([2, 1, 2, 96], 20 + step, 'f16');
      const vNew = rand([2, 1, 2, 96], 30 + step, 'f16');
      const opts = { cacheSeqlens: lens, blockTable: table, kNew: await be.upload(kNew), vNew: await be.upload(vNew), causal: true };
      const r = await be.forwardWithKVCache(await be.upload(q), kc, vc, opts);
      expect([r.out.kind, r.lse.kind]).toEqual(['device', 'device']);
      const out = await be.read(r.out);
      const ref = referenceKVCache(q, hostK, hostV, { cacheSeqlens: now, blockTable: x.opts.blockTable, kNew, vNew, causal: true });
      const got = (await be.read(r.lse)).data as Float32Array;
      for (let i = 0; i < got.length; i++) expect(Math.abs(got[i] - ref.lse[i])).toBeLessThan(1e-5);
      const o = (await be.read(r.out)).data as Uint16Array;
      const want = encode('f16', Float32Array.from(ref.out));
      let off = 0;
      for (let i = 0; i < o.length; i++) if (Math.abs(o[i] - want[i]) > 1) off++;
      expect(off, 'out elements more than one f16 step from the rounded reference').toBe(0);
      expect(out.dtype).toBe('f16');
      appendKVCacheHost(describeKVCacheProblem(q, hostK, hostV, { cacheSeqlens: now, blockTable: x.opts.blockTable, kNew, vNew }), hostK, hostV, kNew, vNew);
      now = now.map((n) => n + 1);
      await be.writeIndex(lens, now);
      for (const t of [r.out, r.lse, opts.kNew, opts.vNew]) be.disposeTensor(t);
    }
    expect(same((await be.read(kc)).data, hostK.data)).toBe(true);
    expect(same((await be.read(vc)).data, hostV.data)).toBe(true);
    expect(same(x.kCache.data, decodeCase('f16').kCache.data), 'the uploaded host tensor is a copy: unchanged').toBe(true);
    await be.dispose();
  });

  it('costs little memory per call: uploaded caches none of their size, host caches the blocks the call reads', async () => {
    const be = await createWasmBackend({ threads: 2, inlineBelowFlops: 0 });
    const [bs, hkv, d, pool] = [256, 8, 128, 32]; // an 8K-token pool of 32 MiB per cache; one sequence uses 4 blocks
    const kCache = rand([pool, bs, hkv, d], 1);
    const vCache = rand([pool, bs, hkv, d], 2);
    const table = Int32Array.from([20, 3, 17, 30]);
    const opts = { cacheSeqlens: [1000], blockTable: table };
    const q = rand([1, 1, 32, d], 3);
    be.resetCallBytesPeak();
    await be.forwardWithKVCache(q, kCache, vCache, opts);
    const usedBlocks = 2 * 4 * bs * hkv * d * 4;
    expect(be.callBytesPeak).toBeGreaterThan(usedBlocks);
    expect(be.callBytesPeak).toBeLessThan(usedBlocks + 2 ** 20);
    const [kc, vc] = [await be.upload(kCache), await be.upload(vCache)];
    expect(be.tensorBytes).toBeGreaterThanOrEqual(2 * kCache.data.byteLength);
    be.resetCallBytesPeak();
    const r = await be.forwardWithKVCache(q, kc, vc, opts);
    expect(be.callBytesPeak).toBeLessThan(2 ** 20);
    expect(r.out.kind).toBe('host');
    const tiny = await be.upload(rand([4], 9));
    be.disposeTensor(kc);
    be.disposeTensor(vc);
    await be.read(tiny); // serialised after the frees
    expect(be.tensorBytes).toBeLessThan(1024);
    await be.dispose();
  });

  it('refuses disposed and foreign device tensors with E_ARG, and fails an upload past its memory with E_TOO_LARGE, staying usable', async () => {
    const be = await createWasmBackend({ threads: 0, maxMemoryBytes: 4 * 2 ** 20 });
    const other = await createWasmBackend({ threads: 0 });
    const small = { q: rand([1, 1, 2, 8], 1), k: rand([1, 16, 1, 8], 2), v: rand([1, 16, 1, 8], 3) };
    const kc = await be.upload(small.k);
    const vc = await be.upload(small.v);
    const opts = { cacheSeqlens: [10] };
    const foreign = await other.upload(small.k);
    expect(await code(be.forwardWithKVCache(small.q, foreign, vc, opts))).toBe('E_ARG');
    expect(await code(be.read(foreign))).toBe('E_ARG');
    const fake: Tensor = { kind: 'device', backend: 'webgpu', dtype: 'f32', shape: [1, 16, 1, 8], handle: null, disposed: false };
    expect(await code(be.forwardWithKVCache(small.q, fake, vc, opts))).toBe('E_ARG');
    be.disposeTensor(kc);
    expect(await code(be.forwardWithKVCache(small.q, kc, vc, opts))).toBe('E_ARG');
    expect(await code(be.read(kc))).toBe('E_ARG');
    expect(await code(be.upload(rand([1, 2048, 4, 128], 7)))).toBe('E_TOO_LARGE');
    const s = be.supportsKVCache(describeKVCacheProblemShapes([1, 1, 8, 128], [64, 256, 4, 128], 'f32', { cacheSeqlens: [16000], blockTable: Int32Array.from({ length: 64 }, (_, i) => i) }));
    expect(s.ok).toBe(false);
    if (!s.ok) expect(s.reason).toMatch(/needs about .* of WebAssembly memory/);
    const kc2 = await be.upload(small.k);
    const r = await be.forwardWithKVCache(small.q, kc2, vc, opts);
    expect((r.out as HostTensor).data.length).toBe(16);
    await be.dispose();
    await other.dispose();
  });

  it('a call that fails for memory after validation (the per-thread tiles, the combine scratch) leaves the caches as they were, host or uploaded', async () => {
    const be = await createWasmBackend({ threads: 0, kvChunk: 256 }); // split: the combine runs
    const arena = (be as unknown as { arena: { alloc(bytes: number, what: string): number } }).arena;
    try {
      for (const failing of ['the per-thread tiles', 'the combine scratch']) {
        for (const device of [false, true]) {
          const x = decodeCase('bf16');
          const kc = device ? await be.upload(x.kCache) : clone(x.kCache);
          const vc = device ? await be.upload(x.vCache) : clone(x.vCache);
          const real = arena.alloc;
          let seen = false;
          arena.alloc = function (bytes: number, what: string): number {
            if (what === failing) {
              seen = true;
              throw new FAError('E_OOM', `injected: no memory for ${what}`);
            }
            return real.call(this, bytes, what);
          };
          let c: string;
          try {
            c = await code(be.forwardWithKVCache(x.q, kc, vc, x.opts));
          } finally {
            arena.alloc = real;
          }
          expect([failing, device, seen, c]).toEqual([failing, device, true, 'E_OOM']);
          expect(same((await be.read(kc)).data, x.kCache.data)).toBe(true);
          expect(same((await be.read(vc)).data, x.vCache.data)).toBe(true);
          if (device) {
            be.disposeTensor(kc);
            be.disposeTensor(vc);
          }
        }
      }
      // and the engine stays usable: the same call then computes what the reference says
      const x = decodeCase('bf16');
      const r = await be.forwardWithKVCache(x.q, clone(x.kCache), clone(x.vCache), x.opts);
      const fresh = await createWasmBackend({ threads: 0, kvChunk: 256 });
      const want = await run(fresh, 'bf16');
      await fresh.dispose();
      expect(same((r.out as HostTensor).data, want.out)).toBe(true);
    } finally {
      await be.dispose();
    }
  });

  it('copies the bytes of device tensors on its threads (the decode yardstick), and only those', async () => {
    const be = await createWasmBackend({ threads: 2 });
    const t = await be.upload(rand([4, 256, 8, 128], 1));
    for (const method of ['simd', 'memcpy'] as const) {
      const c = await be.copyLoop([t, t], method);
      expect(c.bytes).toBe(2 * 4 * 256 * 8 * 128 * 4);
      expect(c.seconds).toBeGreaterThan(0);
    }
    expect(await code(be.copyLoop([rand([4], 1)]))).toBe('E_ARG');
    await be.dispose();
  });
});
