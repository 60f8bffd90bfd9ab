/**
 * The KV-cache call of the wasm engine (forwardWithKVCache), on core's KV-cache plan
 * (planKVCache: units of (batch, kv head, query tile, key chunk), partial-state slots for split
 * key ranges) and csrc/kvcache.c's kernels.
 *
 * Where the caches are:
 * - the engine's device tensors (upload()): the kernels read them where they lie, through the
 *   block table, and kNew/vNew are appended in place there: a decode step copies nothing but q;
 * - host tensors: WebAssembly reads only its own memory, so the blocks the call reads (their
 *   used rows) are copied in after the append (which writes the caller's arrays in place), and
 *   the kernels read the copies through a table renumbered to them.
 * Either way the kernels read 16-bit caches in their own dtype (widened in registers).
 */
import {
  appendKVCacheHost,
  bytesPerElement,
  isDeviceTensor,
  KV_UNIT,
  kvKeys,
  planKVCache,
  splitGroups,
  type DType,
  type KVCacheOptions,
  type KVCachePlan,
  type KVCacheProblem,
  type Tensor,
} from '@fa/core';
import type { Arena } from './memory.js';
import { KV_PROBLEM_BYTES, writeKVProblem, type ProblemFields } from './params.js';
import { hostView, type WasmTensor } from './tensors.js';

const F = 4;
const dp = (d: number) => (d + 7) & ~7;
const DTYPE_CODE: Record<DType, number> = { f32: 0, f16: 1, bf16: 2 };

/** The blocks a call reads, renumbered from 0 in order of first use, with the rows used in each. */
export interface UsedBlocks {
  /** Original block index of each used block. */
  readonly blocks: Int32Array;
  /** Rows of each used block the call reads (a sequence's last block may be partly filled). */
  readonly rows: Int32Array;
  /** The block table with every entry a sequence reads renumbered (others left as they are). */
  readonly table: Int32Array;
}

export function usedBlocks(p: KVCacheProblem): UsedBlocks {
  const index = new Map<number, number>();
  const rows: number[] = [];
  const table = Int32Array.from(p.blockTable);
  for (let b = 0; b < p.batch; b++) {
    const n = kvKeys(p, b);
    for (let j = 0; j * p.blockSize < n; j++) {
      const e = b * p.maxBlocksPerSeq + j;
      const blk = p.blockTable[e];
      let i = index.get(blk);
      if (i === undefined) {
        i = rows.length;
        index.set(blk, i);
        rows.push(0);
      }
      rows[i] = Math.max(rows[i], Math.min(p.blockSize, n - j * p.blockSize));
      table[e] = i;
    }
  }
  return { blocks: Int32Array.from(index.keys()), rows: Int32Array.from(rows), table };
}

/** Bytes of engine memory a call takes besides the caches (q/out, lse, indices, partial states, scratch). */
export function kvCallBytes(p: KVCacheProblem, plan: KVCachePlan, threads: number, scratchPerThread: number): number {
  const nq = p.batch * p.tq * p.h * p.d;
  const partials = plan.slots * plan.rows * (2 + dp(p.d));
  const indices = p.batch * (2 + p.maxBlocksPerSeq) + (p.alibi ? p.alibi.length : 0) + (p.sinks ? p.h : 0);
  return F * (nq + p.batch * p.h * p.tq + partials + indices) + KV_PROBLEM_BYTES + (threads + 1) * scratchPerThread;
}

/** An upper bound of csrc/kvcache.c's fa_kv_scratch_bytes (units of `heads` kv heads) plus a thread's stack. */
export function kvScratchBound(plan: KVCachePlan, heads: number, d: number, stackBytes: number): number {
  const all = heads * plan.rows;
  // the two arrays of 64 row addresses: 4 bytes each in wasm32, 8 in the native build
  return F * (2 * all * dp(d) + 2 * (all + 3) + plan.rows * 64) + 2 * 64 * 8 + 16 + stackBytes;
}

/** Entries of a kernel unit: (batch, first kv head, end kv head, query tile, key chunk, slot of the first head). */
export const KV_GROUP_UNIT = 6;

/**
 * The kernel's units: core's units (one per kv head, consecutive in the plan for each (batch,
 * query tile, key chunk)) taken `heads` kv heads at a time, so that a unit walks each token row
 * of its tiles once for all of them. All of a token's kv heads together when there are units
 * enough for the threads (4 a thread), fewer otherwise (a short single sequence). Each kv head is
 * computed the same way whatever the grouping: results do not depend on it.
 */
export function groupUnits(p: KVCacheProblem, plan: KVCachePlan, threads: number): { units: Int32Array; heads: number } {
  const items = plan.units.length / KV_UNIT / p.hkv;
  const want = threads <= 1 ? 1 : 4 * threads;
  const heads = Math.max(1, Math.min(p.hkv, Math.floor((p.hkv * items) / want)));
  const out: number[] = [];
  for (let o = 0; o < plan.units.length; o += p.hkv * KV_UNIT) {
    for (let h0 = 0; h0 < p.hkv; h0 += heads) {
      const u = o + h0 * KV_UNIT; // core's unit of kv head h0
      out.push(plan.units[u], h0, Math.min(p.hkv, h0 + heads), plan.units[u + 2], plan.units[u + 3], plan.units[u + 4]);
    }
  }
  return { units: Int32Array.from(out), heads };
}

/**
 * Bytes the copies of host caches take: whole blocks for the blocks a call reads (only their used
 * rows are written; a contiguous cache is one block of its capacity a sequence), K and V.
 */
export function hostCacheBytes(p: KVCacheProblem): number {
  return 2 * usedBlocks(p).blocks.length * p.blockSize * p.hkv * p.d * bytesPerElement(p.dtype);
}

/** A job's per-thread tiles in the arena: `threads` slots of `slotBytes` from `slots`. */
export interface ThreadTiles {
  readonly threads: number;
  readonly slotBytes: number;
  readonly slots: number;
}

/** What the engine lends a KV call (backend.ts). */
export interface KVEngine {
  readonly memory: WebAssembly.Memory;
  readonly arena: Arena;
  /** A float32 copy of a tensor in the arena, multiplied by `scale` (q). */
  scaledInput(t: Tensor, dtype: DType, scale: number, what: string): number;
  /** The per-thread tiles of a job of `units` units, `scratchBytes` a thread, allocated now. */
  tiles(units: number, scratchBytes: number, pooled: boolean): ThreadTiles;
  /** Runs units on the workers or inline, in the given tiles. */
  execute(kind: 'kvcache', problem: number, units: Int32Array, tiles: ThreadTiles, pooled: boolean): Promise<void>;
  willUseWorkers(units: number, flops: number): boolean;
  /** Worker threads (1 without). */
  readonly threads: number;
  kvScratchBytes(problem: number): number;
  combine(problem: number, scratch: number, b: number, kvh: number, t: number, slot0: number, chunks: number): void;
}

export interface KVCallResult {
  /** Address of the float32 output, [B, Tq, H, D], and of the float32 LSE, [B, H, Tq]. */
  readonly out: number;
  readonly lse: number;
}

/** Address of each cache as the kernels read it, and the table they read it through. */
interface CacheSource {
  readonly k: number;
  readonly v: number;
  readonly table: Int32Array;
}

/**
 * Lays the call out in the arena (every allocation first, the per-thread tiles and the combine
 * scratch included, so that a call refused for memory has written nothing), appends kNew/vNew in
 * place, copies host caches in, runs the units and the combine. The caller copies out/lse out of
 * the arena.
 */
export async function runKVCall(e: KVEngine, p: KVCacheProblem, q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions, kvChunk: number | undefined): Promise<KVCallResult> {
  const a = e.arena;
  const plan = planKVCache(p, kvChunk);
  const ptr = a.alloc(KV_PROBLEM_BYTES, 'the problem');
  const lens = a.alloc(4 * p.batch, 'cacheSeqlens');
  const table = a.alloc(4 * p.blockTable.length, 'the block table');
  let alibi = 0;
  if (p.alibi) alibi = a.alloc(4 * p.alibi.length, 'the ALiBi slopes');
  const sinks = p.sinks ? a.alloc(4 * p.h, 'the sinks') : 0;
  const leftpad = p.leftpad ? a.alloc(4 * p.batch, 'cacheLeftpad') : 0;
  const lse = a.alloc(4 * p.batch * p.h * p.tq, 'the lse');
  const nPartial = plan.slots * plan.rows;
  const pm = a.alloc(4 * nPartial, 'the split-KV partial states');
  const pl = a.alloc(4 * nPartial, 'the split-KV partial states');
  const pacc = a.alloc(4 * nPartial * dp(p.d), 'the split-KV partial states');
  const out = e.scaledInput(q, p.dtype, p.scale, 'q');
  const onDevice = isDeviceTensor(kCache) && isDeviceTensor(vCache);
  const used = onDevice ? undefined : usedBlocks(p);
  const es = bytesPerElement(p.dtype);
  const rowBytes = p.hkv * p.d * es;
  const blockBytes = p.blockSize * rowBytes;
  const copies = used ? [a.alloc(used.blocks.length * blockBytes, 'a copy of kCache'), a.alloc(used.blocks.length * blockBytes, 'a copy of vCache')] : [];
  // The problem block (the caches' addresses are known: the copies or the device tensors), which
  // sizes the per-thread scratch; then the tiles and the combine scratch.
  const src: CacheSource = used
    ? { k: copies[0], v: copies[1], table: used.table }
    : { k: (kCache as WasmTensor).handle.ptr, v: (vCache as WasmTensor).handle.ptr, table: p.blockTable };
  a.i32(lens, p.batch).set(p.cacheSeqlens);
  a.i32(table, src.table.length).set(src.table);
  if (p.alibi) a.f32(alibi, p.alibi.length).set(p.alibi);
  if (p.sinks) a.f32(sinks, p.h).set(p.sinks);
  if (p.leftpad) a.i32(leftpad, p.batch).set(p.leftpad);
  const base: ProblemFields = {
    batch: p.batch, h: p.h, hkv: p.hkv, d: p.d, tq: p.tq, tk: p.tk, totalQ: p.batch * p.tq, totalK: p.totalK, varlen: false,
    windowLeft: p.windowLeft, windowRight: p.windowRight, br: 0, bc: 0, scale: p.scale, softcap: p.softcap,
    cuQ: 0, cuK: 0, alibi, q: out, k: 0, v: 0, kt: 0, vp: 0, ktFirst: 0, lse, dout: 0, dvec: 0, dk: 0, dv: 0, dq: 0, sinks,
    dvDim: p.d, o: out,
  };
  const pooled = e.willUseWorkers(plan.units.length / KV_UNIT, 4 * p.h * p.tq * p.totalK * p.d);
  const grouped = groupUnits(p, plan, pooled ? e.threads : 1);
  writeKVProblem(e.memory.buffer, ptr, base, {
    dtype: DTYPE_CODE[p.dtype], blockSize: p.blockSize, maxBlocks: p.maxBlocksPerSeq, tnew: p.tnew,
    qt: plan.qt, rows: plan.rows, chunk: plan.chunk, heads: grouped.heads, lens, table, kCache: src.k, vCache: src.v, pm, pl, pacc, leftpad,
  });
  const scratch = e.kvScratchBytes(ptr);
  const tiles = e.tiles(grouped.units.length / KV_GROUP_UNIT, scratch, pooled);
  const combineScratch = plan.slots > 0 ? a.alloc(scratch, 'the combine scratch') : 0;
  // Everything is allocated: from here on nothing can fail for memory. Append, then copy in.
  const kn = opts.kNew === undefined ? undefined : hostView(e.memory, opts.kNew);
  const vn = opts.vNew === undefined ? undefined : hostView(e.memory, opts.vNew);
  appendKVCacheHost(p, hostView(e.memory, kCache), hostView(e.memory, vCache), kn, vn);
  if (used) {
    const u8 = new Uint8Array(e.memory.buffer);
    const caches = [kCache, vCache].map((t) => hostView(e.memory, t).data);
    for (let c = 0; c < 2; c++) {
      const from = new Uint8Array(caches[c].buffer, caches[c].byteOffset, caches[c].byteLength);
      for (let i = 0; i < used.blocks.length; i++) {
        const s = used.blocks[i] * blockBytes;
        u8.set(from.subarray(s, s + used.rows[i] * rowBytes), copies[c] + i * blockBytes);
      }
    }
  }
  await e.execute('kvcache', ptr, grouped.units, tiles, pooled);
  if (plan.slots > 0) combine(e, p, plan, ptr, combineScratch);
  return { out, lse };
}

/** Merges the chunks of every split group in chunk order (fa_kv_combine), on this thread. */
function combine(e: KVEngine, p: KVCacheProblem, plan: KVCachePlan, ptr: number, scratch: number): void {
  for (const g of splitGroups(p, plan)) e.combine(ptr, scratch, g.b, g.kvh, g.t, g.slot0, g.chunks);
}

/** The byte ranges of device tensors, cut into pieces of at most `piece` bytes (a copy job's units). */
export function copyUnits(tensors: readonly WasmTensor[], piece: number): Int32Array {
  const units: number[] = [];
  for (const t of tensors) {
    const bytes = t.handle.length * bytesPerElement(t.dtype);
    for (let o = 0; o < bytes; o += piece) units.push(t.handle.ptr + o, Math.min(piece, bytes - o));
  }
  return Int32Array.from(units);
}
