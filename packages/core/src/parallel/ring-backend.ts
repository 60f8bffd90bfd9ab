/**
 * Ring attention over N ranks presented as one AttentionBackend on whole (unsharded) host
 * tensors: it validates the problem, shards q, k, v (and out, dOut, lse) with the layout, runs
 * every rank's ringForward/ringBackward through a runner, and joins the shards. That lets the
 * conformance kit check the ring exactly like any engine, against the float64 reference.
 *
 * Runners: worker threads with a CPU engine per rank (inprocess.ts, createInProcessRingBackend),
 * or N concurrent tasks on one engine with createLocalRing (createLocalRingBackend: also for a
 * GPU engine on one device), or given communicators (a single-rank NCCL ring).
 */
import { optionSupport } from '../option-support.js';
import type { AttentionBackend, BackwardResult, ForwardResult, Support } from '../backend.js';
import type { DType } from '../dtype.js';
import { FAError, isFAError } from '../errors.js';
import { describeBackward, describeProblem, type AttentionOptions, type AttentionProblem } from '../problem.js';
import { describeKVCacheProblem, hostIndexTensor, isDeviceIndexTensor, writeHostIndex, type HostIndexTensor } from '../kvcache.js';
import { isHostTensor, tensor, type HostTensor, type Tensor } from '../tensor.js';
import type { Communicator } from './communicator.js';
import { contiguousLayout, zigzagLayout, zigzagVarlenLayout, type ShardLayout } from './layout.js';
import { createLocalRing } from './local-ring.js';
import type { ShardOps } from './ops.js';
import { callOptions, planRing } from './plan.js';
import { ringBackward, ringForward, sinkBlockOptions } from './ring.js';
import { joinShards, splitShards, tokenAxis } from './shard.js';

/** One rank's inputs, as host tensors. */
export interface RankShards {
  readonly q: HostTensor;
  readonly k: HostTensor;
  readonly v: HostTensor;
  readonly out?: HostTensor;
  readonly dOut?: HostTensor;
  readonly lse?: HostTensor;
}

/** Runs every rank's part of a ring pass; results are host tensors, one entry per rank. */
export interface RingRunner {
  forward(layout: ShardLayout, shards: readonly RankShards[], opts: AttentionOptions): Promise<{ out: HostTensor; lse: HostTensor }[]>;
  /** With sinks, each rank's result also has its rows' share of dsinks (ring.ts ringBackward). */
  backward(layout: ShardLayout, shards: readonly RankShards[], opts: AttentionOptions): Promise<{ dq: HostTensor; dk: HostTensor; dv: HostTensor; dsinks?: HostTensor }[]>;
  dispose(): Promise<void>;
}

export type LayoutKind = 'zigzag' | 'contiguous';

/** The layout a ring backend uses for a problem: zigzag (per sequence for varlen) or contiguous. */
export function layoutFor(p: AttentionProblem, ranks: number, kind: LayoutKind = 'zigzag'): ShardLayout {
  if (p.varlen) return kind === 'zigzag' ? zigzagVarlenLayout(ranks, p.cuSeqlensQ, p.cuSeqlensK) : contiguousLayout(ranks, p.totalQ, p.totalK);
  return kind === 'zigzag' ? zigzagLayout(ranks, p.tq, p.tk) : contiguousLayout(ranks, p.tq, p.tk);
}

export interface RingBackendOptions {
  readonly name: string;
  readonly device: string;
  readonly ranks: number;
  readonly layout?: LayoutKind;
  readonly dtypes: readonly DType[];
  /** The engine each rank runs (asked about every block in supports()). */
  readonly supportsBlock: (p: AttentionProblem) => Support;
  readonly runner: RingRunner;
}

/** Why a ring backend declines KV-cache calls. */
const KV_REASON = 'ring attention shards dense calls over ranks, not KV-cache calls (a decode step reads its cache once: run it on one engine)';

function host(t: Tensor, what: string): HostTensor {
  if (isHostTensor(t)) return t;
  throw new FAError('E_ARG', `${what} is a device tensor; the ring backend takes whole host tensors and shards them itself`);
}

export function createRingBackend(o: RingBackendOptions): AttentionBackend {
  let disposed = false;
  const alive = () => {
    if (disposed) throw new FAError('E_DEVICE', `backend ${o.name} was disposed`);
  };
  const kind = o.layout ?? 'zigzag';
  const supports = (p: AttentionProblem): Support => {
    if (!o.dtypes.includes(p.dtype)) return { ok: false, reason: `the ranks' engine does not compute ${p.dtype}` };
    const opt = optionSupport(p, 'ring', { sinks: true, vDim: true });
    if (!opt.ok) return opt;
    try {
      const layout = layoutFor(p, o.ranks, kind);
      for (let r = 0; r < o.ranks; r++) {
        const plan = planRing(p, layout, r);
        if (p.sinks) {
          // ring.ts merges the sinks in as one more block: a call over no keys, with them
          const v = (s: number[]) => ({ kind: 'device' as const, backend: 'ring', dtype: p.dtype, shape: s, handle: null, disposed: false });
          const sp = describeProblem(v([plan.rowsQ, p.h, p.d]), v([0, p.hkv, p.d]), v([0, p.hkv, p.vDim]), sinkBlockOptions(p, plan.rowsQ));
          const s = o.supportsBlock(sp);
          if (!s.ok) return { ok: false, reason: `the sinks' block of rank ${r} is declined by the ranks' engine: ${s.reason}` };
        }
        for (const st of plan.steps) {
          for (const call of st.calls) {
            const v = (s: number[]) => ({ kind: 'device' as const, backend: 'ring', dtype: p.dtype, shape: s, handle: null, disposed: false });
            const cp = describeProblem(v([plan.rowsQ, p.h, p.d]), v([plan.rowsK[st.src], p.hkv, p.d]), v([plan.rowsK[st.src], p.hkv, p.vDim]), callOptions(p, call));
            const s = o.supportsBlock(cp);
            if (!s.ok) return { ok: false, reason: `a block of rank ${r} is declined by the ranks' engine: ${s.reason}` };
          }
        }
      }
    } catch (e) {
      if (isFAError(e) && e.code === 'E_UNSUPPORTED') return { ok: false, reason: e.message };
      throw e;
    }
    return { ok: true };
  };
  const check = (p: AttentionProblem) => {
    const s = supports(p);
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `${o.name}: ${s.reason}`);
  };
  return {
    name: o.name,
    device: o.device,
    dtypes: o.dtypes,
    supports,
    async forward(q, k, v, opts: AttentionOptions = {}): Promise<ForwardResult> {
      alive();
      const p = describeProblem(q, k, v, opts);
      check(p);
      const layout = layoutFor(p, o.ranks, kind);
      const [qs, ks, vs] = [splitShards(host(q, 'q'), layout, 'q'), splitShards(host(k, 'k'), layout, 'k'), splitShards(host(v, 'v'), layout, 'k')];
      const res = await o.runner.forward(layout, qs.map((_, r) => ({ q: qs[r], k: ks[r], v: vs[r] })), opts);
      const out = joinShards(res.map((x) => x.out), layout, 'q');
      const lseParts = res.map((x) => x.lse);
      return { out, lse: joinShards(lseParts, layout, 'q', tokenAxis(lseParts[0], 'lse')) };
    },
    async backward(q, k, v, out, dOut, lse, opts: AttentionOptions = {}): Promise<BackwardResult> {
      alive();
      const p = describeBackward(q, k, v, out, dOut, lse, opts);
      check(p);
      const layout = layoutFor(p, o.ranks, kind);
      const split = (t: Tensor, what: string, side: 'q' | 'k', axis?: number) => splitShards(host(t, what), layout, side, axis);
      const [qs, ks, vs, os, ds] = [split(q, 'q', 'q'), split(k, 'k', 'k'), split(v, 'v', 'k'), split(out, 'out', 'q'), split(dOut, 'dOut', 'q')];
      const ls = split(lse, 'lse', 'q', tokenAxis(lse, 'lse'));
      const res = await o.runner.backward(layout, qs.map((_, r) => ({ q: qs[r], k: ks[r], v: vs[r], out: os[r], dOut: ds[r], lse: ls[r] })), opts);
      const grads = {
        dq: joinShards(res.map((x) => x.dq), layout, 'q'),
        dk: joinShards(res.map((x) => x.dk), layout, 'k'),
        dv: joinShards(res.map((x) => x.dv), layout, 'k'),
      };
      // the blocks' backward needs nothing of the sinks but the global lse; dsinks sums the ranks' shares
      if (!p.sinks) return grads;
      const sum = new Float32Array(p.h);
      for (const x of res) {
        if (!x.dsinks) throw new FAError('E_DEVICE', `${o.name}: a rank returned no dsinks for a call with sinks`);
        const part = x.dsinks.data as Float32Array;
        for (let h = 0; h < p.h; h++) sum[h] += part[h];
      }
      return { ...grads, dsinks: tensor(sum, [p.h], 'f32') };
    },
    supportsKVCache: () => ({ ok: false, reason: KV_REASON }),
    async forwardWithKVCache(q, kCache, vCache, opts) {
      alive();
      describeKVCacheProblem(q, kCache, vCache, opts, o.name); // bad arguments get their own codes
      throw new FAError('E_UNSUPPORTED', `${o.name}: ${KV_REASON}`);
    },
    async uploadIndex(data, shape) {
      alive();
      return hostIndexTensor(o.name, data, shape);
    },
    async writeIndex(t, data, offset = 0) {
      alive();
      writeHostIndex(t, data, offset, o.name);
    },
    async upload(t: HostTensor) {
      alive();
      return host(t, 'upload');
    },
    async read(t: Tensor) {
      return host(t, 'the tensor');
    },
    disposeTensor(t) {
      // host tensors belong to the garbage collector; index tensors are host mirrors
      if (isDeviceIndexTensor(t) && t.backend === o.name) (t as HostIndexTensor).disposed = true;
    },
    async dispose() {
      if (disposed) return;
      disposed = true;
      await o.runner.dispose();
    },
  };
}

export interface LocalRingBackendOptions {
  /** The engine every rank runs on (one device). */
  readonly engine: AttentionBackend;
  readonly ops: ShardOps;
  readonly ranks: number;
  readonly layout?: LayoutKind;
  /** The ranks' communicators (default createLocalRing(ranks, ops)); e.g. one NCCL rank. */
  readonly comms?: () => Communicator[];
}

/**
 * N ranks as concurrent tasks on one engine: shards are uploaded to the engine, every rank runs
 * ringForward/ringBackward with a communicator of one local ring, and results are read back.
 */
export function createLocalRingBackend(o: LocalRingBackendOptions): AttentionBackend {
  const { engine, ops } = o;
  const comms = o.comms ?? (() => createLocalRing(o.ranks, ops));
  const run = async <R>(shards: readonly RankShards[], fn: (comm: Communicator, up: Record<string, Tensor>) => Promise<R>, read: (r: R) => Tensor[]): Promise<HostTensor[][]> => {
    const cs = comms();
    const uploaded: Tensor[] = [];
    const results: R[] = [];
    try {
      const ups = await Promise.all(shards.map(async (s) => {
        const up: Record<string, Tensor> = {};
        for (const [name, t] of Object.entries(s)) if (t) uploaded.push((up[name] = await engine.upload(t as HostTensor)));
        return up;
      }));
      // a rank that fails aborts the ring, so that its peers do not wait for it forever
      const abort = (e: unknown) => {
        for (const c of cs) (c as { abort?: (e: unknown) => void }).abort?.(e);
      };
      const settled = await Promise.allSettled(ups.map((up, r) => fn(cs[r], up).catch((e: unknown) => {
        abort(e);
        throw e;
      })));
      for (const s of settled) if (s.status === 'fulfilled') results.push(s.value);
      const bad = settled.find((s) => s.status === 'rejected') as PromiseRejectedResult | undefined;
      if (bad) throw bad.reason;
      return await Promise.all(results.map((r) => Promise.all(read(r).map((t) => engine.read(t)))));
    } finally {
      for (const r of results) for (const t of read(r)) if (!isHostTensor(t)) engine.disposeTensor(t);
      for (const t of uploaded) if (!isHostTensor(t)) engine.disposeTensor(t);
    }
  };
  const runner: RingRunner = {
    async forward(layout, shards, opts) {
      const res = await run(shards, (comm, u) => ringForward({ engine, ops, comm, layout }, u.q, u.k, u.v, opts), (r) => [r.out, r.lse]);
      return res.map(([out, lse]) => ({ out, lse }));
    },
    async backward(layout, shards, opts) {
      const res = await run(shards, (comm, u) => ringBackward({ engine, ops, comm, layout }, u.q, u.k, u.v, u.out, u.dOut, u.lse, opts), (r) => (r.dsinks ? [r.dq, r.dk, r.dv, r.dsinks] : [r.dq, r.dk, r.dv]));
      return res.map(([dq, dk, dv, dsinks]) => ({ dq, dk, dv, ...(dsinks ? { dsinks } : {}) }));
    },
    async dispose() {},
  };
  return createRingBackend({
    name: `ring-${engine.name}×${o.ranks}`,
    device: `${o.ranks} ranks on ${engine.device}`,
    ranks: o.ranks,
    layout: o.layout,
    dtypes: engine.dtypes,
    supportsBlock: (p) => engine.supports(p),
    runner,
  });
}
