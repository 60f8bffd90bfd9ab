// Context parallelism end to end on the CPU: the conformance kit runs the ring (N = 1 … 8
// ranks, each a worker thread with its own CPU engine, K/V shards travelling through message
// ports) exactly like an engine, against the float64 reference with the kit's tolerance rules —
// forward and backward, causal and not, uneven and empty shards, windows, GQA, varlen
// sequences across shard boundaries. Then what the kit cannot see: overlap of communication
// and compute, failures on one rank, the shard ops.
import { afterAll, describe, expect, it } from 'vitest';
import {
  createCpuBackend,
  createInProcessRingBackend,
  createLocalRing,
  createLocalRingBackend,
  FAError,
  hostShardOps,
  InProcessRing,
  mergeStates,
  createRowState,
  finalizeRow,
  ringBackward,
  ringForward,
  splitShards,
  zigzagLayout,
  type AttentionBackend,
  type Communicator,
  describeKVCacheProblem,
  type RingEvent,
  type Tensor,
  type HostTensor,
} from '../dist/index.js';
import { checkCase, conformanceCases, defineConformanceSuite, hostTensor, makeCase, tensorValues } from '../dist/testing/index.js';

const api = { describe, it, expect, afterAll };

describe('ring attention on worker threads, through the conformance kit', () => {
  // every edge template (53) at least once per N; varied seeds give different random cases
  for (const [ranks, layout, count] of [[1, 'zigzag', 53], [2, 'zigzag', 80], [3, 'zigzag', 60], [4, 'contiguous', 53], [5, 'zigzag', 53], [6, 'zigzag', 53], [7, 'zigzag', 53], [8, 'zigzag', 60]] as const) {
    const ring = createInProcessRingBackend({ ranks, layout });
    afterAll(() => ring.dispose());
    // Dense cases only: the ring shards dense calls; a KV-cache call is one engine's job (its
    // refusal is checked below), so listing the 99 KV cases as skipped per N would say nothing.
    defineConformanceSuite(ring, api, { count, seed: 100 + ranks, name: `${ring.name} ${layout}`, kvCache: false });
  }
});

describe('ring attention declines KV-cache calls with its reason', () => {
  it('supportsKVCache says why; forwardWithKVCache is E_UNSUPPORTED after validating', async () => {
    const ring = createInProcessRingBackend({ ranks: 2 });
    try {
      const f = (n: number) => new Float32Array(n);
      const q = hostTensor(f(1 * 1 * 2 * 8), [1, 1, 2, 8], 'f32');
      const kc = hostTensor(f(1 * 4 * 1 * 8), [1, 4, 1, 8], 'f32');
      const vc = hostTensor(f(1 * 4 * 1 * 8), [1, 4, 1, 8], 'f32');
      const p = describeKVCacheProblem(q, kc, vc, { cacheSeqlens: [2] });
      const s = ring.supportsKVCache(p);
      expect(s.ok).toBe(false);
      expect(s.ok ? '' : s.reason).toMatch(/ring attention shards dense calls/);
      await expect(ring.forwardWithKVCache(q, kc, vc, { cacheSeqlens: [2] })).rejects.toMatchObject({ code: 'E_UNSUPPORTED' });
      await expect(ring.forwardWithKVCache(q, kc, vc, { cacheSeqlens: [9] })).rejects.toMatchObject({ code: 'E_ARG' });
    } finally {
      await ring.dispose();
    }
  });
});

describe('ring attention, larger uneven shards', () => {
  const ring = createInProcessRingBackend({ ranks: 7 });
  afterAll(() => ring.dispose());
  for (const spec of [
    { dtype: 'f32', tq: 1000, d: 16, h: 3, hkv: 1, causal: true },
    { dtype: 'bf16', tq: 601, tk: 777, d: 32, h: 2 },
    { dtype: 'f16', seqlensQ: [300, 1, 0, 250], seqlensK: [300, 40, 9, 250], d: 16, h: 2, causal: true, window: [60, 0] },
  ] as const) {
    const c = makeCase(spec);
    it(c.name, async () => {
      const r = await checkCase(ring, c);
      expect(r.pass, r.message).toBe(true);
    });
  }
});

describe('ring attention on one engine (local ring: N concurrent ranks in this thread)', async () => {
  const cpu = await createCpuBackend({ threads: 0, exactRowStats: false });
  afterAll(() => cpu.dispose());
  for (const ranks of [2, 5]) {
    const ring = createLocalRingBackend({ engine: cpu, ops: hostShardOps, ranks });
    for (const c of conformanceCases({ count: 20, seed: ranks }).filter((x) => x.dtype !== 'f32' || x.id % 2 === 0)) {
      it(`${ring.name} ${c.name}`, async () => {
        const r = await checkCase(ring, c);
        expect(r.pass, r.message).toBe(true);
      });
    }
  }
});

/** Shards of a small causal problem for direct ringForward/ringBackward calls. */
function shards(ranks: number, T = 40, dtype: 'f32' | 'bf16' = 'f32') {
  const c = makeCase({ dtype, tq: T, d: 8, h: 2, causal: true, seed: 5 });
  const vals = (n: number, s: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + s));
  const q = hostTensor(vals(T * 16, 1), [1, T, 2, 8], dtype);
  const k = hostTensor(vals(T * 16, 2), [1, T, 2, 8], dtype);
  const v = hostTensor(vals(T * 16, 3), [1, T, 2, 8], dtype);
  const dO = hostTensor(vals(T * 16, 4), [1, T, 2, 8], dtype);
  const layout = zigzagLayout(ranks, T);
  return { c, q, k, v, dO, layout, qs: splitShards(q, layout, 'q'), ks: splitShards(k, layout, 'k'), vs: splitShards(v, layout, 'k'), dOs: splitShards(dO, layout, 'q') };
}

describe('the ring algorithm', async () => {
  const cpu = await createCpuBackend({ threads: 0, exactRowStats: false });
  afterAll(() => cpu.dispose());

  it('starts sending the next K/V shard before attending the current one (overlap)', async () => {
    const N = 3;
    const s = shards(N);
    const log: string[] = [];
    const inner = createLocalRing(N, hostShardOps);
    const comms: Communicator[] = inner.map((c) => ({
      rank: c.rank,
      size: c.size,
      exchange: (send, recv) => {
        log.push(`${c.rank} exchange`);
        return new Promise((r) => setTimeout(r, 5)).then(() => c.exchange(send, recv)).then(() => {
          log.push(`${c.rank} exchanged`);
        });
      },
    }));
    const events: RingEvent[][] = [[], [], []];
    await Promise.all(comms.map((comm, r) => ringForward({ engine: cpu, ops: hostShardOps, comm, layout: s.layout, onEvent: (e) => events[r].push(e) }, s.qs[r], s.ks[r], s.vs[r], { causal: true })));
    // rank 0: exchange 0 issued before compute of step 0 ends, and completed after it started
    const r0 = log.filter((l) => l.startsWith('0 '));
    expect(r0[0]).toBe('0 exchange');
    const e0 = events[0];
    expect(e0.map((e) => `${e.what}-${e.phase}-${e.step}`)).toEqual([
      'compute-start-0', 'compute-end-0', 'wait-start-0', 'wait-end-0',
      'compute-start-1', 'compute-end-1', 'wait-start-1', 'wait-end-1',
      'compute-start-2', 'compute-end-2',
    ]);
  });

  it('checks shards against the layout before any communication, on every rank', async () => {
    const s = shards(2);
    const comms = createLocalRing(2, hostShardOps);
    const bad = hostTensor(new Float32Array(s.qs[0].data.length - 16), [1, s.qs[0].shape[1] - 1, 2, 8], 'f32');
    const errs = await Promise.allSettled(comms.map((comm, r) => ringForward({ engine: cpu, ops: hostShardOps, comm, layout: s.layout }, r === 0 ? bad : s.qs[r], s.ks[r], s.vs[r], { causal: true })));
    expect(errs[0].status).toBe('rejected');
    expect(((errs[0] as PromiseRejectedResult).reason as FAError).code).toBe('E_SHAPE');
    expect(((errs[0] as PromiseRejectedResult).reason as FAError).message).toMatch(/rank 0 holds 20 query and 20 key tokens/);
    // rank 1 had valid shards; the failed rank aborted the ring, so it fails instead of waiting
    expect(errs[1].status).toBe('rejected');
  });

  it('called directly, refuses dropout on every rank (blocks would drop another mask), and gives each rank its share of dsinks', async () => {
    const s = shards(2);
    const comms = createLocalRing(2, hostShardOps);
    const errs = await Promise.allSettled(comms.map((comm, r) => ringForward({ engine: cpu, ops: hostShardOps, comm, layout: s.layout }, s.qs[r], s.ks[r], s.vs[r], { causal: true, dropout: { p: 0.5, seed: 7 } })));
    for (const e of errs) expect(e.status === 'rejected' && (e.reason as FAError).code).toBe('E_UNSUPPORTED');
    const opts = { causal: true, sinks: [1.5, -0.5] };
    const c2 = createLocalRing(2, hostShardOps);
    const fw = await Promise.all(c2.map((comm, r) => ringForward({ engine: cpu, ops: hostShardOps, comm, layout: s.layout }, s.qs[r], s.ks[r], s.vs[r], opts)));
    const c3 = createLocalRing(2, hostShardOps);
    const bw = await Promise.all(c3.map((comm, r) => ringBackward({ engine: cpu, ops: hostShardOps, comm, layout: s.layout }, s.qs[r], s.ks[r], s.vs[r], fw[r].out, s.dOs[r], fw[r].lse, opts)));
    const whole = await cpu.backward(s.q, s.k, s.v, (await cpu.forward(s.q, s.k, s.v, opts)).out, s.dO, (await cpu.forward(s.q, s.k, s.v, opts)).lse, opts);
    const sum = [0, 1].map((h) => bw.reduce((a, g) => a + ((g.dsinks as HostTensor).data as Float32Array)[h], 0));
    const want = (whole.dsinks as HostTensor).data as Float32Array;
    for (let h = 0; h < 2; h++) expect(Math.abs(sum[h] - want[h])).toBeLessThan(1e-5 * (1 + Math.abs(want[h])));
  });

  it('refuses an engine whose backward recomputes out and lse from the block (CPU exactRowStats)', async () => {
    const exact = await createCpuBackend({ threads: 0 });
    try {
      const s = shards(1, 16, 'bf16');
      const [comm] = createLocalRing(1, hostShardOps);
      const ctx = { engine: exact, ops: hostShardOps, comm, layout: s.layout };
      const f = await ringForward(ctx, s.qs[0], s.ks[0], s.vs[0], { causal: true });
      const e = await ringBackward(ctx, s.qs[0], s.ks[0], s.vs[0], f.out, s.dOs[0], f.lse, { causal: true }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(FAError);
      expect((e as FAError).code).toBe('E_UNSUPPORTED');
      expect((e as FAError).message).toMatch(/exactRowStats: false/);
    } finally {
      await exact.dispose();
    }
  });

  it('a rank whose engine fails mid-ring ends the pass on every rank (no rank waits forever)', async () => {
    let calls = 0;
    const flaky: AttentionBackend = {
      name: 'flaky',
      device: cpu.device,
      dtypes: cpu.dtypes,
      supports: (p) => cpu.supports(p),
      forward: async (q, k, v, o) => {
        if (++calls === 3) throw new FAError('E_OOM', 'flaky: out of memory');
        return cpu.forward(q, k, v, o);
      },
      backward: (...a) => cpu.backward(...a),
      supportsKVCache: (p) => cpu.supportsKVCache(p),
      forwardWithKVCache: (...a) => cpu.forwardWithKVCache(...a),
      uploadIndex: (...a) => cpu.uploadIndex(...a),
      writeIndex: (...a) => cpu.writeIndex(...a),
      upload: (t) => cpu.upload(t),
      read: (t) => cpu.read(t),
      disposeTensor: (t) => cpu.disposeTensor(t),
      dispose: async () => undefined,
    };
    const ring = createLocalRingBackend({ engine: flaky, ops: hostShardOps, ranks: 3 });
    const s = shards(1);
    const e = await ring.forward(s.q, s.k, s.v, { causal: true }).catch((x: unknown) => x);
    expect((e as FAError).code).toBe('E_OOM');
    // and the ring is usable afterwards
    const ok = await ring.forward(s.q, s.k, s.v, { causal: true });
    expect(ok.out.shape).toEqual([1, 40, 2, 8]);
  });

  it('worker ring: a rank that fails aborts the others; the next pass starts the ranks again', async () => {
    const runner = new InProcessRing(3);
    try {
      const s = shards(3);
      const good = s.qs.map((q, r) => ({ q, k: s.ks[r], v: s.vs[r] }));
      const bad = good.map((x, r) => (r === 1 ? { ...x, v: hostTensor(new Float32Array(8), [1, 1, 1, 8], 'f32') } : x));
      const e = await runner.forward(s.layout, bad, { causal: true }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(FAError);
      expect(['E_SHAPE', 'E_DEVICE']).toContain((e as FAError).code);
      const ok = await runner.forward(s.layout, good, { causal: true });
      expect(ok.map((x) => x.out.shape[1])).toEqual(s.qs.map((q) => q.shape[1]));
    } finally {
      await runner.dispose();
    }
  });
});

describe('host shard ops', () => {
  it('mergeForward is the online-softmax merge of (out, lse) pairs; empty parts change nothing; NaN propagates', async () => {
    const H = 2;
    const D = 3;
    const rows = 4;
    const o1 = [0.5, -1, 2, 1, 1, 1, 0, 0, 0, 3, 2, 1, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9];
    const l1 = [0.3, -Infinity, 2, 1, 5, 0.1, -2, 4];
    const o2 = [1, 2, 3, 0, 0, 0, 4, 4, 4, NaN, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4];
    const l2 = [1.5, 0.2, -Infinity, 1, 3, NaN, -Infinity, -Infinity];
    const out = hostTensor(o1, [rows, H, D], 'f32');
    const lse = hostTensor(l1, [H, rows], 'f32');
    await hostShardOps.mergeForward(out, lse, hostTensor(o2, [rows, H, D], 'f32'), hostTensor(l2, [H, rows], 'f32'));
    const O = tensorValues(out);
    const L = tensorValues(lse);
    for (let r = 0; r < rows; r++) {
      for (let h = 0; h < H; h++) {
        const li = h * rows + r;
        const oi = (r * H + h) * D;
        const st = (o: number[], l: number) => ({ m: l, l: l === -Infinity ? 0 : 1, acc: Float64Array.from(o.slice(oi, oi + D).map((x) => Math.fround(x))) });
        const want = finalizeRow(mergeStates(st(o1, Math.fround(l1[li])), st(o2, Math.fround(l2[li]))));
        if (Number.isNaN(want.lse)) expect(L[li]).toBeNaN();
        else expect(L[li]).toBeCloseTo(want.lse, 5);
        for (let d = 0; d < D; d++) {
          if (Number.isNaN(want.out[d])) expect(O[oi + d]).toBeNaN();
          else expect(O[oi + d]).toBeCloseTo(want.out[d], 5);
        }
      }
    }
    expect(createRowState(1).m).toBe(-Infinity);
  });

  it('accumulate, convert, transposeLse, alloc with a fill, copy', async () => {
    const acc = (await hostShardOps.alloc('f32', [2, 3])) as Tensor;
    await hostShardOps.accumulate(acc, hostTensor([1, 2, 3, 4, 5, 6], [2, 3], 'bf16'));
    await hostShardOps.accumulate(acc, hostTensor([0.5, 0.5, 0.5, 0.5, 0.5, 0.5], [2, 3], 'f32'));
    expect(Array.from(tensorValues(acc as never))).toEqual([1.5, 2.5, 3.5, 4.5, 5.5, 6.5]);
    const b = await hostShardOps.convert(hostTensor([1 + 2 ** -9, 3], [2], 'f32'), 'bf16');
    expect(Array.from(tensorValues(b as never))).toEqual([1, 3]); // round to nearest even
    const lse = hostTensor(Float32Array.from({ length: 2 * 3 * 4 }, (_, i) => i), [2, 3, 4], 'f32');
    const packed = await hostShardOps.transposeLse(lse, 2, 'packed');
    expect(packed.shape).toEqual([3, 8]);
    expect(Array.from(tensorValues(packed as never)).slice(0, 8)).toEqual([0, 1, 2, 3, 12, 13, 14, 15]);
    expect(await hostShardOps.transposeLse(packed, 2, 'batched')).toEqual(lse);
    const inf = await hostShardOps.alloc('bf16', [3], -Infinity);
    expect(Array.from(tensorValues(inf as never))).toEqual([-Infinity, -Infinity, -Infinity]);
    const dst = await hostShardOps.alloc('f32', [2]);
    await hostShardOps.copy(dst, hostTensor([7, 8], [2], 'f32'));
    expect(Array.from(tensorValues(dst as never))).toEqual([7, 8]);
    await expect(hostShardOps.copy(dst, hostTensor([7, 8, 9], [3], 'f32'))).rejects.toThrow(/copy/);
  });
});
