/**
 * Running conformance cases against a backend: checkCase (one case), the generic extra checks
 * (NaN propagation, repeatability, bad inputs) and runConformance (everything, summarised).
 */
import type { AttentionBackend, Support } from '../backend.js';
import type { DType } from '../dtype.js';
import type { AttentionOptions, AttentionProblem } from '../problem.js';
import { describeProblem, lseIndex, segment } from '../problem.js';
import { keyRange, queryRange } from '../mask.js';
import { referenceBackward, referenceForward, type ReferenceBackward } from '../reference.js';
import { naiveBackward, naiveForward, type NaiveBackward, type NaiveForward } from '../naive.js';
import { allocHost, numel, type HostData, type HostTensor, type Tensor } from '../tensor.js';
import { streamOf } from '../stream.js';
import { isFAError } from '../errors.js';
import { dropoutKeeps } from '../philox.js';
import { caseInputs, conformanceCases, makeCase, type ConformanceCase, type ConformanceCaseOptions } from './cases.js';
import { compareLse, compareTensor, formatMetric, type TensorMetric, type TensorName } from './tolerance.js';
import { createRng, hostTensor, randomValues, tensorValues } from './random.js';
import { kvCacheCases, type KVCacheCase } from './kvcache-cases.js';
import { checkKVCacheCase, KV_EXTRA_CHECKS } from './kvcache-check.js';
import { describeError, now, refusalProblem, type BadCall } from './util.js';

export interface CheckOptions {
  /** Pass inputs as device tensors made with backend.upload() (default false: host tensors). */
  readonly upload?: boolean;
  /** Check the backward pass (default: the case's own flag, true for generated cases). */
  readonly backward?: boolean;
}

export interface CaseResult {
  readonly name: string;
  /** True when every check passed, and for skipped cases. */
  readonly pass: boolean;
  /** The backend's supports() refused the problem; `reason` says why. */
  readonly skipped?: boolean;
  readonly reason?: string;
  readonly metrics: readonly TensorMetric[];
  /** "ok: …" with the metrics, "skipped: reason", or what failed, where, and by how much. */
  readonly message: string;
  readonly ms: number;
}

function shapeStr(s: readonly number[]): string {
  return `[${s.join(', ')}]`;
}

/** Where flat index `idx` of a tensor lies, in words. */
export function locate(p: AttentionProblem, tensor: TensorName, idx: number): string {
  const seqOf = (cu: Int32Array, row: number) => {
    let b = 0;
    while (b + 1 < cu.length - 1 && cu[b + 1] <= row) b++;
    return b;
  };
  if (tensor === 'dsinks') return `dsinks[h=${idx}]`;
  if (tensor === 'lse') {
    let b: number, h: number, i: number;
    if (p.varlen) {
      h = Math.floor(idx / p.totalQ);
      const row = idx % p.totalQ;
      b = seqOf(p.cuSeqlensQ, row);
      i = row - p.cuSeqlensQ[b];
    } else {
      b = Math.floor(idx / (p.h * p.tq));
      h = Math.floor(idx / p.tq) % p.h;
      i = idx % p.tq;
    }
    return `lse[b=${b}, h=${h}, i=${i}]`;
  }
  const isK = tensor === 'dk' || tensor === 'dv';
  const H = isK ? p.hkv : p.h;
  const D = tensor === 'out' || tensor === 'dv' ? p.vDim : p.d;
  const d = idx % D;
  const h = Math.floor(idx / D) % H;
  const row = Math.floor(idx / (D * H));
  const cu = isK ? p.cuSeqlensK : p.cuSeqlensQ;
  const b = seqOf(cu, row);
  return `${tensor}[b=${b}, ${isK ? 'j' : 'i'}=${row - cu[b]}, ${isK ? 'hkv' : 'h'}=${h}, d=${d}]`;
}

function metricLine(p: AttentionProblem, m: TensorMetric): string {
  let s = formatMetric(m);
  if (!m.pass && m.worst) s += `; worst at ${locate(p, m.tensor, m.worst.index)}: got ${m.worst.got}, want ${m.worst.want}`;
  return s;
}

function checkResultTensor(t: HostTensor, shape: readonly number[], dtype: DType, what: string): string | undefined {
  if (typeof t !== 'object' || t === null || t.kind !== 'host') return `${what}: backend.read() did not return a host tensor`;
  if (t.dtype !== dtype) return `${what} has dtype ${t.dtype}, expected ${dtype}`;
  if (shapeStr(t.shape) !== shapeStr(shape)) return `${what} has shape ${shapeStr(t.shape)}, expected ${shapeStr(shape)}`;
  const okType = dtype === 'f32' ? t.data instanceof Float32Array : t.data instanceof Uint16Array;
  if (!okType) return `${what}: data is not a ${dtype === 'f32' ? 'Float32Array' : 'Uint16Array'}`;
  if (t.data.length !== numel(shape)) return `${what}: data has ${t.data.length} elements, expected ${numel(shape)}`;
  return undefined;
}

/** Rows that see no key must have out (and dq) exactly 0; keys that no query sees, dk = dv = 0. */
function structuralZeros(p: AttentionProblem, tensor: 'out' | 'dq' | 'dk' | 'dv', x: ArrayLike<number>): string | undefined {
  const D = tensor === 'out' || tensor === 'dv' ? p.vDim : p.d;
  for (let b = 0; b < p.batch; b++) {
    const { q0, tq, k0, tk } = segment(p, b);
    if (tensor === 'out' || tensor === 'dq') {
      for (let i = 0; i < tq; i++) {
        const [lo, hi] = keyRange(p, i, tq, tk);
        if (lo <= hi) continue;
        for (let h = 0; h < p.h; h++) {
          const o = ((q0 + i) * p.h + h) * D;
          for (let d = 0; d < D; d++) if (x[o + d] !== 0) return `${tensor}[b=${b}, i=${i}, h=${h}, d=${d}] = ${x[o + d]}, but that row sees no key: it must be exactly 0`;
        }
      }
    } else {
      for (let j = 0; j < tk; j++) {
        const [lo, hi] = queryRange(p, j, tq, tk);
        if (lo <= hi) continue;
        for (let g = 0; g < p.hkv; g++) {
          const o = ((k0 + j) * p.hkv + g) * D;
          for (let d = 0; d < D; d++) if (x[o + d] !== 0) return `${tensor}[b=${b}, j=${j}, hkv=${g}, d=${d}] = ${x[o + d]}, but no query sees that key: it must be exactly 0`;
        }
      }
    }
  }
  return undefined;
}

/**
 * Runs one case: supports() first (a refusal is a skip, with the engine's reason), then forward
 * and (unless disabled) backward through the backend on the case's inputs, reading results with
 * backend.read(), and compares them with the float64 reference (and, for f16/bf16, naive
 * attention in the dtype) under the tolerance policy (tolerance.ts).
 */
export async function checkCase(backend: AttentionBackend, c: ConformanceCase, opts: CheckOptions = {}): Promise<CaseResult> {
  const t0 = now();
  const name = c.name;
  const metrics: TensorMetric[] = [];
  const problems: string[] = [];
  let prob: AttentionProblem | undefined;
  const done = (message?: string): CaseResult => {
    if (message) problems.push(message);
    const pass = problems.length === 0 && metrics.every((m) => m.pass);
    const p = prob;
    const lines = metrics.map((m) => (p ? metricLine(p, m) : formatMetric(m)));
    const msg = pass
      ? `ok: ${metrics.map((m) => `${m.tensor} ${m.err.toExponential(1)}/${m.bound.toExponential(1)}`).join(', ')}`
      : `FAIL ${name} (seed ${c.seed})\n  ${[...problems, ...lines.filter((_, i) => !metrics[i].pass)].join('\n  ')}${metrics.length ? `\n  all: ${metrics.map((m) => `${m.tensor} ${m.err.toExponential(2)}/${m.bound.toExponential(2)}`).join(', ')}` : ''}`;
    return { name, pass, metrics, message: msg, ms: now() - t0 };
  };
  let inputs;
  let p: AttentionProblem;
  try {
    inputs = caseInputs(c);
    p = describeProblem(inputs.q, inputs.k, inputs.v, inputs.options);
    prob = p;
  } catch (e) {
    return done(`the case itself is invalid: ${describeError(e)}`);
  }
  let sup: Support;
  try {
    sup = backend.supports(p);
  } catch (e) {
    return done(`supports() threw ${describeError(e)}`);
  }
  if (!sup.ok) {
    const reason = typeof sup.reason === 'string' ? sup.reason.trim() : '';
    if (!reason) return done('supports() refused the problem without giving a reason');
    return { name, pass: true, skipped: true, reason, metrics: [], message: `skipped: ${reason}`, ms: now() - t0 };
  }
  if (!backend.dtypes.includes(p.dtype)) return done(`supports() accepted dtype ${p.dtype}, which is not in backend.dtypes [${backend.dtypes.join(', ')}]`);
  const wantBwd = opts.backward ?? c.backward;
  const owned: Tensor[] = [];
  let stage = 'upload';
  try {
    const up = async (t: HostTensor): Promise<Tensor> => {
      if (!opts.upload) return t;
      const d = await backend.upload(t);
      owned.push(d);
      return d;
    };
    const q = await up(inputs.q);
    const k = await up(inputs.k);
    const v = await up(inputs.v);
    stage = 'forward';
    const fwd = await backend.forward(q, k, v, inputs.options);
    owned.push(fwd.out, fwd.lse);
    stage = 'read';
    const outH = await backend.read(fwd.out);
    const lseH = await backend.read(fwd.lse);
    const bad = checkResultTensor(outH, p.outShape, p.dtype, 'out') ?? checkResultTensor(lseH, p.lseShape, 'f32', 'lse');
    if (bad) return done(bad);
    stage = 'reference';
    const out = tensorValues(outH);
    const ref = wantBwd
      ? referenceBackward(inputs.q, inputs.k, inputs.v, inputs.dOut, inputs.options, { magnitudes: true, givenOut: out })
      : referenceForward(inputs.q, inputs.k, inputs.v, inputs.options, { magnitudes: true });
    let naive: NaiveForward | NaiveBackward | undefined;
    if (p.dtype !== 'f32') naive = wantBwd ? naiveBackward(inputs.q, inputs.k, inputs.v, inputs.dOut, inputs.options) : naiveForward(inputs.q, inputs.k, inputs.v, inputs.options);
    metrics.push(compareTensor({ tensor: 'out', dtype: p.dtype, got: out, ref: ref.out, mag: ref.mag!.out, naive: naive?.out }));
    metrics.push(compareLse(p.dtype, tensorValues(lseH), ref.lse, ref.mag!.lse));
    const z = structuralZeros(p, 'out', out);
    if (z) problems.push(z);
    if (wantBwd) {
      const rb = ref as ReferenceBackward;
      const nb = naive as NaiveBackward | undefined;
      stage = 'upload';
      const dO = await up(inputs.dOut);
      stage = 'backward';
      const bwd = await backend.backward(q, k, v, fwd.out, dO, fwd.lse, inputs.options);
      owned.push(bwd.dq, bwd.dk, bwd.dv);
      stage = 'read';
      const dqH = await backend.read(bwd.dq);
      const dkH = await backend.read(bwd.dk);
      const dvH = await backend.read(bwd.dv);
      const badB = checkResultTensor(dqH, p.qShape, p.dtype, 'dq') ?? checkResultTensor(dkH, p.kShape, p.dtype, 'dk') ?? checkResultTensor(dvH, p.vShape, p.dtype, 'dv');
      if (badB) return done(badB);
      const mg = rb.magGrad!;
      for (const [nm, h, r, m, n, os] of [
        ['dq', dqH, rb.dq, mg.dq, nb?.dq, rb.outCorrection!.dq],
        ['dk', dkH, rb.dk, mg.dk, nb?.dk, rb.outCorrection!.dk],
        ['dv', dvH, rb.dv, mg.dv, nb?.dv, undefined],
      ] as const) {
        const x = tensorValues(h);
        metrics.push(compareTensor({ tensor: nm, dtype: p.dtype, got: x, ref: r, mag: m, naive: n, correction: os }));
        const zz = structuralZeros(p, nm, x);
        if (zz) problems.push(zz);
      }
      if (p.sinks) {
        if (bwd.dsinks === undefined) return done('backward returned no dsinks for a call with sinks');
        owned.push(bwd.dsinks);
        const dsH = await backend.read(bwd.dsinks);
        const badS = checkResultTensor(dsH, [p.h], 'f32', 'dsinks');
        if (badS) return done(badS);
        metrics.push(compareTensor({ tensor: 'dsinks', dtype: p.dtype, got: tensorValues(dsH), ref: rb.dsinks!, mag: mg.dsinks!, naive: nb?.dsinks, correction: rb.outCorrection!.dsinks }));
      } else if (bwd.dsinks !== undefined) problems.push('backward returned dsinks for a call without sinks');
    }
    return done();
  } catch (e) {
    return done(`${stage} threw ${describeError(e)}`);
  } finally {
    for (const t of owned) {
      try {
        backend.disposeTensor(t);
      } catch {
        /* a failing dispose must not hide the result */
      }
    }
  }
}

const problemCache = new WeakMap<ConformanceCase, AttentionProblem>();
function caseProblemOf(c: ConformanceCase): AttentionProblem {
  let p = problemCache.get(c);
  if (!p) {
    const i = caseInputs(c);
    p = describeProblem(i.q, i.k, i.v, i.options);
    problemCache.set(c, p);
  }
  return p;
}

/** The dtype the extra checks use: f32 when the backend has it, else its first. */
function extraDtype(backend: AttentionBackend): DType {
  return backend.dtypes.includes('f32') ? 'f32' : backend.dtypes[0] ?? 'f32';
}

function skipped(name: string, reason: string, t0: number): CaseResult {
  return { name, pass: true, skipped: true, reason, metrics: [], message: `skipped: ${reason}`, ms: now() - t0 };
}

function result(name: string, problems: string[], t0: number, okText: string): CaseResult {
  const pass = problems.length === 0;
  return { name, pass, metrics: [], message: pass ? `ok: ${okText}` : `FAIL ${name}\n  ${problems.join('\n  ')}`, ms: now() - t0 };
}

/** An upload that records the device tensors it makes in `owned` (host tensors pass as they are without `upload`). */
function uploader(backend: AttentionBackend, upload: boolean | undefined, owned: Tensor[]): (t: HostTensor) => Promise<Tensor> {
  return async (t) => {
    if (!upload) return t;
    const d = await backend.upload(t);
    owned.push(d);
    return d;
  };
}

/** Frees what a check made; a failing dispose must not hide the check's result. */
function disposeAll(backend: AttentionBackend, owned: readonly Tensor[]): void {
  for (const t of owned) {
    try {
      backend.disposeTensor(t);
    } catch {
      /* ignore */
    }
  }
}

export const NAN_CHECK_NAME = 'extra: NaN in q, k or v propagates to the rows that see it, and only there';

/**
 * NaN propagation: a NaN in q (sequence 0), in k (sequence 1) and in v (sequence 2) must make
 * NaN exactly the outputs (and LSEs) that depend on it, as the reference does; every other
 * sequence and head must be unaffected. Rows of the same sequence and head group that do not
 * see the NaN key are not constrained (an engine may multiply a masked 0 by a NaN value).
 */
export async function checkNaNPropagation(backend: AttentionBackend, opts: { upload?: boolean } = {}): Promise<CaseResult> {
  const t0 = now();
  const name = NAN_CHECK_NAME;
  const dtype = extraDtype(backend);
  const B = 3, T = 12, H = 2, HKV = 1, D = 16;
  const rng = createRng(4242);
  const qv = randomValues(rng, B * T * H * D);
  const kv = randomValues(rng, B * T * HKV * D);
  const vv = randomValues(rng, B * T * HKV * D);
  const qi = (b: number, i: number, h: number, d: number) => ((b * T + i) * H + h) * D + d;
  const ki = (b: number, j: number, g: number, d: number) => ((b * T + j) * HKV + g) * D + d;
  qv[qi(0, 3, 1, 5)] = NaN;
  kv[ki(1, 4, 0, 2)] = NaN;
  vv[ki(2, 6, 0, 7)] = NaN;
  const options: AttentionOptions = { causal: true };
  const q = hostTensor(qv, [B, T, H, D], dtype);
  const k = hostTensor(kv, [B, T, HKV, D], dtype);
  const v = hostTensor(vv, [B, T, HKV, D], dtype);
  const p = describeProblem(q, k, v, options);
  const sup = backend.supports(p);
  if (!sup.ok) return skipped(name, sup.reason, t0);
  const ref = referenceForward(q, k, v, options);
  const problems: string[] = [];
  const owned: Tensor[] = [];
  try {
    const up = uploader(backend, opts.upload, owned);
    const fwd = await backend.forward(await up(q), await up(k), await up(v), options);
    owned.push(fwd.out, fwd.lse);
    const out = tensorValues(await backend.read(fwd.out));
    const lse = tensorValues(await backend.read(fwd.lse));
    // Unconstrained: sequence 1, rows i < 4 (they do not see the NaN key 4); sequence 2, rows i < 6, d = 7.
    const free = (b: number, i: number, d: number) => (b === 1 && i < 4) || (b === 2 && i < 6 && d === 7);
    for (let b = 0; b < B; b++) {
      for (let i = 0; i < T; i++) {
        for (let h = 0; h < H; h++) {
          const li = lseIndex(p, b, h, i);
          const rl = ref.lse[li];
          if (!(b === 1 && i < 4)) {
            if (Number.isNaN(rl) && !Number.isNaN(lse[li])) problems.push(`lse[b=${b}, h=${h}, i=${i}] = ${lse[li]}: expected NaN (the row sees a NaN)`);
            else if (!Number.isNaN(rl) && !(Math.abs(lse[li] - rl) <= 1e-2 * (1 + Math.abs(rl)))) problems.push(`lse[b=${b}, h=${h}, i=${i}] = ${lse[li]}, expected ${rl}: a NaN elsewhere leaked into this row`);
          }
          for (let d = 0; d < D; d++) {
            if (free(b, i, d)) continue;
            const x = out[qi(b, i, h, d)];
            const r = ref.out[qi(b, i, h, d)];
            if (Number.isNaN(r) && !Number.isNaN(x)) problems.push(`out[b=${b}, i=${i}, h=${h}, d=${d}] = ${x}: expected NaN (it depends on a NaN input)`);
            else if (!Number.isNaN(r) && !(Math.abs(x - r) <= 1e-2 * (1 + Math.abs(r)))) problems.push(`out[b=${b}, i=${i}, h=${h}, d=${d}] = ${x}, expected ${r}: a NaN elsewhere leaked into it`);
            if (problems.length > 8) break;
          }
        }
      }
    }
  } catch (e) {
    problems.push(`forward threw ${describeError(e)} on inputs containing NaN (NaN must propagate, not be rejected)`);
  } finally {
    disposeAll(backend, owned);
  }
  return result(name, problems.slice(0, 8), t0, 'NaN reached exactly the rows that see it');
}

export const REPEAT_CHECK_NAME = 'extra: results are bit-identical when a call is repeated (no state leaks between calls)';

function snapshot(t: HostTensor): Uint32Array {
  const d = t.data;
  return d instanceof Float32Array ? new Uint32Array(Float32Array.from(d).buffer) : Uint32Array.from(d);
}

function sameBits(a: Uint32Array, b: Uint32Array): number {
  if (a.length !== b.length) return 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/**
 * Repeatability: case A (deterministic: true), then a different case B, then A again must give
 * bit-identical out, lse, dq, dk and dv.
 */
export async function checkRepeatable(backend: AttentionBackend, opts: { upload?: boolean } = {}): Promise<CaseResult> {
  const t0 = now();
  const name = REPEAT_CHECK_NAME;
  const dtype = extraDtype(backend);
  const candidates = [
    makeCase({ dtype, batch: 2, tq: 33, tk: 47, h: 4, hkv: 2, d: 32, causal: true, softcap: 10, alibi: 'H', deterministic: true, seed: 11 }),
    makeCase({ dtype, batch: 2, tq: 33, tk: 47, h: 4, hkv: 2, d: 32, causal: true, deterministic: true, seed: 11 }),
  ];
  const a = candidates.find((c) => backend.supports(caseProblemOf(c)).ok);
  if (!a) {
    const s = backend.supports(caseProblemOf(candidates[1]));
    return skipped(name, s.ok ? 'unsupported' : s.reason, t0);
  }
  const bCase = makeCase({ dtype, seqlensQ: [5, 20], seqlensK: [9, 30], h: 2, d: 16, window: [3, 3], seed: 12 });
  const run = async (c: ConformanceCase): Promise<Uint32Array[]> => {
    const i = caseInputs(c);
    const owned: Tensor[] = [];
    const up = async (t: HostTensor) => {
      if (!opts.upload) return t;
      const d = await backend.upload(t);
      owned.push(d);
      return d;
    };
    try {
      const q = await up(i.q), k = await up(i.k), v = await up(i.v), dO = await up(i.dOut);
      const f = await backend.forward(q, k, v, i.options);
      owned.push(f.out, f.lse);
      const g = await backend.backward(q, k, v, f.out, dO, f.lse, i.options);
      owned.push(g.dq, g.dk, g.dv);
      const res: Uint32Array[] = [];
      for (const t of [f.out, f.lse, g.dq, g.dk, g.dv]) res.push(snapshot(await backend.read(t)));
      return res;
    } finally {
      for (const t of owned) {
        try {
          backend.disposeTensor(t);
        } catch {
          /* ignore */
        }
      }
    }
  };
  const problems: string[] = [];
  try {
    const first = await run(a);
    if (backend.supports(caseProblemOf(bCase)).ok) await run(bCase);
    const second = await run(a);
    ['out', 'lse', 'dq', 'dk', 'dv'].forEach((nm, t) => {
      const at = sameBits(first[t], second[t]);
      if (at >= 0) problems.push(`${nm} differs between two identical calls (first at flat index ${at}) on "${a.name}"`);
    });
  } catch (e) {
    problems.push(`a call threw ${describeError(e)}`);
  }
  return result(name, problems, t0, `two runs of "${a.name}" are bit-identical`);
}

export const STREAM_CHECK_NAME = 'extra: stream-ordered calls (streamOf) chain without awaiting, refuse a bad call in the middle at once, and equal the awaited calls bit for bit';

/**
 * Stream order: forward then backward on the forward's outputs, named before they exist, with a
 * bad call (k of another head dim) between them that must throw an FAError at the call and leave
 * the chain intact; the results must be bit-identical to the awaited calls' on the same inputs
 * (a deterministic case, as checkRepeatable's), and sync() must resolve after the reads.
 */
export async function checkStreamOrder(backend: AttentionBackend, opts: { upload?: boolean } = {}): Promise<CaseResult> {
  const t0 = now();
  const name = STREAM_CHECK_NAME;
  const dtype = extraDtype(backend);
  const c = makeCase({ dtype, batch: 2, tq: 33, tk: 47, h: 4, hkv: 2, d: 32, causal: true, deterministic: true, seed: 13 });
  const sup = backend.supports(caseProblemOf(c));
  if (!sup.ok) return skipped(name, sup.reason, t0);
  const i = caseInputs(c);
  const problems: string[] = [];
  const owned: Tensor[] = [];
  try {
    const up = async (t: HostTensor) => {
      if (!opts.upload) return t;
      const d = await backend.upload(t);
      owned.push(d);
      return d;
    };
    const [q, k, v, dO] = [await up(i.q), await up(i.k), await up(i.v), await up(i.dOut)];
    const f = await backend.forward(q, k, v, i.options);
    owned.push(f.out, f.lse);
    const g = await backend.backward(q, k, v, f.out, dO, f.lse, i.options);
    owned.push(g.dq, g.dk, g.dv);
    const want: Uint32Array[] = [];
    for (const t of [f.out, f.lse, g.dq, g.dk, g.dv]) want.push(snapshot(await backend.read(t)));

    const s = streamOf(backend);
    const [sq, sk, sv, sdO] = opts.upload ? [s.upload(i.q), s.upload(i.k), s.upload(i.v), s.upload(i.dOut)] : [i.q, i.k, i.v, i.dOut];
    const sf = s.forward(sq, sk, sv, i.options);
    try {
      const kBad = hostTensor(new Float32Array(numel(i.k.shape) / 2).fill(0.5), [...i.k.shape.slice(0, -1), i.k.shape[3] / 2], dtype);
      s.forward(sq, kBad, sv, i.options);
      problems.push('a stream call with k of another head dim did not throw at the call');
    } catch (e) {
      if (!isFAError(e) || e.code !== 'E_SHAPE') problems.push(`a stream call with k of another head dim threw ${describeError(e)}, not an FAError E_SHAPE`);
    }
    const sg = s.backward(sq, sk, sv, sf.out, sdO, sf.lse, i.options);
    const outs = [sf.out, sf.lse, sg.dq, sg.dk, sg.dv];
    const got = await Promise.all(outs.map((t) => s.read(t)));
    await s.sync();
    ['out', 'lse', 'dq', 'dk', 'dv'].forEach((nm, t) => {
      const at = sameBits(want[t], snapshot(got[t]));
      if (at >= 0) problems.push(`${nm} through the stream differs from the awaited call's (first at flat index ${at})`);
    });
    for (const t of [...outs, sq, sk, sv, sdO]) s.disposeTensor(t);
    await s.sync();
  } catch (e) {
    problems.push(`a call threw ${describeError(e)}`);
  } finally {
    for (const t of owned) {
      try {
        backend.disposeTensor(t);
      } catch {
        /* ignore */
      }
    }
  }
  return result(name, problems, t0, 'forward -> backward through the stream equals the awaited calls bit for bit; a bad call between them was refused at the call');
}

export const BAD_INPUTS_CHECK_NAME = 'extra: bad inputs throw FAError with the right code, and the backend stays usable';

function badInputs(backend: AttentionBackend, dtype: DType): BadCall[] {
  const rng = createRng(99);
  const t = (shape: number[], dt: DType = dtype) => hostTensor(randomValues(rng, numel(shape)), shape, dt);
  const q = t([1, 8, 2, 16]);
  const k = t([1, 8, 2, 16]);
  const v = t([1, 8, 2, 16]);
  const other: DType = dtype === 'f32' ? 'f16' : 'f32';
  const fwd = (a: unknown, b: unknown, c: unknown, o?: unknown) => backend.forward(a as Tensor, b as Tensor, c as Tensor, o as AttentionOptions);
  const lse = hostTensor(new Float32Array(16), [1, 2, 8], 'f32');
  const short: HostTensor = { kind: 'host', dtype, shape: [1, 8, 2, 16], data: allocHost(dtype, 10) as HostData };
  return [
    { what: 'q of rank 3 without cuSeqlens', code: 'E_SHAPE', call: () => fwd(t([8, 2, 16]), k, v) },
    { what: `k of dtype ${other} with q of dtype ${dtype}`, code: 'E_DTYPE', call: () => fwd(q, t([1, 8, 2, 16], other), v) },
    { what: 'H = 3 with Hkv = 2', code: 'E_SHAPE', call: () => fwd(t([1, 8, 3, 16]), k, v) },
    { what: 'q and k with different head dims', code: 'E_SHAPE', call: () => fwd(q, t([1, 8, 2, 8]), t([1, 8, 2, 8])) },
    { what: 'window [-2, 0]', code: 'E_ARG', call: () => fwd(q, k, v, { window: [-2, 0] }) },
    { what: 'softcap -1', code: 'E_ARG', call: () => fwd(q, k, v, { softcap: -1 }) },
    { what: 'scale NaN', code: 'E_ARG', call: () => fwd(q, k, v, { scale: NaN }) },
    { what: 'alibiSlopes of length 3 for H = 2', code: 'E_SHAPE', call: () => fwd(q, k, v, { alibiSlopes: [0.5, 0.25, 0.125] }) },
    { what: 'cuSeqlensQ ending before totalQ', code: 'E_SHAPE', call: () => fwd(t([8, 2, 16]), t([8, 2, 16]), t([8, 2, 16]), { cuSeqlensQ: [0, 3, 6], cuSeqlensK: [0, 4, 8] }) },
    { what: 'data shorter than the shape', code: 'E_SHAPE', call: () => fwd(short, k, v) },
    { what: 'q that is not a tensor', code: 'E_ARG', call: () => fwd({}, k, v) },
    { what: 'backward with lse of the wrong shape', code: 'E_SHAPE', call: () => backend.backward(q, k, v, q, q, hostTensor(new Float32Array(8), [1, 1, 8], 'f32')) },
    { what: 'backward with dOut of the wrong shape', code: 'E_SHAPE', call: () => backend.backward(q, k, v, q, t([1, 8, 2, 8]), lse) },
    // the options since FlashAttention-2 (issue 26)
    { what: 'sinks of length 3 for H = 2', code: 'E_SHAPE', call: () => fwd(q, k, v, { sinks: [0.5, 1, 2] }) },
    { what: 'a NaN sink', code: 'E_ARG', call: () => fwd(q, k, v, { sinks: [0.5, NaN] }) },
    { what: 'dropout p = 1', code: 'E_ARG', call: () => fwd(q, k, v, { dropout: { p: 1, seed: 3 } }) },
    { what: 'dropout p = -0.1', code: 'E_ARG', call: () => fwd(q, k, v, { dropout: { p: -0.1, seed: 3 } }) },
    { what: 'a dropout seed of 1.5', code: 'E_ARG', call: () => fwd(q, k, v, { dropout: { p: 0.1, seed: 1.5 } }) },
    { what: 'v with other heads than k (a head dim of its own is fine, nothing else)', code: 'E_SHAPE', call: () => fwd(q, k, t([1, 8, 1, 16])) },
    { what: "backward with dOut of q's shape when v has its own head dim", code: 'E_SHAPE', call: () => backend.backward(q, k, t([1, 8, 2, 8]), t([1, 8, 2, 8]), q, lse) },
  ];
}

/**
 * Bad inputs: each must be refused with an FAError of the expected code (the codes
 * describeProblem/describeBackward give), and afterwards a valid call must still pass.
 */
export async function checkBadInputs(backend: AttentionBackend, opts: { upload?: boolean } = {}): Promise<CaseResult> {
  const t0 = now();
  const name = BAD_INPUTS_CHECK_NAME;
  const dtype = extraDtype(backend);
  const problems: string[] = [];
  for (const bi of badInputs(backend, dtype)) {
    const wrong = await refusalProblem(bi);
    if (wrong) problems.push(wrong);
  }
  const after = makeCase({ dtype, batch: 2, tq: 17, tk: 33, h: 2, hkv: 1, d: 16, causal: true, seed: 5 });
  const r = await checkCase(backend, after, opts);
  if (!r.pass) problems.push(`a valid call after the bad ones failed: ${r.message}`);
  return result(name, problems, t0, `${badInputs(backend, dtype).length} bad inputs refused with the right codes; the backend still computes correctly`);
}

/** The generic extra checks, by name. */
export const DROPOUT_MASK_CHECK_NAME = "extra: dropout drops exactly philox's entries (DESIGN.md's keying), the same mask in every dtype and call";

/**
 * The dropout mask an engine applies is philox.ts's: with V the identity (D = Tk, one-hot value
 * rows), out[i] = P_i∘M_i/(1 − p), so out's zero pattern is the mask itself (P > 0 on every
 * visible key). Varlen (two sequences, one empty of queries), GQA and a 64-bit seed with an
 * offset; the zeros must match exactly, the kept values the reference (1e-5 in f32).
 */
export async function checkDropoutMask(backend: AttentionBackend, opts: { upload?: boolean } = {}): Promise<CaseResult> {
  const t0 = now();
  const name = DROPOUT_MASK_CHECK_NAME;
  const dtype = extraDtype(backend);
  const H = 4, HKV = 2, T = 16;
  const lensQ = [9, 0, 13], lensK = [T, T, T];
  const cuQ = [0, 9, 9, 22], cuK = [0, T, 2 * T, 3 * T];
  const options: AttentionOptions = { cuSeqlensQ: cuQ, cuSeqlensK: cuK, dropout: { p: 0.4, seed: 2 ** 40 + 12345, offset: 77 } };
  const rng = createRng(99);
  const q = hostTensor(randomValues(rng, cuQ[3] * H * T), [cuQ[3], H, T], dtype);
  const k = hostTensor(randomValues(rng, cuK[3] * HKV * T), [cuK[3], HKV, T], dtype);
  const vv = new Float32Array(cuK[3] * HKV * T);
  for (let row = 0; row < cuK[3]; row++) for (let g = 0; g < HKV; g++) vv[(row * HKV + g) * T + (row % T)] = 1;
  const v = hostTensor(vv, [cuK[3], HKV, T], dtype);
  const p = describeProblem(q, k, v, options);
  const sup = backend.supports(p);
  if (!sup.ok) return skipped(name, sup.reason, t0);
  const problems: string[] = [];
  const owned: Tensor[] = [];
  try {
    const up = uploader(backend, opts.upload, owned);
    const f = await backend.forward(await up(q), await up(k), await up(v), options);
    owned.push(f.out, f.lse);
    const out = tensorValues(await backend.read(f.out));
    const ref = referenceForward(q, k, v, options);
    let dropped = 0, total = 0;
    for (let b = 0; b < 3; b++) {
      for (let i = 0; i < lensQ[b]; i++) {
        for (let h = 0; h < H; h++) {
          for (let j = 0; j < lensK[b]; j++) {
            const x = ((cuQ[b] + i) * H + h) * T + j;
            const keeps = dropoutKeeps(p.dropout!, b * H + h, i, j);
            total++;
            if (!keeps) dropped++;
            if (keeps !== (out[x] !== 0)) {
              problems.push(`out[seq ${b}, i=${i}, h=${h}] entry ${j} is ${out[x]}: philox ${keeps ? 'keeps' : 'drops'} key ${j} of that row`);
            } else if (keeps && !(Math.abs(out[x] - ref.out[x]) <= (dtype === 'f32' ? 1e-5 : 2e-2) * Math.abs(ref.out[x]) + 1e-7)) {
              problems.push(`out[seq ${b}, i=${i}, h=${h}] entry ${j} is ${out[x]}, the reference ${ref.out[x]}`);
            }
            if (problems.length > 6) break;
          }
        }
      }
    }
    if (!problems.length && (dropped === 0 || dropped === total)) problems.push(`the mask dropped ${dropped} of ${total} entries at p = 0.4`);
  } catch (e) {
    problems.push(`forward threw ${describeError(e)}`);
  } finally {
    disposeAll(backend, owned);
  }
  return result(name, problems, t0, "out's zeros are philox's dropped entries");
}

export const EXTRA_CHECKS: readonly { readonly name: string; readonly run: (b: AttentionBackend, o?: { upload?: boolean }) => Promise<CaseResult> }[] = [
  { name: NAN_CHECK_NAME, run: checkNaNPropagation },
  { name: REPEAT_CHECK_NAME, run: checkRepeatable },
  { name: BAD_INPUTS_CHECK_NAME, run: checkBadInputs },
  { name: STREAM_CHECK_NAME, run: checkStreamOrder },
  { name: DROPOUT_MASK_CHECK_NAME, run: checkDropoutMask },
];

export interface ConformanceOptions extends ConformanceCaseOptions, CheckOptions {
  /** The cases to run (default: conformanceCases(options)). */
  readonly cases?: readonly ConformanceCase[];
  /**
   * Also run the KV-cache cases and checks (kvcache-cases.ts; forwardWithKVCache). Default: true
   * unless `cases` is given (an explicit list stays exactly that list).
   */
  readonly kvCache?: boolean;
  /** The KV-cache cases to run (default: kvCacheCases with these options' seed, dtypes, maxD, quick). */
  readonly kvCacheCases?: readonly KVCacheCase[];
  /** Run the extra checks too (default true). */
  readonly extras?: boolean;
  /** Called after each case. */
  readonly onResult?: (r: CaseResult) => void;
}

export interface ConformanceSummary {
  readonly backend: string;
  readonly device: string;
  readonly total: number;
  readonly passed: number;
  readonly failed: number;
  readonly skipped: readonly { readonly name: string; readonly reason: string }[];
  readonly failures: readonly { readonly name: string; readonly message: string }[];
  readonly results: readonly CaseResult[];
  readonly ms: number;
}

/** Whether a conformance run includes the KV-cache cases and checks. */
export function kvEnabled(opts: ConformanceOptions): boolean {
  return opts.kvCache ?? (opts.cases === undefined || opts.kvCacheCases !== undefined);
}

/** The KV-cache cases a conformance run includes. */
export function kvCasesOf(opts: ConformanceOptions): readonly KVCacheCase[] {
  if (!kvEnabled(opts)) return [];
  return opts.kvCacheCases ?? kvCacheCases({ seed: opts.seed, dtypes: opts.dtypes, maxD: opts.maxD, quick: opts.quick });
}

/** Runs every case (and the extra checks) against a backend, one after another. */
export async function runConformance(backend: AttentionBackend, opts: ConformanceOptions = {}): Promise<ConformanceSummary> {
  const t0 = now();
  const cases = opts.cases ?? conformanceCases(opts);
  const kv = kvCasesOf(opts);
  const results: CaseResult[] = [];
  const add = (r: CaseResult) => {
    results.push(r);
    opts.onResult?.(r);
  };
  for (const c of cases) add(await checkCase(backend, c, opts));
  for (const c of kv) add(await checkKVCacheCase(backend, c, opts));
  if (opts.extras !== false) {
    for (const x of EXTRA_CHECKS) add(await x.run(backend, opts));
    if (kvEnabled(opts)) for (const x of KV_EXTRA_CHECKS) add(await x.run(backend, opts));
  }
  return summarize(backend, results, now() - t0);
}

/** Builds a summary from results. */
export function summarize(backend: { name: string; device: string }, results: readonly CaseResult[], ms = 0): ConformanceSummary {
  return {
    backend: backend.name,
    device: backend.device,
    total: results.length,
    passed: results.filter((r) => r.pass && !r.skipped).length,
    failed: results.filter((r) => !r.pass).length,
    skipped: results.filter((r) => r.skipped).map((r) => ({ name: r.name, reason: r.reason ?? '' })),
    failures: results.filter((r) => !r.pass).map((r) => ({ name: r.name, message: r.message })),
    results,
    ms,
  };
}

/** "conformance cpu (CPU ×2): 310 passed, 10 skipped (D=1 unsupported ×10), 0 failed". */
export function formatSummary(s: ConformanceSummary): string {
  const reasons = new Map<string, number>();
  for (const k of s.skipped) reasons.set(k.reason, (reasons.get(k.reason) ?? 0) + 1);
  const why = [...reasons].map(([r, n]) => `${r} ×${n}`).join('; ');
  return `conformance ${s.backend} (${s.device}): ${s.passed} passed, ${s.skipped.length} skipped${why ? ` (${why})` : ''}, ${s.failed} failed${s.ms ? ` in ${(s.ms / 1000).toFixed(1)} s` : ''}`;
}
