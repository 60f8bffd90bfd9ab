/**
 * `fa run` with a KV cache (DESIGN.md's `fa` contract: --k-cache, --v-cache, --block-table,
 * --cache-seqlens, --k-new, --v-new): the engine's forwardWithKVCache on .npy inputs, writing
 * out.npy, lse.npy and the updated k_cache.npy, v_cache.npy (float32).
 */
import { join } from 'node:path';
import { FAError, describeKVCacheProblem, type AttentionBackend, type DType, type HostTensor, type KVCacheOptions, type NpyArray, type Tensor } from '@fa/core';
import { argError } from '../errors.js';
import type { Parsed } from '../args.js';
import { pickBackendFor } from '../engines.js';
import { fmtMs, fmtShape, type Io } from '../io.js';
import { makeDir, readNpyFile, writeNpyFile } from '../npyio.js';

/** Flags of the KV-cache call (they and --k/--v/--dout/--cu-seqlens-* exclude each other). */
export const KV_FLAGS = ['k-cache', 'v-cache', 'block-table', 'cache-seqlens', 'k-new', 'v-new'] as const;

/** Whether a `fa run` invocation is a KV-cache call. */
export function isKVCacheRun(p: Parsed): boolean {
  return KV_FLAGS.some((f) => p.strings.has(f));
}

async function readIndex(path: string, what: string, rank: number, layout: string): Promise<Int32Array> {
  const a = await readNpyFile(path, what);
  if (a.dtype !== 'int32') throw new FAError('E_DTYPE', `${what} ${path}: expected int32, got ${a.dtype}; save it with arr.astype(np.int32)`);
  if (a.shape.length !== rank) throw new FAError('E_SHAPE', `${what} ${path}: expected ${layout}, got shape ${fmtShape(a.shape)}`);
  return a.data as Int32Array;
}

async function toHost(b: AttentionBackend, t: Tensor): Promise<HostTensor> {
  return t.kind === 'host' ? t : b.read(t);
}

export interface KVRunInputs {
  readonly p: Parsed;
  readonly backendName: string;
  readonly dtype: DType;
  readonly outDir: string;
  /** Reads a float .npy in the compute dtype. */
  readonly readFloat: (path: string, what: string) => Promise<HostTensor>;
  readonly toNpy: (t: HostTensor) => NpyArray;
  /** The score options already parsed (causal, window, softcap, scale, alibi). */
  readonly options: Omit<KVCacheOptions, 'cacheSeqlens'>;
  readonly describeOptions: string;
  /** Reads a float32 table (rotary cos/sin) as an f32 host tensor, unrounded. */
  readonly readTable: (path: string, what: string) => Promise<HostTensor>;
}

export async function runKVCache(x: KVRunInputs, io: Io): Promise<number> {
  const { p } = x;
  for (const f of ['k', 'v', 'dout', 'cu-seqlens-q', 'cu-seqlens-k']) {
    if (p.strings.has(f)) throw argError(`--${f} does not go with a KV-cache call (--k-cache …): the keys are the cache's, and the call is forward only`);
  }
  const need = (f: string, v: string) => {
    const s = p.strings.get(f);
    if (s === undefined) throw argError(`a KV-cache call needs --${f} ${v}`);
    return s;
  };
  const qPath = need('q', 'Q.npy');
  const kcPath = need('k-cache', 'KC.npy');
  // MLA's latent cache: one tensor as K and V (V its first DV columns), new rows in --k-new alone
  const vfk = p.strings.get('v-from-k');
  const vFromK = vfk === undefined ? undefined : Number(vfk);
  if (vfk !== undefined && !(Number.isInteger(vFromK) && vFromK! >= 1)) throw argError(`--v-from-k takes V's head dim, a positive integer; got ${vfk}`);
  if (vFromK !== undefined && (p.strings.has('v-cache') || p.strings.has('v-new'))) throw argError('--v-from-k: the latent cache is --k-cache alone (its first DV columns are V); leave out --v-cache and --v-new');
  const vcPath = vFromK === undefined ? need('v-cache', 'VC.npy') : undefined;
  const lensPath = need('cache-seqlens', 'L.npy');
  const knPath = p.strings.get('k-new');
  const vnPath = p.strings.get('v-new');
  if (vFromK === undefined && (knPath === undefined) !== (vnPath === undefined)) throw argError('--k-new and --v-new must be given together');
  const btPath = p.strings.get('block-table');

  const q = await x.readFloat(qPath, '--q');
  const kCache = await x.readFloat(kcPath, '--k-cache');
  const vCache = vcPath === undefined ? kCache : await x.readFloat(vcPath, '--v-cache');
  const cacheSeqlens = await readIndex(lensPath, '--cache-seqlens', 1, 'int32 lengths [B]');
  const blockTable = btPath === undefined ? undefined : await readIndex(btPath, '--block-table', 2, 'an int32 table [B, maxBlocksPerSeq]');
  const kNew = knPath === undefined ? undefined : await x.readFloat(knPath, '--k-new');
  const vNew = vnPath === undefined ? undefined : await x.readFloat(vnPath, '--v-new');
  // FlashAttention-2's extras: cache rows by batch index, left padding, rotary inside the call
  const extra: Partial<KVCacheOptions> = vFromK === undefined ? {} : { vFromK };
  const bi = p.strings.get('cache-batch-idx');
  if (bi !== undefined) extra.cacheBatchIdx = await readIndex(bi, '--cache-batch-idx', 1, 'int32 cache rows [B]');
  const lp = p.strings.get('cache-leftpad');
  if (lp !== undefined) extra.cacheLeftpad = await readIndex(lp, '--cache-leftpad', 1, 'int32 left padding [B]');
  const rc = p.strings.get('rotary-cos'), rs = p.strings.get('rotary-sin');
  if ((rc === undefined) !== (rs === undefined)) throw argError('--rotary-cos and --rotary-sin must be given together');
  if (p.booleans.has('rotary-interleaved') && rc === undefined) throw argError('--rotary-interleaved needs --rotary-cos and --rotary-sin');
  if (rc !== undefined && rs !== undefined) {
    extra.rotaryCos = await x.readTable(rc, '--rotary-cos');
    extra.rotarySin = await x.readTable(rs, '--rotary-sin');
    if (p.booleans.has('rotary-interleaved')) extra.rotaryInterleaved = true;
  }
  const opts: KVCacheOptions = { ...x.options, ...extra, cacheSeqlens, ...(blockTable ? { blockTable } : {}), ...(kNew ? { kNew, ...(vNew ? { vNew } : {}) } : {}) };
  const problem = describeKVCacheProblem(q, kCache, vCache, opts);

  // auto: the first engine whose supportsKVCache() accepts the call (and its dtype), with a note
  // when one above it declined; a named engine that declines it is one E_UNSUPPORTED line
  const { backend, note } = await pickBackendFor(x.backendName, problem);
  if (note !== undefined) io.note?.(note);
  await makeDir(x.outDir);

  const t0 = performance.now();
  // On the engine: caches, q and the new rows uploaded; lengths and table as its index tensors.
  const owned: Parameters<AttentionBackend['disposeTensor']>[0][] = [];
  const up = async (t: HostTensor) => {
    const d = await backend.upload(t);
    owned.push(d);
    return d;
  };
  const qd = await up(q), kd = await up(kCache);
  const vd = vCache === kCache ? kd : await up(vCache);
  const lens = await backend.uploadIndex(cacheSeqlens);
  owned.push(lens);
  const table = blockTable ? await backend.uploadIndex(blockTable, [problem.batch, problem.maxBlocksPerSeq]) : undefined;
  if (table) owned.push(table);
  const r = await backend.forwardWithKVCache(qd, kd, vd, { ...x.options, ...extra, cacheSeqlens: lens, ...(table ? { blockTable: table } : {}), ...(kNew ? { kNew: await up(kNew), ...(vNew ? { vNew: await up(vNew) } : {}) } : {}) });
  owned.push(r.out, r.lse);
  const files: [string, NpyArray][] = [
    ['out.npy', x.toNpy(await toHost(backend, r.out))],
    ['lse.npy', x.toNpy(await toHost(backend, r.lse))],
    ['k_cache.npy', x.toNpy(await toHost(backend, kd))],
    ...(vd === kd ? [] : [['v_cache.npy', x.toNpy(await toHost(backend, vd))] as [string, NpyArray]]),
  ];
  const ms = performance.now() - t0;
  for (const t of owned) backend.disposeTensor(t);
  for (const [name, a] of files) await writeNpyFile(join(x.outDir, name), a);
  const layout = problem.paged ? `paged ${problem.numBlocks}×${problem.blockSize}` : `contiguous capacity ${problem.capacity}`;
  io.out(
    `fa run: ${backend.name} (${backend.device}) q ${fmtShape(q.shape)} KV cache ${fmtShape(kCache.shape)} (${layout}) lens [${[...cacheSeqlens].join(', ')}]${problem.tnew ? ` +${problem.tnew} appended` : ''} ${x.dtype}${x.describeOptions}: forward ${fmtMs(ms)}; wrote ${files.map((f) => f[0]).join(', ')} to ${x.outDir}`,
  );
  return 0;
}
