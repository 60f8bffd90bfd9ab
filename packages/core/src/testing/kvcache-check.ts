/**
 * Running KV-cache cases against a backend: checkKVCacheCase (one case: out and LSE against the
 * float64 reference over the gathered cache, under the dense tolerance policy, and the caches
 * read back after the in-place append, bit for bit), checkKVCacheDecodeLoop (appends through
 * several calls with index tensors advanced by writeIndex), and checkKVCacheBadInputs (each bad
 * cache argument a one-line FAError with the right code, the caches unchanged when read back).
 */
import type { AttentionBackend } from '../backend.js';
import type { DType } from '../dtype.js';
import { keyRange } from '../mask.js';
import { naiveForward } from '../naive.js';
import { appendKVCacheHost, kvCacheAsVarlen, referenceKVCache } from '../kvcache-host.js';
import { describeKVCacheProblem, kvAttended, kvCacheRow, kvKeys, type DeviceIndexTensor, type IndexInput, type KVCacheOptions, type KVCacheProblem } from '../kvcache.js';
import { allocHost, type HostData, type HostTensor, type Tensor } from '../tensor.js';
import type { CaseResult, CheckOptions } from './check.js';
import { kvCacheCaseInputs, makeKVCacheCase, type KVCacheCase, type KVCacheInputs } from './kvcache-cases.js';
import { compareLse, compareTensor, formatMetric, type TensorMetric } from './tolerance.js';
import { createRng, hostTensor, randomValues, tensorValues } from './random.js';
import { describeError, now, refusalProblem, type BadCall } from './util.js';

/** A copy of a host tensor (its data in fresh memory of the same kind). */
export function cloneHost(t: HostTensor): HostTensor {
  const data = allocHost(t.dtype, t.data.length) as HostData;
  data.set(t.data as never);
  return { kind: 'host', dtype: t.dtype, shape: [...t.shape], data };
}

/** The raw bits of host data, for bit-exact comparison (NaN payloads included). */
function bits(d: HostData): Uint32Array | Uint16Array {
  return d instanceof Float32Array ? new Uint32Array(d.buffer, d.byteOffset, d.length) : d;
}

/** Where a cache element lies, in words: block/row (or sequence/position) and head and d. */
function cacheWhere(p: KVCacheProblem, idx: number, D = p.d): string {
  const d = idx % D;
  const g = Math.floor(idx / D) % p.hkv;
  const row = Math.floor(idx / (D * p.hkv));
  const blk = Math.floor(row / p.blockSize);
  const r = row % p.blockSize;
  return p.paged ? `block ${blk} row ${r}, hkv ${g}, d ${d}` : `sequence ${blk} position ${r}, hkv ${g}, d ${d}`;
}

/**
 * Compares a cache read back from the engine with the expected one bit for bit; says where the
 * first difference is and whether that row was one the call had to write.
 */
export function compareCache(p: KVCacheProblem, what: string, got: HostTensor, want: HostTensor): string | undefined {
  if (got.dtype !== want.dtype || got.data.length !== want.data.length) return `${what} read back with dtype ${got.dtype} and ${got.data.length} elements, expected ${want.dtype} and ${want.data.length}`;
  const a = bits(got.data);
  const b = bits(want.data);
  const D = want.shape[want.shape.length - 1]; // (vCache's head dim may be its own)
  for (let i = 0; i < a.length; i++) {
    if (a[i] === b[i]) continue;
    const row = Math.floor(i / (p.hkv * D));
    let written = false;
    for (let s = 0; s < p.batch && !written; s++) for (let t = p.cacheSeqlens[s]; t < kvKeys(p, s); t++) if (kvCacheRow(p, s, t) === row) written = true;
    const gv = tensorValues({ ...got, data: got.data.subarray(i, i + 1) as HostData, shape: [1] })[0];
    const wv = tensorValues({ ...want, data: want.data.subarray(i, i + 1) as HostData, shape: [1] })[0];
    return `${what} at ${cacheWhere(p, i, D)} is ${gv}, expected ${wv} (${written ? 'a row the append had to write' : 'a row the call must leave unchanged'})`;
  }
  return undefined;
}

/** Rows that see no key must have out exactly 0. */
function emptyRowsZero(p: KVCacheProblem, out: ArrayLike<number>): string | undefined {
  for (let b = 0; b < p.batch; b++) {
    const tk = kvAttended(p, b);
    for (let i = 0; i < p.tq; i++) {
      const [lo, hi] = keyRange(p, i, p.tq, tk);
      if (lo <= hi) continue;
      for (let h = 0; h < p.h; h++) {
        const o = ((b * p.tq + i) * p.h + h) * p.vDim;
        for (let d = 0; d < p.vDim; d++) if (out[o + d] !== 0) return `out[b=${b}, i=${i}, h=${h}, d=${d}] = ${out[o + d]}, but that row sees no key: it must be exactly 0`;
      }
    }
  }
  return undefined;
}

interface Owned {
  readonly tensors: (Tensor | DeviceIndexTensor)[];
}

async function prepareCall(backend: AttentionBackend, x: KVCacheInputs, upload: boolean, deviceIndex: boolean, owned: Owned): Promise<{ q: Tensor; kCache: Tensor; vCache: Tensor; opts: KVCacheOptions }> {
  const up = async (t: HostTensor): Promise<Tensor> => {
    if (!upload) return t;
    const d = await backend.upload(t);
    owned.tensors.push(d);
    return d;
  };
  const idx = async (a: Int32Array, shape: number[]): Promise<IndexInput> => {
    if (!deviceIndex) return a;
    const t = await backend.uploadIndex(a, shape);
    owned.tensors.push(t);
    return t;
  };
  const p = x.problem;
  const kCache = await up(cloneHost(x.kCache));
  // (a latent cache is one tensor, given as both)
  const vCache = p.latent ? kCache : await up(cloneHost(x.vCache));
  const opts: KVCacheOptions = {
    ...x.options,
    cacheSeqlens: await idx(x.cacheSeqlens, [p.batch]),
    ...(x.blockTable ? { blockTable: await idx(x.blockTable, [p.batch, x.maxBlocksPerSeq]) } : {}),
    ...(x.kNew ? { kNew: await up(x.kNew), ...(x.vNew ? { vNew: await up(x.vNew) } : {}) } : {}),
  };
  return { q: await up(x.q), kCache, vCache, opts };
}

function release(backend: AttentionBackend, owned: Owned): void {
  for (const t of owned.tensors) {
    try {
      backend.disposeTensor(t);
    } catch {
      /* a failing dispose must not hide the result */
    }
  }
}

/** out/LSE metrics of an engine's result against the reference over the gathered cache. */
function compareResult(x: KVCacheInputs, out: Float64Array, lse: Float64Array, metrics: TensorMetric[], problems: string[]): void {
  const p = x.problem;
  const all: KVCacheOptions = { ...x.options, cacheSeqlens: x.cacheSeqlens, ...(x.blockTable ? { blockTable: x.blockTable } : {}), ...(x.kNew ? { kNew: x.kNew, vNew: x.vNew } : {}) };
  const ref = referenceKVCache(x.q, x.kCache, x.vCache, all, { magnitudes: true });
  let naive: Float32Array | undefined;
  if (p.dtype !== 'f32') {
    const e = kvCacheAsVarlen(p, x.q, x.kCache, x.vCache, x.kNew, x.vNew);
    naive = naiveForward(e.q, e.k, e.v, e.options).out;
  }
  metrics.push(compareTensor({ tensor: 'out', dtype: p.dtype, got: out, ref: ref.out, mag: ref.mag!.out, naive }));
  metrics.push(compareLse(p.dtype, lse, ref.lse, ref.mag!.lse));
  const z = emptyRowsZero(p, out);
  if (z) problems.push(z);
}

function resultOf(name: string, seed: number | undefined, metrics: TensorMetric[], problems: string[], t0: number): CaseResult {
  const pass = problems.length === 0 && metrics.every((m) => m.pass);
  const message = pass
    ? `ok: ${metrics.map((m) => `${m.tensor} ${m.err.toExponential(1)}/${m.bound.toExponential(1)}`).join(', ')}${metrics.length ? ', ' : ''}caches as expected`
    : `FAIL ${name}${seed !== undefined ? ` (seed ${seed})` : ''}\n  ${[...problems, ...metrics.filter((m) => !m.pass).map(formatMetric)].join('\n  ')}`;
  return { name, pass, metrics, message, ms: now() - t0 };
}

/**
 * Runs one KV-cache case: supportsKVCache first (a refusal is a skip with the engine's reason),
 * then forwardWithKVCache on copies of the case's caches (uploaded with `upload`), out and LSE
 * against the reference, and both caches read back and compared bit for bit with the expected
 * caches (the originals with kNew/vNew at each sequence's length, every other row unchanged).
 */
export async function checkKVCacheCase(backend: AttentionBackend, c: KVCacheCase, opts: CheckOptions = {}): Promise<CaseResult> {
  const t0 = now();
  const metrics: TensorMetric[] = [];
  const problems: string[] = [];
  let x: KVCacheInputs;
  try {
    x = kvCacheCaseInputs(c);
  } catch (e) {
    return resultOf(c.name, c.spec.seed, metrics, [`the case itself is invalid: ${describeError(e)}`], t0);
  }
  const p = x.problem;
  let sup;
  try {
    sup = backend.supportsKVCache(p);
  } catch (e) {
    return resultOf(c.name, c.spec.seed, metrics, [`supportsKVCache() threw ${describeError(e)}`], t0);
  }
  if (!sup.ok) {
    const reason = typeof sup.reason === 'string' ? sup.reason.trim() : '';
    if (!reason) return resultOf(c.name, c.spec.seed, metrics, ['supportsKVCache() refused the problem without giving a reason'], t0);
    return { name: c.name, pass: true, skipped: true, reason, metrics: [], message: `skipped: ${reason}`, ms: now() - t0 };
  }
  const owned: Owned = { tensors: [] };
  let stage = 'upload';
  try {
    const call = await prepareCall(backend, x, opts.upload === true, c.spec.deviceIndex === true, owned);
    stage = 'forwardWithKVCache';
    const r = await backend.forwardWithKVCache(call.q, call.kCache, call.vCache, call.opts);
    owned.tensors.push(r.out, r.lse);
    stage = 'read';
    const outH = await backend.read(r.out);
    const lseH = await backend.read(r.lse);
    if (outH.dtype !== p.dtype || outH.data.length !== p.batch * p.tq * p.h * p.vDim || outH.shape.join() !== p.outShape.join()) return resultOf(c.name, c.spec.seed, metrics, [`out has dtype ${outH.dtype} and shape [${outH.shape.join(', ')}], expected ${p.dtype} [${p.outShape.join(', ')}]`], t0);
    if (lseH.dtype !== 'f32' || lseH.shape.join() !== p.lseShape.join()) return resultOf(c.name, c.spec.seed, metrics, [`lse has dtype ${lseH.dtype} and shape [${lseH.shape.join(', ')}], expected f32 [${p.lseShape.join(', ')}]`], t0);
    stage = 'reference';
    compareResult(x, tensorValues(outH), tensorValues(lseH), metrics, problems);
    stage = 'cache readback';
    const wantK = cloneHost(x.kCache);
    const wantV = p.latent ? wantK : cloneHost(x.vCache);
    appendKVCacheHost(p, wantK, wantV, x.kNew, x.vNew); // (it writes the keys rotated when the call has rotary tables)
    const caches = p.latent ? [['latent cache', call.kCache, wantK]] as const : [['kCache', call.kCache, wantK], ['vCache', call.vCache, wantV]] as const;
    for (const [nm, t, want] of caches) {
      const bad = compareCache(p, nm, await backend.read(t), want);
      if (bad) problems.push(bad);
    }
    return resultOf(c.name, c.spec.seed, metrics, problems, t0);
  } catch (e) {
    return resultOf(c.name, c.spec.seed, metrics, [...problems, `${stage} threw ${describeError(e)}`], t0);
  } finally {
    release(backend, owned);
  }
}

/** The dtype the extra checks use: f32 when the backend has it, else its first. */
function extraDtype(backend: AttentionBackend): DType {
  return backend.dtypes.includes('f32') ? 'f32' : backend.dtypes[0] ?? 'f32';
}

export const KV_DECODE_LOOP_CHECK_NAME = 'extra: KV-cache decode loop (index tensors advanced with writeIndex between calls, cache read back at the end)';

/**
 * A decode loop as a model runs it: lengths and table as index tensors, one token appended per
 * step, the lengths advanced in place with writeIndex (no readback), five steps; each step's out
 * and LSE against the reference, and the caches at the end bit for bit.
 */
export async function checkKVCacheDecodeLoop(backend: AttentionBackend, opts: CheckOptions = {}): Promise<CaseResult> {
  const t0 = now();
  const name = KV_DECODE_LOOP_CHECK_NAME;
  const dtype = extraDtype(backend);
  const c = makeKVCacheCase({ dtype, seqlens: [13, 0, 6], tnew: 1, blockSize: 4, spare: 5, fullTable: true, d: 16, h: 4, hkv: 2, causal: true, seed: 21, deviceIndex: true });
  const x0 = kvCacheCaseInputs(c);
  const sup = backend.supportsKVCache(x0.problem);
  if (!sup.ok) return { name, pass: true, skipped: true, reason: sup.reason, metrics: [], message: `skipped: ${sup.reason}`, ms: now() - t0 };
  const metrics: TensorMetric[] = [];
  const problems: string[] = [];
  const owned: Owned = { tensors: [] };
  const steps = 5;
  const rng = createRng(77);
  try {
    const call = await prepareCall(backend, x0, opts.upload === true, true, owned);
    let lens = Int32Array.from(x0.cacheSeqlens);
    let hostK = cloneHost(x0.kCache);
    let hostV = cloneHost(x0.vCache);
    for (let s = 0; s < steps; s++) {
      const p0 = x0.problem;
      const q = hostTensor(randomValues(rng, p0.batch * p0.h * p0.d), [p0.batch, 1, p0.h, p0.d], dtype);
      const kNew = hostTensor(randomValues(rng, p0.batch * p0.hkv * p0.d), [p0.batch, 1, p0.hkv, p0.d], dtype);
      const vNew = hostTensor(randomValues(rng, p0.batch * p0.hkv * p0.d), [p0.batch, 1, p0.hkv, p0.d], dtype);
      const problem = describeKVCacheProblem(q, hostK, hostV, { ...x0.options, cacheSeqlens: lens, blockTable: x0.blockTable, kNew, vNew });
      const x: KVCacheInputs = { ...x0, q, kNew, vNew, kCache: hostK, vCache: hostV, cacheSeqlens: lens, problem };
      const up = async (t: HostTensor) => {
        if (!opts.upload) return t;
        const d = await backend.upload(t);
        owned.tensors.push(d);
        return d;
      };
      const r = await backend.forwardWithKVCache(await up(q), call.kCache, call.vCache, { ...call.opts, kNew: await up(kNew), vNew: await up(vNew) });
      owned.tensors.push(r.out, r.lse);
      const outH = await backend.read(r.out);
      const lseH = await backend.read(r.lse);
      const before = metrics.length;
      compareResult(x, tensorValues(outH), tensorValues(lseH), metrics, problems);
      for (const m of metrics.slice(before)) if (!m.pass) problems.push(`step ${s}: ${formatMetric(m)}`);
      hostK = cloneHost(hostK);
      hostV = cloneHost(hostV);
      appendKVCacheHost(x.problem, hostK, hostV, kNew, vNew);
      lens = lens.map((l) => l + 1);
      await backend.writeIndex(call.opts.cacheSeqlens as DeviceIndexTensor, lens);
    }
    const pEnd = { ...x0.problem, cacheSeqlens: lens };
    for (const [nm, t, want] of [['kCache', call.kCache, hostK], ['vCache', call.vCache, hostV]] as const) {
      const bad = compareCache(pEnd, nm, await backend.read(t), want);
      if (bad) problems.push(`after ${steps} steps: ${bad}`);
    }
  } catch (e) {
    problems.push(`a call threw ${describeError(e)}`);
  } finally {
    release(backend, owned);
  }
  const pass = problems.length === 0 && metrics.every((m) => m.pass);
  return { name, pass, metrics: [], message: pass ? `ok: ${steps} decode steps match the reference; the caches hold every appended token` : `FAIL ${name}\n  ${problems.slice(0, 8).join('\n  ')}`, ms: now() - t0 };
}

export const KV_BAD_INPUTS_CHECK_NAME = 'extra: bad KV-cache arguments each throw a one-line FAError with the right code and leave the caches unchanged';

/**
 * Bad cache arguments: each must be refused with a one-line FAError of the expected code, and
 * afterwards both caches (read back) and the index tensors must be exactly as before; then a
 * valid call must still pass.
 */
export async function checkKVCacheBadInputs(backend: AttentionBackend, opts: CheckOptions = {}): Promise<CaseResult> {
  const t0 = now();
  const name = KV_BAD_INPUTS_CHECK_NAME;
  const dtype = extraDtype(backend);
  const other: DType = dtype === 'f32' ? 'f16' : 'f32';
  // B = 2, paged (blocks of 4, 3 per sequence, 6 in the cache), lengths [5, 2], one token appended.
  const c = makeKVCacheCase({ dtype, seqlens: [5, 2], tnew: 1, blockSize: 4, spare: 1, d: 8, h: 2, hkv: 1, seed: 31 });
  const x = kvCacheCaseInputs(c);
  const p = x.problem;
  const sup = backend.supportsKVCache(p);
  if (!sup.ok) return { name, pass: true, skipped: true, reason: sup.reason, metrics: [], message: `skipped: ${sup.reason}`, ms: now() - t0 };
  const problems: string[] = [];
  const owned: Owned = { tensors: [] };
  try {
    const call = await prepareCall(backend, x, opts.upload === true, true, owned);
    const idxLens = call.opts.cacheSeqlens as DeviceIndexTensor;
    const idxTable = call.opts.blockTable as DeviceIndexTensor;
    const rng = createRng(5);
    const t = (shape: number[], dt: DType = dtype) => hostTensor(randomValues(rng, shape.reduce((a, b) => a * b, 1)), shape, dt);
    const tbl = Array.from(x.blockTable!);
    const table = (edit: (a: number[]) => void) => {
      const a = [...tbl];
      edit(a);
      return Int32Array.from(a);
    };
    const mb = x.maxBlocksPerSeq;
    const base: KVCacheOptions = { ...x.options, cacheSeqlens: x.cacheSeqlens, blockTable: x.blockTable, kNew: x.kNew, vNew: x.vNew };
    const run = (o: Partial<KVCacheOptions> & Record<string, unknown>, q: unknown = call.q, kc: unknown = call.kCache, vc: unknown = call.vCache) =>
      backend.forwardWithKVCache(q as Tensor, kc as Tensor, vc as Tensor, { ...base, ...o } as KVCacheOptions);
    const two = t([2, 2, 1, 8]);
    const disposed = await backend.uploadIndex(x.cacheSeqlens);
    backend.disposeTensor(disposed);
    const foreign: DeviceIndexTensor = { kind: 'index', backend: `not-${backend.name}`, shape: [2], handle: null, disposed: false, mirror: Int32Array.from(x.cacheSeqlens) };
    const bad: BadCall[] = [
      { what: 'a block index past the cache in a block the call reads', code: 'E_ARG', call: () => run({ blockTable: table((a) => (a[1] = p.numBlocks)) }) },
      { what: 'a negative block index in a block the call writes', code: 'E_ARG', call: () => run({ blockTable: table((a) => (a[mb] = -1)) }) },
      { what: 'an append past a sequence\'s capacity', code: 'E_ARG', call: () => run({ cacheSeqlens: [p.capacity - 1, 2], kNew: two, vNew: two }) },
      { what: 'a length above what the block table covers', code: 'E_ARG', call: () => run({ cacheSeqlens: [p.capacity + 1, 2], kNew: undefined, vNew: undefined }) },
      { what: 'a negative length', code: 'E_ARG', call: () => run({ cacheSeqlens: [-1, 2] }) },
      { what: 'two sequences appending to the same cache row', code: 'E_ARG', call: () => run({ cacheSeqlens: [5, 1], blockTable: table((a) => (a[mb] = a[1])) }) },
      { what: 'lengths for the wrong number of sequences', code: 'E_SHAPE', call: () => run({ cacheSeqlens: [5] }) },
      { what: 'a block table whose size is not a multiple of B', code: 'E_SHAPE', call: () => run({ blockTable: tbl.slice(0, 2 * mb - 1) }) },
      { what: 'lengths that are not integers', code: 'E_DTYPE', call: () => run({ cacheSeqlens: [5.5, 2] }) },
      { what: 'kNew without vNew', code: 'E_ARG', call: () => run({ vNew: undefined }) },
      { what: 'kNew with the wrong number of kv heads', code: 'E_SHAPE', call: () => run({ kNew: t([2, 1, 2, 8]), vNew: t([2, 1, 2, 8]) }) },
      { what: `kNew of dtype ${other}`, code: 'E_DTYPE', call: () => run({ kNew: t([2, 1, 1, 8], other), vNew: t([2, 1, 1, 8], other) }) },
      { what: `vCache of dtype ${other}`, code: 'E_DTYPE', call: () => run({}, call.q, call.kCache, t(p.cacheShape as number[], other)) },
      { what: 'a cache with another head dim', code: 'E_SHAPE', call: () => run({}, call.q, t([p.numBlocks, p.blockSize, 1, 4]), t([p.numBlocks, p.blockSize, 1, 4])) },
      { what: 'a contiguous cache whose batch is not q\'s', code: 'E_SHAPE', call: () => run({ blockTable: undefined }, call.q, t([3, 12, 1, 8]), t([3, 12, 1, 8])) },
      { what: 'q of rank 3', code: 'E_SHAPE', call: () => run({}, t([2, 2, 8])) },
      { what: 'H = 3 with Hkv = 2', code: 'E_SHAPE', call: () => run({ kNew: undefined, vNew: undefined }, t([2, 1, 3, 8]), t([p.numBlocks, p.blockSize, 2, 8]), t([p.numBlocks, p.blockSize, 2, 8])) },
      { what: 'cuSeqlensQ in the options', code: 'E_ARG', call: () => run({ cuSeqlensQ: [0, 1, 2] }) },
      // the options since FlashAttention-2 (issue 26)
      { what: 'sinks of length 3 for H = 2', code: 'E_SHAPE', call: () => run({ sinks: [0.5, 1, 2] }) },
      { what: 'cacheBatchIdx with a paged cache', code: 'E_ARG', call: () => run({ cacheBatchIdx: [1, 0] }) },
      { what: 'a cacheLeftpad above its sequence\'s length', code: 'E_ARG', call: () => run({ cacheLeftpad: [6, 0] }) },
      { what: 'rotaryCos without rotarySin', code: 'E_ARG', call: () => run({ rotaryCos: hostTensor(new Float32Array(64), [16, 4], 'f32') }) },
      { what: 'rotary tables wider than D (rotaryDim 10 > 8)', code: 'E_ARG', call: () => run({ rotaryCos: hostTensor(new Float32Array(80), [16, 5], 'f32'), rotarySin: hostTensor(new Float32Array(80), [16, 5], 'f32') }) },
      { what: 'rotary tables shorter than the positions rotated', code: 'E_ARG', call: () => run({ rotaryCos: hostTensor(new Float32Array(8), [2, 4], 'f32'), rotarySin: hostTensor(new Float32Array(8), [2, 4], 'f32') }) },
      { what: 'dropout in a KV-cache call', code: 'E_ARG', call: () => run({ dropout: { p: 0.1, seed: 1 } }) },
      { what: 'vNew of another head dim than vCache', code: 'E_SHAPE', call: () => run({ vNew: t([2, 1, 1, 4]) }) },
      { what: 'vFromK with two cache tensors', code: 'E_ARG', call: () => run({ vFromK: 4, vNew: undefined }) },
      { what: 'vFromK with a vNew', code: 'E_ARG', call: () => run({ vFromK: 4 }, call.q, call.kCache, call.kCache) },
      { what: 'vFromK above D', code: 'E_ARG', call: () => run({ vFromK: 9, vNew: undefined }, call.q, call.kCache, call.kCache) },
      { what: 'no cacheSeqlens', code: 'E_ARG', call: () => run({ cacheSeqlens: undefined }) },
      { what: 'an index tensor that was disposed', code: 'E_ARG', call: () => run({ cacheSeqlens: disposed }) },
      { what: 'an index tensor of another backend', code: 'E_ARG', call: () => run({ cacheSeqlens: foreign }) },
      { what: 'uploadIndex of non-integers', code: 'E_DTYPE', call: () => backend.uploadIndex([1.5, 2]) },
      { what: 'uploadIndex with a shape that does not fit the data', code: 'E_SHAPE', call: () => backend.uploadIndex([1, 2, 3], [2, 2]) },
      { what: 'writeIndex past the end of the index tensor', code: 'E_SHAPE', call: () => backend.writeIndex(idxLens, [1, 2], 1) },
      { what: 'a bad block index in an index-tensor table (set by writeIndex, which does not check values)', code: 'E_ARG', call: async () => {
        const tb = await backend.uploadIndex(tbl, [2, mb]);
        owned.tensors.push(tb);
        await backend.writeIndex(tb, [p.numBlocks + 7], 0);
        return run({ blockTable: tb });
      } },
    ];
    for (const bi of bad) {
      const wrong = await refusalProblem(bi, { oneLine: true });
      if (wrong) problems.push(wrong);
      for (const [nm, tt, want] of [['kCache', call.kCache, x.kCache], ['vCache', call.vCache, x.vCache]] as const) {
        const diff = compareCache(p, nm, await backend.read(tt), want);
        if (diff) problems.push(`after ${bi.what}: ${diff}`);
      }
      if (idxLens.mirror.join() !== x.cacheSeqlens.join() || idxTable.mirror.join() !== tbl.join()) problems.push(`after ${bi.what}: an index tensor changed`);
    }
    const after = await checkKVCacheCase(backend, makeKVCacheCase({ dtype, seqlens: [6, 3], tnew: 2, tq: 2, blockSize: 4, d: 16, h: 2, hkv: 1, causal: true, seed: 9, deviceIndex: true }), opts);
    if (!after.pass) problems.push(`a valid call after the bad ones failed: ${after.message}`);
    return { name, pass: problems.length === 0, metrics: [], message: problems.length === 0 ? `ok: ${bad.length} bad calls refused with the right codes, caches unchanged; the backend still computes correctly` : `FAIL ${name}\n  ${problems.join('\n  ')}`, ms: now() - t0 };
  } catch (e) {
    problems.push(`setting up threw ${describeError(e)}`);
    return { name, pass: false, metrics: [], message: `FAIL ${name}\n  ${problems.join('\n  ')}`, ms: now() - t0 };
  } finally {
    release(backend, owned);
  }
}

/** The KV-cache extra checks, by name. */
export const KV_EXTRA_CHECKS: readonly { readonly name: string; readonly run: (b: AttentionBackend, o?: CheckOptions) => Promise<CaseResult> }[] = [
  { name: KV_DECODE_LOOP_CHECK_NAME, run: checkKVCacheDecodeLoop },
  { name: KV_BAD_INPUTS_CHECK_NAME, run: checkKVCacheBadInputs },
];
