/// <reference types="@webgpu/types" />
/**
 * The WebGPU engine's KV-cache call (core's kvcache.ts is the contract; wgsl/kvcache.ts and
 * wgsl/kvdecode.ts the kernels, kvplan.ts the plan): what an adapter supports, and the encoding
 * of one call — append, split-KV attention (decode or tiled kernel), combine — in one command
 * buffer, one compute pass each (labelled, so a profiler's timestamps tell them apart).
 *
 * Caches are this backend's device tensors (appended in place on the GPU) or host tensors: those
 * are uploaded to temporaries, the append kernel writes the new rows there for the attention to
 * read, and only after the call succeeded (GPU work, error scopes, readback) does the backend
 * append the rows on the host (appendHostCaches), so a failed call leaves them as they were.
 */
import {
  type ForwardResult,
  type HostTensor,
  type KVCacheOptions,
  type KVCacheProblem,
  type Support,
  type Tensor,
  FAError,
  appendKVCacheHost,
  bytesPerElement,
  kvFirstKey,
  isDeviceIndexTensor,
  isDeviceTensor,
  isHostTensor,
} from '@fa/core';
import { BufferUsage } from './gpu.js';
import type { Scope } from './memory.js';
import { grid1d } from './dispatch.js';
import { writableBytes } from './buffers.js';
import type { Bound } from './external.js';
import { WGIndexTensor } from './tensor.js';
import { KV_APPEND, KV_ATTEND, KV_COMBINE, KV_MAX_D, type KVEncoding, kvAppendWGSL, kvAttendCols, kvAttendWGSL, kvCombineWGSL, KVP_BYTES, packKVParams, type KVParamValues } from './wgsl/kvcache.js';
import { KV_DECODE, kvDecodeKey, kvDecodeWGSL } from './wgsl/kvdecode.js';
import { KV_ROTARY, kvRotaryWGSL, packRotaryParams } from './wgsl/kvrotary.js';
import type { KVPlan } from './kvplan.js';

/** Whether the adapter runs this KV-cache problem. */
export function kvSupport(p: KVCacheProblem, l: GPUSupportedLimits, plan: KVPlan): Support {
  if (Math.max(p.d, p.vDim) > KV_MAX_D) return { ok: false, reason: `KV-cache kernels take head dims up to ${KV_MAX_D}; D = ${p.d}${p.vDim !== p.d ? `, Dv = ${p.vDim}` : ''}` };
  const bpe = bytesPerElement(p.dtype);
  const checks: [string, number][] = [
    ['the K cache', p.cacheShape.reduce((a, b) => a * b, 1) * bpe],
    ['q', p.batch * p.tq * p.h * p.d * bpe],
    ['the split-KV partial states', plan.groups * plan.splits * plan.rows * (p.vDim + 2) * 4],
  ];
  for (const [what, bytes] of checks) {
    if (bytes > l.maxStorageBufferBindingSize) return { ok: false, reason: `${what} needs ${bytes} bytes in one storage binding; this adapter's maxStorageBufferBindingSize is ${l.maxStorageBufferBindingSize}` };
    if (bytes > l.maxBufferSize) return { ok: false, reason: `${what} needs a ${bytes}-byte buffer; this adapter's maxBufferSize is ${l.maxBufferSize}` };
  }
  if (plan.splits > l.maxComputeWorkgroupsPerDimension) return { ok: false, reason: `the key range needs ${plan.splits} splits, above this adapter's maxComputeWorkgroupsPerDimension (${l.maxComputeWorkgroupsPerDimension})` };
  return { ok: true };
}

/** The tiled attend kernel with `cols` output columns per thread (the key of 2, D ≤ 256, as it always was). */
function attendPipeline(env: KVEnv, enc: KVEncoding, cols: number): Promise<GPUComputePipeline> {
  return env.pipeline(cols === 2 ? `kv-attend:${enc}` : `kv-attend:${enc}:${cols}`, () => kvAttendWGSL(enc, cols));
}

/** What the KV-cache call needs from its backend (all on the current device). */
export interface KVEnv {
  readonly name: string;
  device(): GPUDevice;
  createBuffer(scope: Scope, bytes: number, usage: number, label: string): GPUBuffer;
  /** A read-only buffer holding `data`, reused across calls with the same bytes (constants.ts). */
  constant(scope: Scope, data: Uint8Array, usage: number, label: string): GPUBuffer;
  /** The buffer of a tensor input: the backend's own, or an upload of a host tensor. */
  input(scope: Scope, t: Tensor, what: string): Bound;
  pipeline(key: string, code: () => string): Promise<GPUComputePipeline>;
  bind(pipe: GPUComputePipeline, buffers: (GPUBuffer | GPUBufferBinding | undefined)[]): GPUBindGroup;
  readBuffer(scope: Scope, buf: GPUBuffer, dtype: HostTensor['dtype'], shape: readonly number[]): Promise<HostTensor>;
  /** Wraps an output buffer as a device tensor. */
  wrap(buf: GPUBuffer, dtype: HostTensor['dtype'], shape: readonly number[]): Tensor;
  /** The buffer of an index tensor of this backend (checked for epoch and disposal). */
  indexBuffer(t: WGIndexTensor, what: string): GPUBuffer;
}

/** A small storage buffer holding `data` (at least 16 bytes). */
function smallBuffer(env: KVEnv, scope: Scope, data: Int32Array | Float32Array, label: string): GPUBuffer {
  const b = env.createBuffer(scope, Math.max(16, data.byteLength), BufferUsage.STORAGE | BufferUsage.COPY_DST, label);
  if (data.byteLength > 0) {
    const w = writableBytes(data);
    env.device().queue.writeBuffer(b, 0, w.buffer, w.offset, w.size);
  }
  return b;
}

function indexInput(env: KVEnv, scope: Scope, x: unknown, host: Int32Array, what: string): GPUBuffer {
  if (isDeviceIndexTensor(x)) {
    if (!(x instanceof WGIndexTensor)) throw new FAError('E_ARG', `${what} is an index tensor of backend "${x.backend}"; make it with this backend's uploadIndex`);
    return env.indexBuffer(x, what);
  }
  return smallBuffer(env, scope, host, what);
}

/**
 * Encodes and submits one KV-cache call on a validated, supported problem and its plan; returns
 * out and LSE (device tensors when q is one). Runs inside the backend's CallGuard; host caches
 * are left as they are (appendHostCaches, once the guard has seen the call succeed).
 */
export async function encodeKVCache(env: KVEnv, scope: Scope, p: KVCacheProblem, plan: KVPlan, q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions, outs: GPUBuffer[], into?: GPUCommandEncoder): Promise<ForwardResult> {
  const dev = env.device();
  const enc: KVEncoding = p.dtype;
  const hostCaches = isHostTensor(kCache);
  if (hostCaches && p.tnew > 0) {
    if (!isHostTensor(vCache) || !isHostTensor(opts.kNew) || (!p.latent && !isHostTensor(opts.vNew))) {
      throw new FAError('E_ARG', 'with host caches, vCache, kNew and vNew must be host tensors too (or upload all four)');
    }
  } else if (!hostCaches && isHostTensor(vCache)) {
    throw new FAError('E_ARG', 'kCache is a device tensor but vCache is a host tensor: give both the same way');
  }
  const dspec = plan.decode;
  const [pAttend, pCombine, pAppend] = await Promise.all([
    dspec ? env.pipeline(kvDecodeKey(dspec), () => kvDecodeWGSL(dspec)) : attendPipeline(env, enc, kvAttendCols(Math.max(p.d, p.vDim))),
    env.pipeline(`kv-combine:${enc}`, () => kvCombineWGSL(enc)),
    p.tnew > 0 ? env.pipeline(`kv-append:${enc}`, () => kvAppendWGSL(enc)) : Promise.resolve(undefined),
  ]);
  // host caches: uploads of the caller's arrays, which the append below writes (not the arrays)
  const kb = env.input(scope, kCache, 'kCache');
  // (a latent cache is one tensor: one buffer, which the attention reads as K and as V)
  const vb = p.latent ? kb : env.input(scope, vCache, 'vCache');
  const qb = env.input(scope, q, 'q');
  const lens = indexInput(env, scope, opts.cacheSeqlens, p.cacheSeqlens, 'cacheSeqlens');
  // Bindings a call does not read are bound to a buffer it has anyway (fewer buffers per call:
  // their creation is most of a small call's host time): a contiguous cache's table (the rows
  // follow from b and t), absent ALiBi slopes.
  // cacheBatchIdx: a contiguous cache read through its table (one block of `capacity` rows per entry)
  const viaTable = p.paged || p.batchIdx !== undefined;
  const table = p.paged ? indexInput(env, scope, opts.blockTable, p.blockTable, 'blockTable') : p.batchIdx ? smallBuffer(env, scope, p.blockTable, 'cacheBatchIdx') : lens;
  // ALiBi slopes [B·H], then cacheLeftpad [B] as i32 bits (wgsl/kvcache.ts FIRST_KEY)
  const leftpadAt = p.alibi ? p.alibi.length : 0;
  let slopes: Bound = qb;
  if (p.alibi || p.leftpad) {
    const words = new Float32Array(leftpadAt + (p.leftpad?.length ?? 0));
    if (p.alibi) words.set(p.alibi);
    if (p.leftpad) new Int32Array(words.buffer).set(p.leftpad, leftpadAt);
    slopes = smallBuffer(env, scope, words, p.leftpad ? 'ALiBi slopes and cacheLeftpad' : 'ALiBi slopes');
  }
  const sinks = p.sinks ? smallBuffer(env, scope, p.sinks, 'sinks') : qb;
  const base: Omit<KVParamValues, 'n'> = {
    batch: p.batch, tq: p.tq, h: p.h, hkv: p.hkv, d: p.d, tnew: p.tnew, bs: p.blockSize, maxBlocks: p.maxBlocksPerSeq,
    scale: p.scale, softcap: p.softcap, wl: p.windowLeft, wr: p.windowRight, alibi: p.alibi !== undefined,
    rows: plan.rows, chunk: plan.chunk, splits: plan.splits, rowTiles: plan.rowTiles, lanes: plan.lanes ?? 0, paged: viaTable,
    sinks: p.sinks !== undefined, leftpad: p.leftpad !== undefined, leftpadAt,
    dv: p.vDim, vRow: p.hkv * (p.latent ? p.d : p.vDim), vHead: p.latent ? p.d : p.vDim, latent: p.latent,
  };
  // K rows start at multiples of D elements: 16-byte loads need D·bytes a multiple of 16
  const vec = (p.d * bytesPerElement(p.dtype)) % 16 === 0;
  const maxWG = dev.limits.maxComputeWorkgroupsPerDimension;
  const nOut = p.batch * p.tq * p.h * p.vDim;
  const bpe = bytesPerElement(p.dtype);
  // append threads: one per element of kNew, or of vNew where it is the larger
  const nAppend = p.batch * p.tnew * p.hkv * (p.latent ? p.d : Math.max(p.d, p.vDim));
  const words = p.dtype === 'f32' ? nOut : Math.ceil(nOut / 2);
  // the three passes' uniforms in one buffer, one slot each; the same bytes every step of a
  // decode loop, so the buffer comes from the constants cache (constants.ts)
  const slot = Math.ceil(KVP_BYTES / dev.limits.minUniformBufferOffsetAlignment) * dev.limits.minUniformBufferOffsetAlignment;
  const uniformData = new Uint8Array(3 * slot);
  uniformData.set(new Uint8Array(packKVParams({ ...base, n: nAppend, vec: false })), 0);
  uniformData.set(new Uint8Array(packKVParams({ ...base, n: 0, vec: dspec ? false : vec })), slot);
  uniformData.set(new Uint8Array(packKVParams({ ...base, n: words, vec: false })), 2 * slot);
  const uniforms = env.constant(scope, uniformData, BufferUsage.UNIFORM, 'kv params');
  const params = (i: number): GPUBufferBinding => ({ buffer: uniforms, offset: i * slot, size: KVP_BYTES });
  const usage = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;
  const outBuf = env.createBuffer(scope, nOut * bpe, usage, 'out');
  const lseBuf = env.createBuffer(scope, p.batch * p.h * p.tq * 4, usage, 'lse');
  outs.push(outBuf, lseBuf);
  const part = env.createBuffer(scope, plan.groups * plan.splits * plan.rows * (p.vDim + 2) * 4, BufferUsage.STORAGE, 'split-KV partial states');
  const cmd = into ?? dev.createCommandEncoder();
  // 0. rotary inside the call: q and the new keys into rotated copies (wgsl/kvrotary.ts)
  const rotate = p.rotary ? await rotaryPass(env, scope, p, cmd) : undefined;
  const qIn = rotate ? rotate(qb, p.tq, p.h, p.windowLeft >= 0 || p.windowRight >= 0, 'q rotated') : qb;
  // 1. append: every sequence's rows before any sequence attends
  if (pAppend) {
    const n = nAppend;
    const g = new Array<GPUBuffer | GPUBufferBinding | undefined>(7);
    const kn = env.input(scope, opts.kNew!, 'kNew');
    g[KV_APPEND.params] = params(0);
    g[KV_APPEND.kn] = rotate ? rotate(kn, p.tnew, p.hkv, true, 'kNew rotated') : kn;
    // a latent cache: no vNew, and its one buffer bound once read-write (the V binding gets a stand-in)
    g[KV_APPEND.vn] = p.latent ? g[KV_APPEND.kn] : env.input(scope, opts.vNew!, 'vNew');
    g[KV_APPEND.k] = kb; g[KV_APPEND.v] = p.latent ? env.createBuffer(scope, 16, BufferUsage.STORAGE, 'latent V stand-in') : vb;
    g[KV_APPEND.lens] = lens; g[KV_APPEND.table] = table;
    const pass = cmd.beginComputePass({ label: 'kv append' });
    pass.setPipeline(pAppend);
    pass.setBindGroup(0, env.bind(pAppend, g));
    const [x, y] = grid1d(Math.ceil(n / 64), maxWG);
    pass.dispatchWorkgroups(x, y);
    pass.end();
  }
  if (nOut > 0) {
    // 2. split-KV attention
    let g: (GPUBuffer | GPUBufferBinding | undefined)[];
    if (dspec) {
      g = new Array<GPUBuffer | GPUBufferBinding | undefined>(8);
      g[KV_DECODE.params] = params(1);
      g[KV_DECODE.q] = qIn; g[KV_DECODE.k] = kb; g[KV_DECODE.v] = vb; g[KV_DECODE.lens] = lens; g[KV_DECODE.table] = table;
      g[KV_DECODE.slopes] = slopes; g[KV_DECODE.part] = part;
    } else {
      g = new Array<GPUBuffer | GPUBufferBinding | undefined>(9);
      g[KV_ATTEND.params] = params(1);
      g[KV_ATTEND.k4] = kb;
      g[KV_ATTEND.q] = qIn; g[KV_ATTEND.k] = kb; g[KV_ATTEND.v] = vb; g[KV_ATTEND.lens] = lens; g[KV_ATTEND.table] = table;
      g[KV_ATTEND.slopes] = slopes; g[KV_ATTEND.part] = part;
    }
    const pass = cmd.beginComputePass({ label: dspec ? 'kv decode' : 'kv attend' });
    pass.setPipeline(pAttend);
    pass.setBindGroup(0, env.bind(pAttend, g));
    pass.dispatchWorkgroups(plan.splits, Math.min(plan.groups, 65535), Math.ceil(plan.groups / 65535));
    pass.end();
    // 3. combine
    const gc = new Array<GPUBuffer | GPUBufferBinding | undefined>(5);
    gc[KV_COMBINE.params] = params(2);
    gc[KV_COMBINE.part] = part; gc[KV_COMBINE.out] = outBuf; gc[KV_COMBINE.lse] = lseBuf; gc[KV_COMBINE.sinks] = sinks;
    const cpass = cmd.beginComputePass({ label: 'kv combine' });
    cpass.setPipeline(pCombine);
    cpass.setBindGroup(0, env.bind(pCombine, gc));
    const [x, y] = grid1d(Math.ceil(words / 64), maxWG);
    cpass.dispatchWorkgroups(x, y);
    cpass.end();
  }
  if (!into) dev.queue.submit([cmd.finish()]);
  if (isDeviceTensor(q)) return { out: env.wrap(outBuf, p.dtype, p.outShape), lse: env.wrap(lseBuf, 'f32', p.lseShape) };
  return { out: await env.readBuffer(scope, outBuf, p.dtype, p.outShape), lse: await env.readBuffer(scope, lseBuf, 'f32', p.lseShape) };
}

/**
 * The rotary pass of a call (wgsl/kvrotary.ts): returns a function that encodes into `cmd` the
 * rotation of a [B, T, heads, D] input into a new buffer and returns that buffer. Positions come
 * from the host's lengths (cacheSeqlens' mirror, before the append) less cacheLeftpad; the
 * tables are one constant buffer [cos | sin], reused while their bytes repeat (a decode loop).
 */
async function rotaryPass(env: KVEnv, scope: Scope, p: KVCacheProblem, cmd: GPUCommandEncoder): Promise<(x: Bound, t: number, heads: number, perToken: boolean, what: string) => GPUBuffer> {
  const r = p.rotary!;
  const pipe = await env.pipeline(`kv-rotary:${p.dtype}`, () => kvRotaryWGSL(p.dtype));
  const base = Int32Array.from({ length: p.batch }, (_, b) => p.cacheSeqlens[b] - kvFirstKey(p, b));
  const baseBuf = smallBuffer(env, scope, base, 'rotary positions');
  const tables = new Float32Array(r.cos.length + r.sin.length);
  tables.set(r.cos);
  tables.set(r.sin, r.cos.length);
  const tablesBuf = env.constant(scope, new Uint8Array(tables.buffer), BufferUsage.STORAGE, 'rotary tables');
  const bpe = bytesPerElement(p.dtype);
  const maxWG = env.device().limits.maxComputeWorkgroupsPerDimension;
  return (x, t, heads, perToken, what) => {
    const n = p.batch * t * heads * p.d;
    const y = env.createBuffer(scope, n * bpe, BufferUsage.STORAGE, what);
    if (n === 0) return y;
    const ub = env.createBuffer(scope, 32, BufferUsage.UNIFORM | BufferUsage.COPY_DST, 'rotary params');
    env.device().queue.writeBuffer(ub, 0, packRotaryParams({ n, d: p.d, heads, t, half: r.half, interleaved: r.interleaved, perToken, sinAt: r.cos.length }));
    const g = new Array<GPUBuffer | GPUBufferBinding | undefined>(5);
    g[KV_ROTARY.params] = ub; g[KV_ROTARY.x] = x; g[KV_ROTARY.y] = y; g[KV_ROTARY.base] = baseBuf; g[KV_ROTARY.tables] = tablesBuf;
    const pass = cmd.beginComputePass({ label: 'kv rotary' });
    pass.setPipeline(pipe);
    pass.setBindGroup(0, env.bind(pipe, g));
    const [gx, gy] = grid1d(Math.ceil((p.dtype === 'f32' ? n : Math.ceil(n / 2)) / 64), maxWG);
    pass.dispatchWorkgroups(gx, gy);
    pass.end();
    return y;
  };
}

/**
 * After a call on host caches succeeded: the new rows into the caller's arrays (the GPU appended
 * them to its copies only). encodeKVCache checked that all four are host tensors.
 */
export function appendHostCaches(p: KVCacheProblem, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions): void {
  if (p.tnew > 0 && isHostTensor(kCache)) appendKVCacheHost(p, kCache, vCache as HostTensor, opts.kNew as HostTensor, opts.vNew as HostTensor);
}
