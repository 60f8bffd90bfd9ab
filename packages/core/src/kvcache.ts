/**
 * Attention over a KV cache, with FlashAttention's `flash_attn_with_kvcache` semantics in our
 * conventions (DESIGN.md, "KV cache"): the options, the int32 index inputs (per-sequence cache
 * lengths and the block table of a paged cache, as host arrays or as an engine's own index
 * tensors), and describeKVCacheProblem: the one validation path that every engine, the
 * reference and the CLI run before anything is written.
 *
 * The cache is one of
 * - contiguous `[B, capacity, Hkv, D]`: sequence b's token t is row t of batch entry b;
 * - paged `[numBlocks, blockSize, Hkv, D]` with `blockTable` `[B, maxBlocksPerSeq]`: token t of
 *   sequence b is row t % blockSize of block blockTable[b][floor(t / blockSize)].
 * A contiguous cache is described as the paged one with blockSize = capacity, one block per
 * sequence and the table [0, 1, …, B−1], so `kvCacheRow` is the one address rule for both.
 *
 * A call first writes kNew/vNew `[B, Tnew, Hkv, D]` in place at positions len[b] … len[b]+Tnew−1
 * (every sequence's rows before any sequence attends), then queries `[B, Tq, H, D]` attend to
 * the len[b] + Tnew keys of their sequence with every option meaning what it means in the dense
 * call (causal bottom-right over those keys). The call does not change the lengths.
 *
 * Index tensors on an engine (uploadIndex/writeIndex on AttentionBackend) carry a host mirror
 * of their contents that the engine keeps equal to the device copy; validation reads the mirror,
 * so a decode loop never reads the device back and a bad index is refused before any write.
 */
import { check, FAError } from './errors.js';
import type { DType } from './dtype.js';
import type { HostTensor, Tensor } from './tensor.js';
import { describeValue } from './tensor.js';
import { boundWindows, checkTensorLike, resolveScores, sameShape, shapeOnlyTensor, shapeStr, toInt32, type ResolvedScores } from './validate.js';

/**
 * An engine's copy of an int32 index array (cache lengths, a block table), made with
 * backend.uploadIndex and changed only through backend.writeIndex.
 */
export interface DeviceIndexTensor {
  readonly kind: 'index';
  readonly backend: string;
  readonly shape: readonly number[];
  /** The engine's own object (a GPU buffer, say); opaque to user code. */
  readonly handle: unknown;
  /** True after the owning backend disposed it. */
  readonly disposed: boolean;
  /**
   * The contents, kept equal to the device copy by the engine: what validation reads, so that
   * checking a call needs no readback. Read-only for user code (writeIndex changes both).
   */
  readonly mirror: Int32Array;
}

/** Host int32 data: an Int32Array, or an array of integers. */
export type IndexData = Int32Array | readonly number[];

/** An index input: host data (a block table also as rows of integers) or an engine's index tensor. */
export type IndexInput = IndexData | readonly (readonly number[])[] | DeviceIndexTensor;

export interface KVCacheOptions {
  /** Tokens already cached per sequence, int32 [B]. Required. The call does not change it. */
  cacheSeqlens: IndexInput;
  /**
   * Paged cache: int32 [B, maxBlocksPerSeq] (flat row-major, rows of integers, or an index
   * tensor of that shape). Entries past a sequence's last used block are never read (-1 is fine).
   */
  blockTable?: IndexInput;
  /** New keys [B, Tnew, Hkv, D], written into kCache in place at each sequence's length. */
  kNew?: Tensor;
  /** New values, kNew's shape; give both or neither. */
  vNew?: Tensor;
  /** Bottom-right aligned over each sequence's len + Tnew keys: query i sees key j iff j <= i + tk - Tq. */
  causal?: boolean;
  /** [left, right], -1 = unbounded, relative to query i's position i + tk - Tq (as in the dense call). */
  window?: readonly [number, number];
  /** Tanh soft-capping c > 0; leave undefined for none. */
  softcap?: number;
  /** Multiplies q·k; defaults to 1/sqrt(D). */
  scale?: number;
  /** Per-head ALiBi slopes, length H (or B*H): s += -slope * |i + tk - Tq - j|. */
  alibiSlopes?: Float32Array | readonly number[];
  /**
   * Attention sinks (gpt-oss): one f32 logit per query head, length H, added to each row's softmax
   * denominator only (unscaled, no value). LSE includes it; a row that sees no key gets out 0 and
   * LSE = sinks[h] (decode is where gpt-oss needs them).
   */
  sinks?: Float32Array | readonly number[];
  /**
   * Contiguous caches: the cache row (first axis of kCache/vCache) batch entry b reads and appends
   * to, int32 [B] (FlashAttention-2's cache_batch_idx); the cache may then have more rows than B.
   */
  cacheBatchIdx?: Int32Array | readonly number[];
  /**
   * int32 [B] (FlashAttention-2's cache_leftpad): sequence b's keys are cache rows leftpad[b] …
   * len[b] + Tnew − 1; the rows before are never read, and positions (causal, window, ALiBi,
   * rotary) count from leftpad[b]. 0 ≤ leftpad[b] ≤ len[b].
   */
  cacheLeftpad?: Int32Array | readonly number[];
  /**
   * Rotary embedding inside the call (f32 host tensors [maxPos, rotaryDim / 2]): the first
   * rotaryDim dims of each new key are rotated at its position (row − leftpad) before it is
   * written, and those of query i at len − leftpad + i (causal or windowed calls) or len − leftpad
   * (otherwise). GPT-NeoX halves (m, m + rd/2) unless rotaryInterleaved (GPT-J pairs (2m, 2m+1)):
   * x'_a = x_a·cos − x_b·sin, x'_b = x_b·cos + x_a·sin, rounded to the call's dtype.
   */
  rotaryCos?: Tensor;
  rotarySin?: Tensor;
  rotaryInterleaved?: boolean;
  /**
   * A latent cache (DeepSeek MLA decode): V is the first `vFromK` columns of each kCache row. Pass
   * the same tensor as kCache and vCache, and the new rows in kNew only (no vNew).
   */
  vFromK?: number;
  deterministic?: boolean;
}

/** A validated KV-cache call. Engines read this, never the raw options. Plain data (no tensors). */
export interface KVCacheProblem extends ResolvedScores {
  readonly kind: 'kvcache';
  readonly dtype: DType;
  readonly batch: number;
  readonly h: number;
  readonly hkv: number;
  readonly d: number;
  /** V's head dim (vCache, vNew and out rows; q and kCache rows have d). */
  readonly vDim: number;
  /** Queries per sequence. */
  readonly tq: number;
  /** Tokens appended per sequence (0 without kNew). */
  readonly tnew: number;
  /** Whether a block table was given. */
  readonly paged: boolean;
  /** Rows per block (a contiguous cache: its capacity). */
  readonly blockSize: number;
  /** Blocks in the cache tensor (a contiguous cache: B). */
  readonly numBlocks: number;
  /** Columns of the block table (a contiguous cache: 1). */
  readonly maxBlocksPerSeq: number;
  /** Tokens one sequence can hold: maxBlocksPerSeq · blockSize. */
  readonly capacity: number;
  /** Host copy of the lengths, [B], as validated. */
  readonly cacheSeqlens: Int32Array;
  /** Host copy of the table, [B · maxBlocksPerSeq] (a contiguous cache: [0, 1, …, B−1]). */
  readonly blockTable: Int32Array;
  /** Longest key sequence: max over b of len[b] + Tnew. */
  readonly tk: number;
  /** Σ over b of len[b] + Tnew. */
  readonly totalK: number;
  /** [B, Tq, H, D]. */
  readonly qShape: readonly number[];
  /** The cache tensors' shape (kCache's; vCache's is vCacheShape). */
  readonly cacheShape: readonly number[];
  /** vCache's shape: kCache's with head dim vDim. */
  readonly vCacheShape: readonly number[];
  /** [B, Tnew, Hkv, D] (kNew). */
  readonly newShape: readonly number[];
  /** [B, Tnew, Hkv, Dv] (vNew). */
  readonly vNewShape: readonly number[];
  /** out's shape: [B, Tq, H, Dv]. */
  readonly outShape: readonly number[];
  /** [B, H, Tq]. */
  readonly lseShape: readonly number[];
  /** cacheBatchIdx (host copy), or undefined; with it, blockTable[b] is the cache row of entry b. */
  readonly batchIdx: Int32Array | undefined;
  /** cacheLeftpad (host copy), or undefined (0 for every sequence). */
  readonly leftpad: Int32Array | undefined;
  /** Rotary tables inside the call, or undefined. */
  readonly rotary: KVRotary | undefined;
  /** A latent cache (KVCacheOptions.vFromK): vCache is kCache, V its first vDim columns; nothing is appended to V. */
  readonly latent: boolean;
}

/** A KV-cache call's rotary tables: cos/sin [maxPos, half] row-major (half = rotaryDim / 2). */
export interface KVRotary {
  readonly cos: Float32Array;
  readonly sin: Float32Array;
  readonly maxPos: number;
  readonly half: number;
  readonly interleaved: boolean;
}

export function isDeviceIndexTensor(x: unknown): x is DeviceIndexTensor {
  return typeof x === 'object' && x !== null && (x as DeviceIndexTensor).kind === 'index';
}

/** Whether a problem is a KV-cache call's (describeKVCacheProblem) rather than a dense one's. */
export function isKVCacheProblem(p: unknown): p is KVCacheProblem {
  return typeof p === 'object' && p !== null && (p as KVCacheProblem).kind === 'kvcache';
}

/** The end of sequence b's keys (absolute row position): its cached length plus the appended tokens. */
export function kvKeys(p: KVCacheProblem, b: number): number {
  return p.cacheSeqlens[b] + p.tnew;
}

/** The first key sequence b attends to (its cacheLeftpad; 0 without one): key j is position j + kvFirstKey. */
export function kvFirstKey(p: KVCacheProblem, b: number): number {
  return p.leftpad ? p.leftpad[b] : 0;
}

/** Keys sequence b attends to: kvKeys − kvFirstKey. */
export function kvAttended(p: KVCacheProblem, b: number): number {
  return kvKeys(p, b) - kvFirstKey(p, b);
}

/** Row (in units of Hkv·D elements) of sequence b's token t in the cache tensor: the one address rule. */
export function kvCacheRow(p: KVCacheProblem, b: number, t: number): number {
  const bs = p.blockSize;
  const blk = Math.floor(t / bs);
  return p.blockTable[b * p.maxBlocksPerSeq + blk] * bs + (t - blk * bs);
}

/** Index into the [B, H, Tq] LSE of query i of sequence b, head h. */
export function kvLseIndex(p: KVCacheProblem, b: number, h: number, i: number): number {
  return (b * p.h + h) * p.tq + i;
}

// ------------------------------------------------------------------------- index inputs

function checkIndexTensor(t: DeviceIndexTensor, what: string, backend: string | undefined): Int32Array {
  check(!t.disposed, 'E_ARG', () => `${what} is an index tensor that was already disposed`);
  if (backend !== undefined) check(t.backend === backend, 'E_ARG', () => `${what} is an index tensor of backend "${t.backend}"; make it with this backend's uploadIndex (backend "${backend}")`);
  check(t.mirror instanceof Int32Array, 'E_ARG', () => `${what}: index tensor without its int32 mirror`);
  return t.mirror;
}

/** A 1-D index input as int32 values (the mirror of an index tensor). */
function indexVector(x: unknown, what: string, backend: string | undefined): Int32Array {
  if (isDeviceIndexTensor(x)) {
    const m = checkIndexTensor(x, what, backend);
    check(x.shape.length === 1, 'E_SHAPE', () => `${what} must be 1-D [B], got an index tensor of shape ${shapeStr(x.shape)}`);
    return m;
  }
  return toInt32(x, what);
}

/** A 2-D index input [rows, cols]: flat row-major data, rows of integers, or an index tensor. */
function indexMatrix(x: unknown, rows: number, what: string, backend: string | undefined): { data: Int32Array; cols: number } {
  if (isDeviceIndexTensor(x)) {
    const m = checkIndexTensor(x, what, backend);
    check(x.shape.length === 2 && x.shape[0] === rows, 'E_SHAPE', () => `${what} must have shape [B, maxBlocksPerSeq] with B = ${rows}, got an index tensor of shape ${shapeStr(x.shape)}`);
    return { data: m, cols: x.shape[1] };
  }
  if (Array.isArray(x) && x.length > 0 && Array.isArray(x[0])) {
    const rowsIn = x as unknown[][];
    check(rowsIn.length === rows, 'E_SHAPE', () => `${what} must have B = ${rows} rows, got ${rowsIn.length}`);
    const cols = rowsIn[0].length;
    check(rowsIn.every((r) => Array.isArray(r) && r.length === cols), 'E_SHAPE', () => `${what}: every row must have the same number of blocks (${cols})`);
    return { data: toInt32(rowsIn.flat(), what), cols };
  }
  const data = toInt32(x, what);
  if (rows === 0) return { data, cols: 0 };
  check(data.length % rows === 0 && data.length > 0, 'E_SHAPE', () => `${what} has ${data.length} entries, not a multiple of B = ${rows}: give it as [B, maxBlocksPerSeq], row-major`);
  return { data, cols: data.length / rows };
}

/** Checks data for backend.uploadIndex and returns its int32 copy and shape (default [length]). */
export function checkIndexUpload(data: unknown, shape?: readonly number[]): { data: Int32Array; shape: number[] } {
  const d = Int32Array.from(toInt32(data, 'uploadIndex data'));
  const s = shape === undefined ? [d.length] : [...shape];
  check(s.length >= 1 && s.length <= 2 && s.every((x) => Number.isSafeInteger(x) && x >= 0), 'E_SHAPE', () => `uploadIndex: shape must be [n] or [rows, cols] of non-negative integers, got ${JSON.stringify(shape)}`);
  const n = s.reduce((a, b) => a * b, 1);
  check(n === d.length, 'E_SHAPE', () => `uploadIndex: shape ${shapeStr(s)} needs ${n} entries, the data has ${d.length}`);
  return { data: d, shape: s };
}

/**
 * Checks a backend.writeIndex call (the tensor is this backend's and alive; the data are int32
 * and fit at `offset`) and returns the data as an Int32Array.
 */
export function checkIndexWrite(t: unknown, data: unknown, offset: unknown, backend: string): Int32Array {
  check(isDeviceIndexTensor(t), 'E_ARG', () => `writeIndex: the target must be an index tensor made with uploadIndex, got ${describeValue(t)}`);
  checkIndexTensor(t, 'writeIndex target', backend);
  const d = toInt32(data, 'writeIndex data');
  check(Number.isSafeInteger(offset) && (offset as number) >= 0, 'E_ARG', () => `writeIndex: offset must be an integer >= 0, got ${String(offset)}`);
  const o = offset as number;
  check(o + d.length <= t.mirror.length, 'E_SHAPE', () => `writeIndex: ${d.length} entries at offset ${o} do not fit an index tensor of ${t.mirror.length} entries`);
  return d;
}

/** An index tensor of a host engine (cpu, the reference): its "device" copy is its mirror. */
export interface HostIndexTensor extends DeviceIndexTensor {
  disposed: boolean;
}

/** Makes a host engine's index tensor (uploadIndex of the cpu engine and the reference backend). */
export function hostIndexTensor(backend: string, data: unknown, shape?: readonly number[]): HostIndexTensor {
  const c = checkIndexUpload(data, shape);
  return { kind: 'index', backend, shape: c.shape, handle: c.data, disposed: false, mirror: c.data };
}

/** writeIndex of a host engine: checks the call, then writes the mirror. */
export function writeHostIndex(t: DeviceIndexTensor, data: unknown, offset: unknown, backend: string): void {
  const d = checkIndexWrite(t, data, offset ?? 0, backend);
  t.mirror.set(d, (offset as number | undefined) ?? 0);
}

// ------------------------------------------------------------------------- validation

/**
 * Validates a KV-cache call and resolves it into a KVCacheProblem. Every rule is checked here,
 * before an engine writes anything: shapes (E_SHAPE), dtypes (E_DTYPE), and the index values
 * (E_ARG): a negative length, a length or append past what a sequence's blocks hold, a block
 * index outside the cache in a block the call reads or writes, two sequences appending to the
 * same cache row. `backend` (an engine's name) also requires index tensors to be that engine's.
 */
export function describeKVCacheProblem(qIn: unknown, kCacheIn: unknown, vCacheIn: unknown, opts: KVCacheOptions, backend?: string): KVCacheProblem {
  check(typeof opts === 'object' && opts !== null, 'E_ARG', 'KV-cache options must be an object with at least cacheSeqlens');
  const o = opts as KVCacheOptions & { cuSeqlensQ?: unknown; cuSeqlensK?: unknown; dropout?: unknown };
  check(o.dropout === undefined, 'E_ARG', 'dropout does not apply to a KV-cache call (inference: it has no backward); leave it out');
  check(o.cuSeqlensQ === undefined && o.cuSeqlensK === undefined, 'E_ARG', 'cuSeqlensQ/cuSeqlensK do not apply to a KV-cache call: queries are [B, Tq, H, D] and each sequence attends to cacheSeqlens[b] + Tnew keys');
  check(o.cacheSeqlens !== undefined, 'E_ARG', 'cacheSeqlens is required: the number of tokens already in the cache, per sequence (int32 [B])');
  const q = checkTensorLike(qIn, 'q');
  const kc = checkTensorLike(kCacheIn, 'kCache');
  const vc = checkTensorLike(vCacheIn, 'vCache');
  check(q.dtype === kc.dtype && kc.dtype === vc.dtype, 'E_DTYPE', () => `q, kCache, vCache must share one dtype; got ${q.dtype}, ${kc.dtype}, ${vc.dtype}`);
  check(q.shape.length === 4, 'E_SHAPE', () => `q must have rank 4, layout [B, Tq, H, D]; got shape ${shapeStr(q.shape)}`);
  check(vc.shape.length === kc.shape.length && sameShape(kc.shape.slice(0, -1), vc.shape.slice(0, -1)), 'E_SHAPE', () => `kCache and vCache must have the same shape but for the head dim (v's may be its own); got ${shapeStr(kc.shape)} and ${shapeStr(vc.shape)}`);
  const paged = o.blockTable !== undefined;
  const layout = paged ? '[numBlocks, blockSize, Hkv, D] (paged)' : '[B, capacity, Hkv, D]';
  check(kc.shape.length === 4, 'E_SHAPE', () => `kCache must have rank 4, layout ${layout}; got shape ${shapeStr(kc.shape)}`);
  const [batch, tq, h, d] = q.shape;
  const [nBlk, rows, hkv, dk] = kc.shape;
  check(d >= 1, 'E_SHAPE', () => `head dim D must be at least 1; q has shape ${shapeStr(q.shape)}`);
  check(h >= 1 && hkv >= 1, 'E_SHAPE', () => `q and the cache need at least one head; got H=${h}, Hkv=${hkv}`);
  check(dk === d, 'E_SHAPE', () => `q and the cache must have the same head dim D; got ${d} and ${dk}`);
  const latent = o.vFromK !== undefined;
  if (latent) {
    check(Number.isInteger(o.vFromK) && o.vFromK! >= 1 && o.vFromK! <= d, 'E_ARG', () => `vFromK must be an integer in [1, D = ${d}] (V's columns of each latent row), got ${String(o.vFromK)}`);
    check(vCacheIn === kCacheIn, 'E_ARG', 'vFromK: a latent cache is one tensor, passed as both kCache and vCache');
    check(o.vNew === undefined, 'E_ARG', 'vFromK: the new latent rows come in kNew alone; leave vNew out');
    check(o.rotaryCos === undefined, 'E_ARG', "vFromK with rotary tables: the call's rotary rotates the first dims of each row, which a latent cache shares with V; rotate the rope part before the call");
  }
  const vDim = latent ? o.vFromK! : vc.shape[3];
  check(vDim >= 1, 'E_SHAPE', () => `vCache's head dim must be at least 1; vCache has shape ${shapeStr(vc.shape)}`);
  check(h % hkv === 0, 'E_SHAPE', () => `H (${h}) must be a multiple of Hkv (${hkv}) for MQA/GQA`);

  let tnew = 0;
  if (!latent) check((o.kNew === undefined) === (o.vNew === undefined), 'E_ARG', 'give both kNew and vNew to append, or neither');
  const newShape = [batch, 0, hkv, d];
  const vNewShape = [batch, 0, hkv, vDim];
  if (o.kNew !== undefined) {
    const kn = checkTensorLike(o.kNew, 'kNew');
    const vn = latent ? kn : checkTensorLike(o.vNew, 'vNew');
    check(kn.dtype === q.dtype && vn.dtype === q.dtype, 'E_DTYPE', () => `kNew and vNew must have the cache's dtype ${q.dtype}; got ${kn.dtype} and ${vn.dtype}`);
    for (const [name, t, dd] of [['kNew', kn, d], ['vNew', vn, latent ? d : vDim]] as const) {
      check(t.shape.length === 4 && t.shape[0] === batch && t.shape[2] === hkv && t.shape[3] === dd, 'E_SHAPE', () => `${name} must have shape [B, Tnew, Hkv, ${name === 'kNew' ? 'D' : "v's head dim"}] = [${batch}, Tnew, ${hkv}, ${dd}]; got ${shapeStr(t.shape)}`);
    }
    check(kn.shape[1] === vn.shape[1], 'E_SHAPE', () => `kNew and vNew must append the same number of tokens; got ${shapeStr(kn.shape)} and ${shapeStr(vn.shape)}`);
    tnew = kn.shape[1];
    newShape[1] = tnew;
    vNewShape[1] = tnew;
  }

  const lens = indexVector(o.cacheSeqlens, 'cacheSeqlens', backend);
  check(lens.length === batch, 'E_SHAPE', () => `cacheSeqlens must have B = ${batch} entries (one per sequence of q), got ${lens.length}`);
  let blockSize: number, numBlocks: number, maxBlocks: number, table: Int32Array;
  if (paged) {
    const m = indexMatrix(o.blockTable, batch, 'blockTable', backend);
    check(rows >= 1, 'E_SHAPE', () => `a paged cache needs blockSize >= 1; kCache has shape ${shapeStr(kc.shape)}`);
    blockSize = rows;
    numBlocks = nBlk;
    maxBlocks = m.cols;
    table = Int32Array.from(m.data);
  } else if (o.cacheBatchIdx !== undefined) {
    const idx = toInt32(o.cacheBatchIdx, 'cacheBatchIdx');
    check(idx.length === batch, 'E_SHAPE', () => `cacheBatchIdx must have B = ${batch} entries, got ${idx.length}`);
    for (let b = 0; b < batch; b++) check(idx[b] >= 0 && idx[b] < nBlk, 'E_ARG', () => `cacheBatchIdx[${b}] = ${idx[b]} is outside the cache's ${nBlk} rows`);
    blockSize = rows;
    numBlocks = nBlk;
    maxBlocks = 1;
    table = Int32Array.from(idx);
  } else {
    check(nBlk === batch, 'E_SHAPE', () => `a contiguous cache [B, capacity, Hkv, D] needs B = ${batch} (q's batch), got shape ${shapeStr(kc.shape)}; for a paged cache pass blockTable (or cacheBatchIdx to pick the rows)`);
    blockSize = rows;
    numBlocks = batch;
    maxBlocks = 1;
    table = new Int32Array(batch);
    for (let b = 0; b < batch; b++) table[b] = b;
  }
  check(!(paged && o.cacheBatchIdx !== undefined), 'E_ARG', 'cacheBatchIdx applies to contiguous caches; a paged cache picks its blocks with blockTable');
  let leftpad: Int32Array | undefined;
  if (o.cacheLeftpad !== undefined) {
    leftpad = Int32Array.from(toInt32(o.cacheLeftpad, 'cacheLeftpad'));
    check(leftpad.length === batch, 'E_SHAPE', () => `cacheLeftpad must have B = ${batch} entries, got ${leftpad!.length}`);
  }
  const capacity = maxBlocks * blockSize;
  const holds = paged ? `its ${maxBlocks} blocks of ${blockSize} rows hold ${capacity}` : `the cache holds ${capacity} per sequence`;
  let tk = 0;
  let totalK = 0;
  for (let b = 0; b < batch; b++) {
    const len = lens[b];
    check(len >= 0, 'E_ARG', () => `cacheSeqlens[${b}] is ${len}; lengths must be >= 0`);
    if (tnew === 0) check(len <= capacity, 'E_ARG', () => `cacheSeqlens[${b}] = ${len} tokens, but ${holds}`);
    else check(len + tnew <= capacity, 'E_ARG', () => `appending ${tnew} tokens to sequence ${b} at length ${len} would write past its capacity: ${holds}`);
    const lp = leftpad ? leftpad[b] : 0;
    if (leftpad) check(lp >= 0 && lp <= len, 'E_ARG', () => `cacheLeftpad[${b}] = ${lp} must be in [0, cacheSeqlens[${b}] = ${len}]`);
    const n = len + tnew;
    tk = Math.max(tk, n - lp);
    totalK += n - lp;
    if (paged) {
      for (let j = 0, nb = Math.ceil(n / blockSize); j < nb; j++) {
        const blk = table[b * maxBlocks + j];
        check(blk >= 0 && blk < numBlocks, 'E_ARG', () => `blockTable[${b}][${j}] = ${blk} is outside the cache's ${numBlocks} blocks (sequence ${b} uses blocks 0..${nb - 1} of its row for ${n} tokens)`);
      }
    }
  }
  const cached = Int32Array.from(lens);
  const sc = boundWindows(resolveScores(o, batch, h, d), tq, tk);
  const rotary = resolveKVRotary(o, d, sc.windowLeft >= 0 || sc.windowRight >= 0, batch, tq, tnew, cached, leftpad);
  const p: KVCacheProblem = {
    kind: 'kvcache',
    dtype: q.dtype,
    batch, h, hkv, d, vDim, tq, tnew, paged, blockSize, numBlocks,
    maxBlocksPerSeq: maxBlocks,
    capacity,
    cacheSeqlens: cached,
    blockTable: table,
    tk, totalK,
    ...sc,
    qShape: [...q.shape],
    cacheShape: [...kc.shape],
    vCacheShape: latent ? [...kc.shape.slice(0, 3), vDim] : [...vc.shape],
    newShape,
    vNewShape,
    outShape: [batch, tq, h, vDim],
    lseShape: [batch, h, tq],
    batchIdx: o.cacheBatchIdx !== undefined && !paged ? Int32Array.from(table) : undefined,
    leftpad,
    rotary,
    latent,
  };
  if ((paged || p.batchIdx) && tnew > 0) checkDistinctWrites(p);
  return p;
}

/** The rotary tables of a call, validated against the positions it rotates (DESIGN.md). */
function resolveKVRotary(o: KVCacheOptions, d: number, windowed: boolean, batch: number, tq: number, tnew: number, lens: Int32Array, leftpad: Int32Array | undefined): KVRotary | undefined {
  check((o.rotaryCos === undefined) === (o.rotarySin === undefined), 'E_ARG', 'give both rotaryCos and rotarySin, or neither');
  check(o.rotaryInterleaved === undefined || typeof o.rotaryInterleaved === 'boolean', 'E_ARG', 'rotaryInterleaved must be true or false');
  if (o.rotaryCos === undefined) return undefined;
  const cos = checkTensorLike(o.rotaryCos, 'rotaryCos');
  const sin = checkTensorLike(o.rotarySin, 'rotarySin');
  for (const [name, t] of [['rotaryCos', cos], ['rotarySin', sin]] as const) {
    check(t.kind === 'host', 'E_ARG', () => `${name} must be a host tensor (f32 [maxPos, rotaryDim / 2])`);
    check(t.dtype === 'f32', 'E_DTYPE', () => `${name} must be f32, got ${t.dtype}`);
    check(t.shape.length === 2 && t.shape[0] >= 1 && t.shape[1] >= 1, 'E_SHAPE', () => `${name} must have shape [maxPos, rotaryDim / 2], got ${shapeStr(t.shape)}`);
  }
  check(sameShape(cos.shape, sin.shape), 'E_SHAPE', () => `rotaryCos and rotarySin must have the same shape; got ${shapeStr(cos.shape)} and ${shapeStr(sin.shape)}`);
  const [maxPos, half] = cos.shape;
  check(2 * half <= d, 'E_ARG', () => `rotaryDim = 2·${half} = ${2 * half} exceeds the head dim D = ${d}`);
  for (let b = 0; b < batch; b++) {
    const base = lens[b] - (leftpad ? leftpad[b] : 0);
    const last = Math.max(tnew > 0 ? base + tnew - 1 : -1, windowed || o.causal ? base + tq - 1 : base);
    check(last < maxPos, 'E_ARG', () => `sequence ${b} rotates position ${last}, but the rotary tables have ${maxPos} rows`);
  }
  return { cos: (cos as HostTensor).data as Float32Array, sin: (sin as HostTensor).data as Float32Array, maxPos, half, interleaved: o.rotaryInterleaved === true };
}

/**
 * The KV-cache problem of q and caches of these shapes and dtype (kNew/vNew of `newShape`, if
 * given), without their data: to ask engines (supportsKVCache(), resolveBackendFor()) about a
 * call before allocating its caches. Lengths and table are host data, as in the call.
 */
export function describeKVCacheProblemShapes(
  qShape: readonly number[],
  cacheShape: readonly number[],
  dtype: DType,
  opts: Omit<KVCacheOptions, 'kNew' | 'vNew'> & { readonly newShape?: readonly number[]; readonly vCacheShape?: readonly number[] },
): KVCacheProblem {
  const shell = (shape: readonly number[]) => shapeOnlyTensor(shape, dtype);
  const { newShape, vCacheShape = cacheShape, ...rest } = opts;
  const vNewShape = newShape ? [...newShape.slice(0, -1), vCacheShape[vCacheShape.length - 1]] : undefined;
  return describeKVCacheProblem(shell(qShape), shell(cacheShape), shell(vCacheShape), { ...rest, ...(newShape ? { kNew: shell(newShape), vNew: shell(vNewShape!) } : {}) });
}

/** Two sequences appending into the same cache row would race; refuse that (E_ARG). */
function checkDistinctWrites(p: KVCacheProblem): void {
  const owner = new Map<number, number>();
  for (let b = 0; b < p.batch; b++) {
    const len = p.cacheSeqlens[b];
    for (let t = len; t < len + p.tnew; t++) {
      const row = kvCacheRow(p, b, t);
      const prev = owner.get(row);
      if (prev !== undefined) {
        throw new FAError('E_ARG', `sequences ${prev} and ${b} would both append to cache row ${row % p.blockSize} of block ${Math.floor(row / p.blockSize)}: their block tables share a block they write`);
      }
      owner.set(row, b);
    }
  }
}
