/**
 * Ring attention (context parallelism), independent of the engine:
 *
 *     forward, on rank r of N, for step s = 0 … N−1:
 *         start exchange: send the K/V shard held now to r+1, receive the next from r−1
 *         for each call of the step's plan (plan.ts):
 *             (out, lse) = engine.forward(local q, visiting k, v, call options)
 *             merge (out, lse) into the running (out, lse)            — online softmax
 *         wait for the exchange
 *     backward, with the global out and lse of the forward, for step s:
 *         start exchange of K/V as above
 *         for each call: (dq, dk, dv) = engine.backward(q, k, v, out, dOut, lse, call options)
 *             dq_acc += dq;  (after the first call) wait for the dK/dV accumulator of the
 *             visiting shard from r−1;  acc += dk, dv
 *         pass the accumulator on to r+1 (it reaches the shard's owner after step N−1)
 *
 * The engine's backward, given the global out and lse, computes exactly one block's share:
 * P = e^(s − lse) is the global probability and rowsum(dO∘out) the global Dvec, so the blocks'
 * dq, dk, dv add up to the whole gradient. (An engine that recomputes out and lse from the
 * block's keys — the CPU engine's exactRowStats — would not; it is refused.)
 * Accumulators are float32; results are rounded to the dtype once. Communication overlaps
 * compute: the next K/V travels while the current one is attended, and a dK/dV accumulator
 * while the next step's first block runs.
 */
import type { AttentionBackend, BackwardResult, ForwardResult } from '../backend.js';
import type { DType } from '../dtype.js';
import { check, FAError } from '../errors.js';
import { describeProblem, type AttentionOptions, type AttentionProblem } from '../problem.js';
import { isHostTensor, type DeviceTensor, type HostTensor, type Tensor } from '../tensor.js';
import { sinkGradientsFromOutputs } from '../sinks.js';
import { optionSupport } from '../option-support.js';
import type { Communicator } from './communicator.js';
import { checkLayout, rangeRows, type ShardLayout } from './layout.js';
import type { ShardOps } from './ops.js';
import { callOptions, planRing, type RingPlan } from './plan.js';

/** What a timeline observer sees (benchmarks): compute of a step, and waits on exchanges. */
export interface RingEvent {
  readonly what: 'compute' | 'wait';
  readonly phase: 'start' | 'end';
  readonly step: number;
  readonly pass: 'forward' | 'backward';
  /** performance.now() */
  readonly t: number;
}

export interface RingContext {
  /** Computes every block; its tensors are what `ops` and `comm` handle. */
  readonly engine: AttentionBackend;
  readonly ops: ShardOps;
  readonly comm: Communicator;
  /** Which tokens each rank holds; layout.ranks must equal comm.size. */
  readonly layout: ShardLayout;
  readonly onEvent?: (e: RingEvent) => void;
}

interface Setup {
  readonly p: AttentionProblem;
  readonly plan: RingPlan;
  /** Sequences the packed view folds (dense B; 1 for varlen). */
  readonly reps: number;
  readonly packQ: readonly number[];
  readonly packK: readonly number[];
  /** v's packed shard shape, and out's (their head dim is Dv). */
  readonly packV: readonly number[];
  readonly packO: readonly number[];
  readonly lseShape: readonly number[];
}

const shapeStr = (s: readonly number[]) => `[${s.join(', ')}]`;

function tensorLike(t: unknown, what: string): Tensor {
  const x = t as Tensor;
  check(typeof x === 'object' && x !== null && (x.kind === 'host' || x.kind === 'device') && Array.isArray(x.shape), 'E_ARG', `${what} must be a tensor`);
  return x;
}

/** A stand-in with a shape and dtype only, so describeProblem can validate global shapes. */
function virtual(dtype: DType, shape: readonly number[]): DeviceTensor {
  return { kind: 'device', backend: 'ring', dtype, shape, handle: null, disposed: false };
}

/**
 * Validates a rank's shards against the layout, resolves the global problem and plans every
 * step; every check that can fail does so here, before any communication, identically on all
 * ranks.
 */
function prepare(ctx: RingContext, qIn: unknown, kIn: unknown, vIn: unknown, opts: AttentionOptions): Setup {
  check(typeof ctx === 'object' && ctx !== null && ctx.engine && ctx.ops && ctx.comm && ctx.layout, 'E_ARG', 'ring attention needs { engine, ops, comm, layout }');
  const { comm, layout, engine } = ctx;
  checkLayout(layout);
  check(comm.size === layout.ranks, 'E_ARG', `the communicator has ${comm.size} ranks, the layout ${layout.ranks}`);
  const rank = comm.rank;
  check(Number.isSafeInteger(rank) && rank >= 0 && rank < comm.size, 'E_ARG', `communicator rank ${rank} is outside [0, ${comm.size})`);
  const q = tensorLike(qIn, 'q');
  const k = tensorLike(kIn, 'k');
  const v = tensorLike(vIn, 'v');
  const varlen = opts.cuSeqlensQ !== undefined || opts.cuSeqlensK !== undefined;
  const rank4 = !varlen;
  check(q.shape.length === (rank4 ? 4 : 3) && k.shape.length === q.shape.length, 'E_SHAPE', `shards must have layout ${rank4 ? '[B, T, H, D]' : '[T, H, D] (varlen)'}; got q ${shapeStr(q.shape)}, k ${shapeStr(k.shape)}`);
  check(shapeStr(k.shape.slice(0, -1)) === shapeStr(v.shape.slice(0, -1)), 'E_SHAPE', `k and v shards must have the same shape but for the head dim; got ${shapeStr(k.shape)} and ${shapeStr(v.shape)}`);
  const nq = rangeRows(layout.q[rank]);
  const nk = rangeRows(layout.k[rank]);
  const ax = rank4 ? 1 : 0;
  check(q.shape[ax] === nq && k.shape[ax] === nk, 'E_SHAPE', `rank ${rank} holds ${nq} query and ${nk} key tokens in this layout; its shards have ${q.shape[ax]} and ${k.shape[ax]}`);
  const gq = [...q.shape];
  const gk = [...k.shape];
  const gv = [...v.shape];
  gq[ax] = layout.tq;
  gk[ax] = layout.tk;
  gv[ax] = layout.tk;
  const p = describeProblem(virtual(q.dtype, gq), virtual(k.dtype, gk), virtual(v.dtype, gv), opts);
  // (callOptions leaves the options the ring does not split out of the blocks: refuse those here)
  const opt = optionSupport(p, 'ring', { sinks: true, vDim: true });
  if (!opt.ok) throw new FAError('E_UNSUPPORTED', `context parallelism: ${opt.reason}`);
  check(engine.dtypes.includes(p.dtype), 'E_UNSUPPORTED', `engine ${engine.name} does not compute ${p.dtype} (it has ${engine.dtypes.join(', ')})`);
  const plan = planRing(p, layout, rank);
  const reps = varlen ? 1 : p.batch;
  const packQ = [plan.rowsQ, p.h, p.d];
  if (p.sinks) {
    const sp = describeProblem(virtual(p.dtype, packQ), virtual(p.dtype, [0, p.hkv, p.d]), virtual(p.dtype, [0, p.hkv, p.vDim]), sinkBlockOptions(p, plan.rowsQ));
    const s = engine.supports(sp);
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `context parallelism: engine ${engine.name} declines the sinks' block: ${s.reason}`);
  }
  for (const st of plan.steps) {
    for (const call of st.calls) {
      const cp = describeProblem(virtual(p.dtype, packQ), virtual(p.dtype, [plan.rowsK[st.src], p.hkv, p.d]), virtual(p.dtype, [plan.rowsK[st.src], p.hkv, p.vDim]), callOptions(p, call));
      const s = engine.supports(cp);
      if (!s.ok) throw new FAError('E_UNSUPPORTED', `context parallelism: engine ${engine.name} declines a block of ring step ${st.step}: ${s.reason}`);
    }
  }
  return {
    p, plan, reps, packQ, packK: [plan.rowsK[rank], p.hkv, p.d], packV: [plan.rowsK[rank], p.hkv, p.vDim], packO: [plan.rowsQ, p.h, p.vDim],
    lseShape: varlen ? [p.h, nq] : [p.batch, p.h, nq],
  };
}

function emit(ctx: RingContext, what: RingEvent['what'], phase: RingEvent['phase'], step: number, pass: RingEvent['pass']): void {
  if (ctx.onEvent) ctx.onEvent({ what, phase, step, pass, t: typeof performance !== 'undefined' ? performance.now() : Date.now() });
}

/** A rank that fails aborts its communicator, so that its peers fail instead of waiting for it. */
async function abortOnFailure<T>(ctx: RingContext, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    try {
      ctx?.comm?.abort?.(e);
    } catch {
      /* keep the original error */
    }
    throw e;
  }
}

/** Frees what a failed or finished call made, never the caller's tensors. */
class Owned {
  private readonly set = new Set<Tensor>();
  constructor(private readonly ops: ShardOps) {}
  add<T extends Tensor>(t: T): T {
    this.set.add(t);
    return t;
  }
  free(t: Tensor | undefined): void {
    if (t && this.set.delete(t)) this.ops.dispose(t);
  }
  keep(t: Tensor): void {
    this.set.delete(t);
  }
  freeAll(): void {
    for (const t of this.set) {
      try {
        this.ops.dispose(t);
      } catch {
        /* keep the original error */
      }
    }
    this.set.clear();
  }
}

/** The next K/V shard's receive buffers and the exchange that fills them (none after the last step). */
async function startKv(ctx: RingContext, s: Setup, step: number, kv: readonly Tensor[], owned: Owned): Promise<{ recv: Tensor[]; done: Promise<void> } | undefined> {
  const { plan, p } = s;
  if (step + 1 >= plan.size) return undefined;
  const rows = plan.rowsK[plan.steps[step + 1].src];
  const recv = [owned.add(await ctx.ops.alloc(p.dtype, [rows, p.hkv, p.d])), owned.add(await ctx.ops.alloc(p.dtype, [rows, p.hkv, p.vDim]))];
  const done = ctx.comm.exchange(kv, recv);
  done.catch(() => undefined); // awaited after the step's compute; never an unhandled rejection meanwhile
  return { recv, done };
}

/**
 * Forward attention of this rank's query shard against every rank's K/V shard. q, k, v are the
 * rank's shards (dense [B, n, H, D] or varlen [n, H, D], n = the rows its layout ranges hold);
 * options are those of the whole problem (varlen cuSeqlens are global, over the packed axis).
 * Returns this rank's out (q's shape and dtype) and LSE ([B, H, n] or [H, n]), equal to the
 * rows of single-engine attention over the whole sequence.
 */
/** This rank's share of dsinks (core's sinks.ts over its rows: out, dOut [rows, H, D], lse [H, rows]). */
function rankSinkGradients(p: AttentionProblem, rows: number, out: Tensor, dOut: Tensor, lse: Tensor): HostTensor {
  for (const [what, t] of [['out', out], ['dOut', dOut], ['lse', lse]] as const) {
    check(isHostTensor(t), 'E_UNSUPPORTED', `context parallelism: dsinks are formed from host tensors; ${what} is a device tensor`);
  }
  const rowP = describeProblem(virtual(p.dtype, [rows, p.h, p.d]), virtual(p.dtype, [0, p.hkv, p.d]), virtual(p.dtype, [0, p.hkv, p.vDim]), sinkBlockOptions(p, rows));
  const ds = sinkGradientsFromOutputs(rowP, out as HostTensor, dOut as HostTensor, (lse as HostTensor).data as Float32Array);
  return { kind: 'host', dtype: 'f32', shape: [p.h], data: ds };
}

/** The options of the sinks' block: this rank's rows as one sequence that sees no key. */
export function sinkBlockOptions(p: AttentionProblem, rows: number): AttentionOptions {
  return { cuSeqlensQ: [0, rows], cuSeqlensK: [0, 0], sinks: p.sinks };
}

export function ringForward(ctx: RingContext, q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): Promise<ForwardResult> {
  return abortOnFailure(ctx, () => forward(ctx, q, k, v, opts));
}

async function forward(ctx: RingContext, q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions): Promise<ForwardResult> {
  const s = prepare(ctx, q, k, v, opts);
  const { engine, ops } = ctx;
  const { p, plan } = s;
  const owned = new Owned(ops);
  try {
    const qP = ops.view(q, s.packQ);
    let kv: Tensor[] = [ops.view(k, s.packK), ops.view(v, s.packV)];
    const accOut = owned.add(await ops.alloc('f32', s.packO, 0));
    const accLse = owned.add(await ops.alloc('f32', [p.h, plan.rowsQ], -Infinity));
    for (const st of plan.steps) {
      const next = await startKv(ctx, s, st.step, kv, owned);
      emit(ctx, 'compute', 'start', st.step, 'forward');
      for (const call of st.calls) {
        const r = await engine.forward(qP, kv[0], kv[1], callOptions(p, call));
        try {
          await ops.mergeForward(accOut, accLse, r.out, r.lse);
        } finally {
          engine.disposeTensor(r.out);
          engine.disposeTensor(r.lse);
        }
      }
      emit(ctx, 'compute', 'end', st.step, 'forward');
      if (next) {
        emit(ctx, 'wait', 'start', st.step, 'forward');
        await next.done;
        emit(ctx, 'wait', 'end', st.step, 'forward');
        for (const t of kv) owned.free(t);
        kv = next.recv;
      }
    }
    if (p.sinks) {
      // The sinks join each row once, not once per visiting shard (callOptions leaves them out of
      // the blocks): a call over no keys, with them, gives out 0 and lse = s_h — merged like any part.
      const emptyK = owned.add(await ops.alloc(p.dtype, [0, p.hkv, p.d]));
      const emptyV = p.vDim === p.d ? emptyK : owned.add(await ops.alloc(p.dtype, [0, p.hkv, p.vDim]));
      const r = await engine.forward(qP, emptyK, emptyV, sinkBlockOptions(p, plan.rowsQ));
      try {
        await ops.mergeForward(accOut, accLse, r.out, r.lse);
      } finally {
        engine.disposeTensor(r.out);
        engine.disposeTensor(r.lse);
      }
    }
    const out = owned.add(await ops.convert(accOut, p.dtype));
    let lse: Tensor;
    if (s.reps > 1) lse = owned.add(await ops.transposeLse(accLse, s.reps, 'batched'));
    else {
      lse = ops.view(accLse, s.lseShape);
      owned.keep(accLse);
    }
    owned.keep(out);
    owned.keep(lse);
    return { out: ops.view(out, [...q.shape.slice(0, -1), p.vDim]), lse };
  } finally {
    owned.freeAll();
  }
}

/**
 * Gradients of this rank's shards: dq (q's shape) and dk, dv (k's shape), given the rank's
 * out, dOut and lse from ringForward (the global results for its rows).
 */
export function ringBackward(ctx: RingContext, q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions = {}): Promise<BackwardResult> {
  return abortOnFailure(ctx, () => backward(ctx, q, k, v, out, dOut, lse, opts));
}

async function backward(ctx: RingContext, q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts: AttentionOptions): Promise<BackwardResult> {
  const s = prepare(ctx, q, k, v, opts);
  const { engine, ops, comm } = ctx;
  const { p, plan } = s;
  const outShape = [...q.shape.slice(0, -1), p.vDim];
  for (const [name, t] of [['out', out], ['dOut', dOut]] as const) {
    const x = tensorLike(t, name);
    check(x.dtype === p.dtype && shapeStr(x.shape) === shapeStr(outShape), 'E_SHAPE', `${name} must have ${p.vDim === p.d ? "q's shard shape" : "q's shard shape with v's head dim"} ${shapeStr(outShape)} and dtype ${p.dtype}; got ${x.dtype}${shapeStr(x.shape)}`);
  }
  const l = tensorLike(lse, 'lse');
  check(l.dtype === 'f32' && shapeStr(l.shape) === shapeStr(s.lseShape), 'E_SHAPE', `lse must be the f32 ${shapeStr(s.lseShape)} ringForward returned for this rank; got ${l.dtype}${shapeStr(l.shape)}`);
  const recomputes = (engine as { recomputesRowStats?: (d: DType) => boolean }).recomputesRowStats;
  if (typeof recomputes === 'function' && recomputes.call(engine, p.dtype)) {
    throw new FAError('E_UNSUPPORTED', `context parallelism: engine ${engine.name} recomputes each row's out and lse in its ${p.dtype} backward (exactRowStats), which is exact for a whole problem but not for one block of keys; create it with exactRowStats: false (createCpuBackend({ exactRowStats: false }))`);
  }
  const owned = new Owned(ops);
  try {
    const qP = ops.view(q, s.packQ);
    const outP = ops.view(out, s.packO);
    const dOutP = ops.view(dOut, s.packO);
    const lseP = s.reps > 1 ? owned.add(await ops.transposeLse(lse, s.reps, 'packed')) : ops.view(lse, [p.h, plan.rowsQ]);
    const dqAcc = owned.add(await ops.alloc('f32', s.packQ, 0));
    let kv: Tensor[] = [ops.view(k, s.packK), ops.view(v, s.packV)];
    const kShape = (src: number) => [plan.rowsK[src], p.hkv, p.d];
    const vShape = (src: number) => [plan.rowsK[src], p.hkv, p.vDim];
    let acc: Tensor[] = [owned.add(await ops.alloc('f32', kShape(comm.rank), 0)), owned.add(await ops.alloc('f32', vShape(comm.rank), 0))];
    let incoming: Promise<void> = Promise.resolve();
    for (const st of plan.steps) {
      const next = await startKv(ctx, s, st.step, kv, owned);
      emit(ctx, 'compute', 'start', st.step, 'backward');
      let ready = st.step === 0;
      for (const call of st.calls) {
        const g = await engine.backward(qP, kv[0], kv[1], outP, dOutP, lseP, callOptions(p, call));
        try {
          await ops.accumulate(dqAcc, g.dq);
          if (!ready) {
            emit(ctx, 'wait', 'start', st.step, 'backward');
            await incoming;
            emit(ctx, 'wait', 'end', st.step, 'backward');
            ready = true;
          }
          await ops.accumulate(acc[0], g.dk);
          await ops.accumulate(acc[1], g.dv);
        } finally {
          engine.disposeTensor(g.dq);
          engine.disposeTensor(g.dk);
          engine.disposeTensor(g.dv);
        }
      }
      emit(ctx, 'compute', 'end', st.step, 'backward');
      if (!ready) await incoming;
      // pass the accumulator on with its shard; after the last step it reaches the owner
      const to = st.step + 1 < plan.size ? plan.steps[st.step + 1].src : comm.rank;
      const recv = [owned.add(await ops.alloc('f32', kShape(to))), owned.add(await ops.alloc('f32', vShape(to)))];
      const sent = acc;
      incoming = comm.exchange(sent, recv).then(() => {
        for (const t of sent) owned.free(t);
      });
      incoming.catch(() => undefined);
      acc = recv;
      if (next) {
        emit(ctx, 'wait', 'start', st.step, 'backward');
        await next.done;
        emit(ctx, 'wait', 'end', st.step, 'backward');
        for (const t of kv) owned.free(t);
        kv = next.recv;
      }
    }
    await incoming;
    const dq = owned.add(await ops.convert(dqAcc, p.dtype));
    const dk = owned.add(await ops.convert(acc[0], p.dtype));
    const dv = owned.add(await ops.convert(acc[1], p.dtype));
    for (const t of [dq, dk, dv]) owned.keep(t);
    const grads = { dq: ops.view(dq, q.shape), dk: ops.view(dk, k.shape), dv: ops.view(dv, v.shape) };
    // dsinks: this rank's rows' share (sum it over the ranks); host tensors only
    return p.sinks ? { ...grads, dsinks: rankSinkGradients(p, s.plan.rowsQ, outP, dOutP, lseP) } : grads;
  } finally {
    owned.freeAll();
  }
}

/** The plan this rank would run (for tests, load accounting and benchmarks). */
export function ringPlan(ctx: Pick<RingContext, 'engine' | 'ops' | 'comm' | 'layout'>, q: Tensor, k: Tensor, v: Tensor, opts: AttentionOptions = {}): RingPlan {
  return prepare(ctx as RingContext, q, k, v, opts).plan;
}

