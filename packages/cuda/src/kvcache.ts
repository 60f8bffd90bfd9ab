/**
 * The CUDA engine's KV-cache call (issue 12; DESIGN.md "KV cache"): index tensors in device
 * memory whose host mirrors serve validation, and forwardWithKVCache over the addon's kvForward
 * (the append and flash-decoding kernels of csrc/fa_kvcache*.cuh). backend.ts delegates here
 * through KvEngine, so that this file holds the whole KV-cache path of the engine.
 *
 * Caches are this backend's device tensors (appended in place on the device) or host tensors:
 * those are uploaded to temporaries, the kernels append and attend there, and only after the
 * call succeeded are the rows appended on the host (appendKVCacheHost), so a failed call leaves
 * the host caches as they were.
 */
import {
  appendKVCacheHost,
  bytesPerElement,
  checkIndexUpload,
  checkIndexWrite,
  describeKVCacheProblem,
  FAError,
  isDeviceIndexTensor,
  isDeviceTensor,
  isHostTensor,
  numel,
  type DeviceIndexTensor,
  type DType,
  type ForwardResult,
  type HostTensor,
  type IndexData,
  type IndexInput,
  type KVCacheOptions,
  type KVCacheProblem,
  type Support,
  type Tensor,
} from '@fa/core';
import type { NativeBuffer, NativeContext, NativeKvSpec } from './native.js';

/** An int32 index tensor (lengths, a block table) in CUDA device memory, with its host mirror. */
export class CudaIndexTensor implements DeviceIndexTensor {
  readonly kind = 'index' as const;
  readonly backend = 'cuda';
  readonly shape: readonly number[];
  constructor(
    shape: readonly number[],
    readonly handle: NativeBuffer,
    readonly mirror: Int32Array,
    /** @internal */ readonly owner: object,
  ) {
    this.shape = Object.freeze([...shape]);
  }
  get disposed(): boolean {
    return this.handle.disposed;
  }
}

/** What the KV-cache path needs from the CudaBackend that owns it. */
export interface KvEngine {
  /** The backend (index tensors and device tensors are checked to be its own). */
  readonly owner: object;
  readonly ctx: NativeContext;
  supportsKVCache(p: KVCacheProblem): Support;
  /** The device buffer of t: one of this backend's tensors, or a host tensor uploaded into a temporary pushed on `temps`. */
  dev(t: Tensor, what: string, temps: NativeBuffer[]): Promise<NativeBuffer>;
  /** Device memory pushed on `keep`, or an FAError (E_OOM, ...). */
  alloc(bytes: number, keep: NativeBuffer[]): NativeBuffer;
  /** A device tensor of this backend over `buf`. */
  wrap(dtype: DType, shape: readonly number[], buf: NativeBuffer): Tensor;
  read(t: Tensor): Promise<HostTensor>;
  /** An addon error as an FAError. */
  fail(e: unknown): FAError;
}

/** The device copy of an index input: this backend's index tensor's buffer, or null for host data. */
export function indexBuffer(engine: KvEngine, x: IndexInput | undefined, what: string): NativeBuffer | null {
  if (!isDeviceIndexTensor(x)) return null;
  if (!(x instanceof CudaIndexTensor) || x.owner !== engine.owner) {
    throw new FAError('E_ARG', `${what} is an index tensor of another CUDA backend (or not made by uploadIndex); make it with this backend's uploadIndex`);
  }
  return x.handle;
}

/** Attention over a KV cache on the GPU; see AttentionBackend.forwardWithKVCache. */
export async function cudaForwardWithKVCache(engine: KvEngine, q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): Promise<ForwardResult> {
  const p = describeKVCacheProblem(q, kCache, vCache, opts, 'cuda');
  const sup = engine.supportsKVCache(p);
  if (!sup.ok) throw new FAError('E_UNSUPPORTED', `cuda: ${sup.reason}`);
  const hostCaches = isHostTensor(kCache);
  if (hostCaches !== isHostTensor(vCache)) {
    throw new FAError('E_ARG', 'kCache and vCache must both be host tensors or both device tensors of this backend');
  }
  const lensBuf = indexBuffer(engine, opts.cacheSeqlens, 'cacheSeqlens');
  const tableBuf = p.paged ? indexBuffer(engine, opts.blockTable, 'blockTable') : null;
  const temps: NativeBuffer[] = [];
  const outs: NativeBuffer[] = [];
  try {
    const bq = await engine.dev(q, 'q', temps);
    const bk = await engine.dev(kCache, 'kCache', temps);
    const bv = await engine.dev(vCache, 'vCache', temps);
    const bkn = p.tnew > 0 ? await engine.dev(opts.kNew!, 'kNew', temps) : null;
    const bvn = p.tnew > 0 ? await engine.dev(opts.vNew!, 'vNew', temps) : null;
    const out = engine.alloc(numel(p.qShape) * bytesPerElement(p.dtype), outs);
    const lse = engine.alloc(numel(p.lseShape) * 4, outs);
    if (p.batch > 0) await engine.ctx.kvForward(kvSpec(p, lensBuf, tableBuf, { q: bq, kCache: bk, vCache: bv, kNew: bkn, vNew: bvn, out, lse }));
    const tOut = engine.wrap(p.dtype, p.qShape, out);
    const tLse = engine.wrap('f32', p.lseShape, lse);
    const result = isDeviceTensor(q) ? { out: tOut, lse: tLse } : { out: await engine.read(tOut), lse: await engine.read(tLse) };
    // Last, after every read that can fail: the host caches change only when the call succeeds.
    if (hostCaches && p.tnew > 0) {
      const kn = await engine.read(opts.kNew!);
      const vn = await engine.read(opts.vNew!);
      appendKVCacheHost(p, kCache as HostTensor, vCache as HostTensor, kn, vn);
    }
    if (isDeviceTensor(q)) outs.length = 0; // the caller owns out and lse now
    return result;
  } catch (e) {
    throw engine.fail(e);
  } finally {
    for (const b of temps) b.dispose();
    for (const b of outs) b.dispose();
  }
}

/** The addon's kvForward spec of a validated KV-cache call over these device buffers. */
export function kvSpec(
  p: KVCacheProblem,
  lensBuf: NativeBuffer | null,
  tableBuf: NativeBuffer | null,
  b: { q: NativeBuffer; kCache: NativeBuffer; vCache: NativeBuffer; kNew: NativeBuffer | null; vNew: NativeBuffer | null; out: NativeBuffer; lse: NativeBuffer },
  /** How a failure the binding finds later names the call (stream-ordered calls). */
  label: string | null = null,
): NativeKvSpec {
  return {
    dtype: p.dtype,
    B: p.batch,
    H: p.h,
    Hkv: p.hkv,
    d: p.d,
    tq: p.tq,
    tnew: p.tnew,
    paged: p.paged,
    blockSize: p.blockSize,
    numBlocks: p.numBlocks,
    maxBlocksPerSeq: p.maxBlocksPerSeq,
    cacheSeqlens: p.cacheSeqlens,
    blockTable: p.paged ? p.blockTable : null,
    cacheSeqlensBuf: lensBuf,
    blockTableBuf: tableBuf,
    alibi: p.alibi ?? null,
    scale: p.scale,
    softcap: p.softcap,
    windowLeft: p.windowLeft,
    windowRight: p.windowRight,
    q: b.q,
    kCache: b.kCache,
    vCache: b.vCache,
    kNew: b.kNew,
    vNew: b.vNew,
    out: b.out,
    lse: b.lse,
    label,
  };
}

/** backend.uploadIndex: the data in device memory, its copy as the mirror. */
export async function cudaUploadIndex(engine: KvEngine, data: IndexData, shape?: readonly number[]): Promise<DeviceIndexTensor> {
  const c = checkIndexUpload(data, shape);
  const keep: NativeBuffer[] = [];
  const buf = engine.alloc(c.data.byteLength, keep);
  try {
    await engine.ctx.upload(buf, c.data);
  } catch (e) {
    buf.dispose();
    throw engine.fail(e);
  }
  return new CudaIndexTensor(c.shape, buf, c.data, engine.owner);
}

/**
 * backend.writeIndex: the whole new contents go to the device in the stream's order (after the
 * calls already issued, before the ones issued later), and the mirror changes when the copy is
 * queued, so a call issued next validates what it will read.
 */
export async function cudaWriteIndex(engine: KvEngine, t: DeviceIndexTensor, data: IndexData, offset = 0): Promise<void> {
  const d = checkIndexWrite(t, data, offset, 'cuda');
  if (!(t instanceof CudaIndexTensor) || t.owner !== engine.owner) {
    throw new FAError('E_ARG', 'writeIndex: the index tensor belongs to another CUDA backend (or was not made by uploadIndex)');
  }
  const next = t.mirror.slice();
  next.set(d, offset);
  let done: Promise<void>;
  try {
    done = engine.ctx.upload(t.handle, next);
  } catch (e) {
    throw engine.fail(e);
  }
  t.mirror.set(d, offset);
  await done.catch((e: unknown) => {
    throw engine.fail(e);
  });
}
