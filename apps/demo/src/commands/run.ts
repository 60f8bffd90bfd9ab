/**
 * `fa run`: attention on .npy inputs, results as float32 .npy files — the black-box contract of
 * DESIGN.md ("The `fa` command"), so every engine can be driven from Python, NumPy and shell.
 */
import { join } from 'node:path';
import {
  FAError,
  describeProblem,
  npyToTensor,
  parseDType,
  tensorToNpy,
  type AttentionBackend,
  type AttentionOptions,
  type DType,
  type HostTensor,
  type KVCacheOptions,
  type NpyArray,
  type Tensor,
} from '@fa/core';
import { argError } from '../errors.js';
import { flagHelp, parseFlags, parseNumber, parseWindow, requireFlag, type FlagSpec, type Parsed } from '../args.js';
import { isKVCacheRun, runKVCache } from './run-kvcache.js';
import { BACKEND_CHOICES, pickBackendFor } from '../engines.js';
import { fmtMs, fmtShape, type Io } from '../io.js';
import { makeDir, readNpyFile, writeNpyFile } from '../npyio.js';

const SPEC: FlagSpec = {
  backend: { type: 'string', value: 'NAME', help: `engine: ${BACKEND_CHOICES.join(', ')} (default auto: the first engine, by priority, that computes the problem)` },
  q: { type: 'string', value: 'Q.npy', help: 'queries, float32 [B, Tq, H, D] (varlen: [totalQ, H, D])' },
  k: { type: 'string', value: 'K.npy', help: 'keys, float32 [B, Tk, Hkv, D] (varlen: [totalK, Hkv, D])' },
  v: { type: 'string', value: 'V.npy', help: "values, float32, k's shape" },
  dout: { type: 'string', value: 'DO.npy', help: "gradient of the output, q's shape: also computes dq, dk, dv" },
  causal: { type: 'boolean', help: 'causal mask, aligned to the bottom-right when Tq != Tk' },
  window: { type: 'string', value: 'L,R', help: 'sliding window, -1 = unbounded (with --causal: R = 0)' },
  softcap: { type: 'string', value: 'C', help: 'tanh soft-capping of the scores: c * tanh(s / c), c > 0' },
  scale: { type: 'string', value: 'S', help: 'score scale (default 1/sqrt(D))' },
  alibi: { type: 'string', value: 'SLOPES.npy', help: 'ALiBi slopes, float32 [H] or [B, H]' },
  dropout: { type: 'string', value: 'P', help: 'dropout probability in [0, 1) on the attention weights (with --seed; the mask is the same on every engine)' },
  seed: { type: 'string', value: 'N', help: "dropout's seed, an integer in [0, 2^53)" },
  'dropout-offset': { type: 'string', value: 'O', help: "dropout's offset (default 0): another mask for the same seed" },
  sinks: { type: 'string', value: 'S.npy', help: 'attention sinks, float32 [H]: one logit per query head in the softmax denominator (with --dout also writes dsinks.npy)' },
  'cu-seqlens-q': { type: 'string', value: 'CQ.npy', help: 'varlen: int32 [B+1] query offsets (with --cu-seqlens-k)' },
  'cu-seqlens-k': { type: 'string', value: 'CK.npy', help: 'varlen: int32 [B+1] key offsets (with --cu-seqlens-q)' },
  'k-cache': { type: 'string', value: 'KC.npy', help: 'KV cache: keys, float32 [B, capacity, Hkv, D] (paged: [numBlocks, blockSize, Hkv, D])' },
  'v-cache': { type: 'string', value: 'VC.npy', help: "KV cache: values, the key cache's shape (its head dim may be its own)" },
  'block-table': { type: 'string', value: 'BT.npy', help: 'KV cache: paged, int32 [B, maxBlocksPerSeq] block indices' },
  'cache-seqlens': { type: 'string', value: 'L.npy', help: 'KV cache: int32 [B] tokens already cached per sequence' },
  'k-new': { type: 'string', value: 'KN.npy', help: 'KV cache: new keys [B, Tnew, Hkv, D], appended in place (with --v-new)' },
  'v-new': { type: 'string', value: 'VN.npy', help: 'KV cache: new values, the new keys\' shape' },
  'cache-batch-idx': { type: 'string', value: 'I.npy', help: 'KV cache (contiguous): int32 [B], the cache row each sequence uses' },
  'cache-leftpad': { type: 'string', value: 'P.npy', help: 'KV cache: int32 [B], keys before it are not attended; positions count from it' },
  'rotary-cos': { type: 'string', value: 'C.npy', help: 'KV cache: float32 [maxPos, rotaryDim / 2], rotary applied to the new keys and q inside the call (with --rotary-sin)' },
  'rotary-sin': { type: 'string', value: 'S.npy', help: 'KV cache: float32 [maxPos, rotaryDim / 2] (with --rotary-cos)' },
  'rotary-interleaved': { type: 'boolean', help: 'KV cache: rotary pairs dims (2m, 2m+1) (GPT-J) instead of (m, m + rotaryDim/2)' },
  'v-from-k': { type: 'string', value: 'DV', help: "KV cache: a latent cache (MLA): V is the first DV columns of each --k-cache row; no --v-cache, new rows in --k-new alone" },
  dtype: { type: 'string', value: 'f32|f16|bf16', help: 'compute dtype; inputs are rounded to it (default f32)' },
  out: { type: 'string', value: 'DIR', help: 'output directory (created if needed)' },
  help: { type: 'boolean', short: 'h', help: 'show this help' },
};

export const runHelp = `usage: fa run --backend cpu|wasm|native|webgpu|cuda|auto --q Q.npy --k K.npy --v V.npy [--dout DO.npy]
              [--causal] [--window L,R] [--softcap C] [--scale S] [--alibi SLOPES.npy] [--sinks S.npy]
              [--dropout P --seed N [--dropout-offset O]]
              [--cu-seqlens-q CQ.npy --cu-seqlens-k CK.npy] [--dtype f32|f16|bf16] --out DIR
       fa run ... --q Q.npy --k-cache KC.npy --v-cache VC.npy [--block-table BT.npy]
              --cache-seqlens L.npy [--k-new KN.npy --v-new VN.npy] [--cache-batch-idx I.npy]
              [--cache-leftpad P.npy] [--rotary-cos C.npy --rotary-sin S.npy [--rotary-interleaved]]
              [options] --out DIR
       fa run ... --q Q.npy --k-cache LATENT.npy --v-from-k DV ... (MLA: one cache as K and V)

Reads float32 .npy inputs (float16 files are accepted too; int32 for cu_seqlens), rounds them to
--dtype, computes attention with the engine, and writes float32 out.npy and lse.npy (and with
--dout also dq.npy, dk.npy, dv.npy, and dsinks.npy with --sinks) into DIR. With a KV cache (FlashAttention's
flash_attn_with_kvcache): --k-new/--v-new are written into the cache at each sequence's length,
then q [B, Tq, H, D] attends to the cache (causal: bottom-right over each sequence's keys); it
writes out.npy, lse.npy and the updated k_cache.npy, v_cache.npy. Bad input: one line
"fa: E_CODE: message" on stderr and exit status 1. With --backend auto, an engine that declines
the problem (a dtype or head dim it lacks, a KV-cache call it has no kernels for) is passed over
for the next one, and one line "fa: note: ..." on stderr says so.

${flagHelp(SPEC)}`;

async function readFloatTensor(path: string, what: string, dtype: DType): Promise<HostTensor> {
  const a = await readNpyFile(path, what);
  if (a.dtype !== 'float32' && a.dtype !== 'float16') {
    throw new FAError('E_DTYPE', `${what} ${path}: expected float32 data, got ${a.dtype}; save it with arr.astype(np.float32)`);
  }
  return npyToTensor(a, dtype);
}

async function readCuSeqlens(path: string, what: string): Promise<Int32Array> {
  const a = await readNpyFile(path, what);
  if (a.dtype !== 'int32') throw new FAError('E_DTYPE', `${what} ${path}: expected int32 offsets, got ${a.dtype}; save them with arr.astype(np.int32)`);
  if (a.shape.length !== 1) throw new FAError('E_SHAPE', `${what} ${path}: expected a 1-d array of B+1 offsets, got shape ${fmtShape(a.shape)}`);
  return a.data as Int32Array;
}

async function readSlopes(path: string): Promise<Float32Array> {
  const a = await readNpyFile(path, '--alibi');
  if (a.dtype === 'int32') throw new FAError('E_DTYPE', `--alibi ${path}: expected float32 slopes, got int32; save them with arr.astype(np.float32)`);
  if (a.shape.length < 1 || a.shape.length > 2) throw new FAError('E_SHAPE', `--alibi ${path}: expected slopes of shape [H] or [B, H], got ${fmtShape(a.shape)}`);
  return npyToTensor(a, 'f32').data as Float32Array;
}

async function readSinks(path: string): Promise<Float32Array> {
  const a = await readNpyFile(path, '--sinks');
  if (a.dtype === 'int32') throw new FAError('E_DTYPE', `--sinks ${path}: expected float32 logits, got int32; save them with arr.astype(np.float32)`);
  if (a.shape.length !== 1) throw new FAError('E_SHAPE', `--sinks ${path}: expected one logit per query head, shape [H], got ${fmtShape(a.shape)}`);
  return npyToTensor(a, 'f32').data as Float32Array;
}

function describeOptions(o: AttentionOptions): string {
  const parts: string[] = [];
  if (o.cuSeqlensQ) parts.push(`varlen B=${o.cuSeqlensQ.length - 1}`);
  if (o.causal) parts.push('causal');
  if (o.window) parts.push(`window ${o.window[0]},${o.window[1]}`);
  if (o.softcap !== undefined) parts.push(`softcap ${o.softcap}`);
  if (o.scale !== undefined) parts.push(`scale ${o.scale}`);
  if (o.alibiSlopes) parts.push('alibi');
  if (o.sinks) parts.push('sinks');
  if (o.dropout) parts.push(`dropout ${o.dropout.p}`);
  return parts.length ? ' ' + parts.join(' ') : '';
}

async function toHost(b: AttentionBackend, t: Tensor): Promise<HostTensor> {
  return t.kind === 'host' ? t : b.read(t);
}

function asFloat32(t: HostTensor): NpyArray {
  return tensorToNpy(t, true);
}

/** The score options every call shares: --causal, --window, --softcap, --scale. */
function scoreOptions(p: Parsed): { causal?: boolean; window?: [number, number]; softcap?: number; scale?: number } {
  const opts: { causal?: boolean; window?: [number, number]; softcap?: number; scale?: number } = {};
  if (p.booleans.has('causal')) opts.causal = true;
  const w = p.strings.get('window');
  if (w !== undefined) opts.window = parseWindow(w);
  const sc = p.strings.get('softcap');
  if (sc !== undefined) opts.softcap = parseNumber('softcap', sc);
  const s = p.strings.get('scale');
  if (s !== undefined) opts.scale = parseNumber('scale', s);
  return opts;
}

/** `fa run` with --k-cache …: run-kvcache.ts, with this file's readers and options. */
async function runKVCacheCommand(p: Parsed, io: Io): Promise<number> {
  const outDir = requireFlag(p, 'out', 'run', 'DIR');
  const dtype = parseDType(p.strings.get('dtype') ?? 'f32', '--dtype');
  const opts: Omit<KVCacheOptions, 'cacheSeqlens'> & { alibiSlopes?: Float32Array; sinks?: Float32Array } = scoreOptions(p);
  const alibi = p.strings.get('alibi');
  if (alibi !== undefined) opts.alibiSlopes = await readSlopes(alibi);
  const sinks = p.strings.get('sinks');
  if (sinks !== undefined) opts.sinks = await readSinks(sinks);
  for (const f of ['dropout', 'seed', 'dropout-offset']) if (p.strings.has(f)) throw argError(`--${f} does not apply to a KV-cache call (inference has no backward); leave it out`);
  return runKVCache(
    { p, backendName: p.strings.get('backend') ?? 'auto', dtype, outDir, readFloat: (path, what) => readFloatTensor(path, what, dtype), readTable: (path, what) => readFloatTensor(path, what, 'f32'), toNpy: asFloat32, options: opts, describeOptions: describeOptions(opts) },
    io,
  );
}

export async function runCommand(args: readonly string[], io: Io): Promise<number> {
  const p = parseFlags('run', args, SPEC);
  if (p.booleans.has('help')) {
    io.out(runHelp);
    return 0;
  }
  if (isKVCacheRun(p)) return runKVCacheCommand(p, io);
  for (const f of ['cache-batch-idx', 'cache-leftpad', 'rotary-cos', 'rotary-sin', 'rotary-interleaved', 'v-from-k']) {
    if (p.strings.has(f) || p.booleans.has(f)) throw argError(`--${f} applies to a KV-cache call (--k-cache …)`);
  }
  const qPath = requireFlag(p, 'q', 'run', 'Q.npy');
  const kPath = requireFlag(p, 'k', 'run', 'K.npy');
  const vPath = requireFlag(p, 'v', 'run', 'V.npy');
  const outDir = requireFlag(p, 'out', 'run', 'DIR');
  const backendName = p.strings.get('backend') ?? 'auto';
  const dtype = parseDType(p.strings.get('dtype') ?? 'f32', '--dtype');

  const opts: { -readonly [K in keyof AttentionOptions]: AttentionOptions[K] } = scoreOptions(p);
  const cq = p.strings.get('cu-seqlens-q');
  const ck = p.strings.get('cu-seqlens-k');
  if ((cq === undefined) !== (ck === undefined)) throw argError('--cu-seqlens-q and --cu-seqlens-k must be given together');

  // One file at a time, so that the first bad one in flag order is the one reported.
  const q = await readFloatTensor(qPath, '--q', dtype);
  const k = await readFloatTensor(kPath, '--k', dtype);
  const v = await readFloatTensor(vPath, '--v', dtype);
  const doutPath = p.strings.get('dout');
  const dOut = doutPath !== undefined ? await readFloatTensor(doutPath, '--dout', dtype) : undefined;
  const alibi = p.strings.get('alibi');
  if (alibi !== undefined) opts.alibiSlopes = await readSlopes(alibi);
  const sinks = p.strings.get('sinks');
  if (sinks !== undefined) opts.sinks = await readSinks(sinks);
  const drop = p.strings.get('dropout');
  const seed = p.strings.get('seed');
  const dOff = p.strings.get('dropout-offset');
  if ((drop === undefined) !== (seed === undefined)) throw argError('--dropout and --seed must be given together');
  if (dOff !== undefined && drop === undefined) throw argError('--dropout-offset needs --dropout and --seed');
  if (drop !== undefined) opts.dropout = { p: parseNumber('dropout', drop), seed: parseNumber('seed', seed!), ...(dOff !== undefined ? { offset: parseNumber('dropout-offset', dOff) } : {}) };
  if (cq !== undefined && ck !== undefined) {
    opts.cuSeqlensQ = await readCuSeqlens(cq, '--cu-seqlens-q');
    opts.cuSeqlensK = await readCuSeqlens(ck, '--cu-seqlens-k');
  }

  const problem = describeProblem(q, k, v, opts);
  if (dOut && fmtShape(dOut.shape) !== fmtShape(q.shape)) {
    throw new FAError('E_SHAPE', `--dout must have q's shape ${fmtShape(q.shape)}, got ${fmtShape(dOut.shape)}`);
  }
  const { backend, note } = await pickBackendFor(backendName, problem);
  if (note !== undefined) io.note?.(note);
  await makeDir(outDir);

  const t0 = performance.now();
  const [qd, kd, vd] = await Promise.all([backend.upload(q), backend.upload(k), backend.upload(v)]);
  const fwd = await backend.forward(qd, kd, vd, opts);
  const out = await toHost(backend, fwd.out);
  const lse = await toHost(backend, fwd.lse);
  const t1 = performance.now();
  let timing = `forward ${fmtMs(t1 - t0)}`;
  const files: [string, NpyArray][] = [
    ['out.npy', asFloat32(out)],
    ['lse.npy', asFloat32(lse)],
  ];
  if (dOut) {
    const dOd = await backend.upload(dOut);
    const g = await backend.backward(qd, kd, vd, fwd.out, dOd, fwd.lse, opts);
    const [dq, dk, dv] = [await toHost(backend, g.dq), await toHost(backend, g.dk), await toHost(backend, g.dv)];
    timing += `, backward ${fmtMs(performance.now() - t1)}`;
    files.push(['dq.npy', asFloat32(dq)], ['dk.npy', asFloat32(dk)], ['dv.npy', asFloat32(dv)]);
    if (g.dsinks) {
      files.push(['dsinks.npy', asFloat32(await toHost(backend, g.dsinks))]);
      backend.disposeTensor(g.dsinks);
    }
    for (const t of [dOd, g.dq, g.dk, g.dv]) backend.disposeTensor(t);
  }
  for (const t of [qd, kd, vd, fwd.out, fwd.lse]) backend.disposeTensor(t);
  for (const [name, a] of files) await writeNpyFile(join(outDir, name), a);
  io.out(
    `fa run: ${backend.name} (${backend.device}) q ${fmtShape(q.shape)} k ${fmtShape(k.shape)} ${dtype}${describeOptions(opts)}: ${timing}; wrote ${files.map((f) => f[0]).join(', ')} to ${outDir}`,
  );
  return 0;
}
