/**
 * The queued stream-ordered calls (src/stream.ts) over the cpu engine: outputs named before they
 * exist, results equal to the awaitable calls', argument errors at the call, a failure in the
 * middle of a chain reported at the next read or sync with the call's name, later calls skipped
 * until then, recovery afterwards, and index tensors whose mirror follows call order.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createCpuBackend, FAError, isFAError, streamOf, tensor, type AttentionBackend, type HostTensor, type Tensor } from '../dist/index.js';
import { values } from './cpu-helpers.js';

const cpu = await createCpuBackend({ threads: 0 });
afterAll(() => cpu.dispose());

const B = 1, T = 24, H = 2, D = 8;
const host = (seed: number, shape = [B, T, H, D]) => tensor(values(shape.reduce((a, b) => a * b, 1), seed), shape, 'f32');

async function rejection(p: Promise<unknown>): Promise<FAError> {
  try {
    await p;
  } catch (e) {
    expect(isFAError(e), `expected an FAError, got ${String(e)}`).toBe(true);
    return e as FAError;
  }
  throw new Error('expected a rejection');
}

/** The cpu engine, with its `failOn`-th forward failing as it runs (an error only the engine finds). */
function faulty(failOn: number): AttentionBackend {
  const b = Object.create(cpu) as AttentionBackend;
  let n = 0;
  b.forward = async (...args: Parameters<AttentionBackend['forward']>) => {
    if (++n === failOn) throw new FAError('E_OOM', 'out of memory inside the kernel (simulated)');
    return cpu.forward(...args);
  };
  return b;
}

describe('stream-ordered calls (queued over the awaitable calls)', () => {
  it('chains forward into backward without awaiting and matches the awaited calls bit for bit', async () => {
    const s = streamOf(cpu);
    expect(streamOf(cpu)).toBe(s);
    const [q, k, v, dO] = [host(1), host(2), host(3), host(4)];
    const opts = { causal: true, deterministic: true };
    const f = s.forward(s.upload(q), s.upload(k), v, opts);
    expect(f.out.shape).toEqual([B, T, H, D]);
    expect(f.lse.shape).toEqual([B, H, T]);
    const g = s.backward(q, k, v, f.out, dO, f.lse, opts);
    const ref = await cpu.forward(q, k, v, opts);
    const gref = await cpu.backward(q, k, v, ref.out, dO, ref.lse, opts);
    const got = await Promise.all([f.out, f.lse, g.dq, g.dk, g.dv].map((t) => s.read(t)));
    const want = [ref.out, ref.lse, gref.dq, gref.dk, gref.dv] as HostTensor[];
    got.forEach((t, i) => expect(Array.from(t.data)).toEqual(Array.from(want[i].data)));
    await s.sync();
  });

  it('copies host inputs at the call', async () => {
    const s = streamOf(cpu);
    const q = host(5), k = host(6), v = host(7);
    const want = (await cpu.forward(q, k, v)).out as HostTensor;
    const f = s.forward(q, k, v);
    q.data.fill(0); // after the call: must not matter
    expect(Array.from((await s.read(f.out)).data)).toEqual(Array.from(want.data));
  });

  it('throws argument errors at the call and queues nothing', async () => {
    const s = streamOf(cpu);
    const q = host(1);
    expect(() => s.forward(q, host(2, [B, T, H, D + 1]), host(3))).toThrow(FAError);
    try {
      s.forward(q, host(2, [B, T, H, D + 1]), host(3));
    } catch (e) {
      expect((e as FAError).code).toBe('E_SHAPE');
    }
    const f = s.forward(q, host(2), host(3));
    await expect(s.read(f.lse)).resolves.toBeDefined();
    const x = s.upload(host(9));
    s.disposeTensor(x);
    expect(() => s.forward(x, host(2), host(3))).toThrow(/disposed/);
    await s.sync();
  });

  it('reports a failure in the middle of a chain at the next read, skips what follows, then recovers', async () => {
    const s = streamOf(faulty(2));
    const f1 = s.forward(host(1), host(2), host(3));
    const f2 = s.forward(f1.out, host(2), host(3)); // call 2 fails when it runs
    const f3 = s.forward(host(1), host(2), host(3)); // skipped: queued after the failure
    const e = await rejection(s.read(f3.out));
    expect(e.code).toBe('E_OOM');
    expect(e.message).toMatch(/forward \(call 2\) failed: .*simulated/);
    // reported once: the stream runs calls again
    const f4 = s.forward(host(1), host(2), host(3));
    const r4 = await s.read(f4.out);
    expect(Array.from(r4.data)).toEqual(Array.from((await s.read(f1.out)).data));
    // outputs of the failed and the skipped call stay failed, and say where they came from
    const f5 = s.forward(f2.out, host(2), host(3));
    const e5 = await rejection(s.sync());
    expect(e5.message).toMatch(/forward \(call 5\) failed: q is an output of forward \(call 2\), which failed/);
    const f6 = s.forward(f3.out, host(2), host(3));
    const e6 = await rejection(s.read(f6.out));
    expect(e6.message).toMatch(/call 3\) did not run/);
    await s.sync();
    void f5;
  });

  it('index tensors: each KV call reads the lengths it was given, though writeIndex runs ahead', async () => {
    const s = streamOf(cpu);
    const Hkv = 1, cap = 16;
    const kc = s.upload(tensor(values(B * cap * Hkv * D, 11), [B, cap, Hkv, D], 'f32'));
    const vc = s.upload(tensor(values(B * cap * Hkv * D, 12), [B, cap, Hkv, D], 'f32'));
    const lens = s.uploadIndex([4]);
    const outs: Tensor[] = [];
    const hostK = tensor(values(B * cap * Hkv * D, 11), [B, cap, Hkv, D], 'f32');
    const hostV = tensor(values(B * cap * Hkv * D, 12), [B, cap, Hkv, D], 'f32');
    const wants: HostTensor[] = [];
    for (let step = 0; step < 5; step++) {
      const q = host(20 + step, [B, 1, H, D]);
      const kn = host(30 + step, [B, 1, Hkv, D]), vn = host(40 + step, [B, 1, Hkv, D]);
      outs.push(s.forwardWithKVCache(q, kc, vc, { cacheSeqlens: lens, kNew: kn, vNew: vn, causal: true }).out);
      s.writeIndex(lens, [5 + step]);
      wants.push((await cpu.forwardWithKVCache(q, hostK, hostV, { cacheSeqlens: [4 + step], kNew: kn, vNew: vn, causal: true })).out as HostTensor);
    }
    expect(Array.from(lens.mirror)).toEqual([9]);
    for (let i = 0; i < outs.length; i++) expect(Array.from((await s.read(outs[i])).data)).toEqual(Array.from(wants[i].data));
    // a write past capacity is refused at the call, as the awaitable call refuses it
    s.writeIndex(lens, [cap]);
    expect(() => s.forwardWithKVCache(host(1, [B, 1, H, D]), kc, vc, { cacheSeqlens: lens, kNew: host(2, [B, 1, Hkv, D]), vNew: host(3, [B, 1, Hkv, D]) })).toThrow(FAError);
    expect(() => s.forwardWithKVCache(host(1, [B, 1, H, D]), kc, vc, { cacheSeqlens: cpuIndex() })).toThrow(/uploadIndex/);
    for (const t of [kc, vc, lens, ...outs]) s.disposeTensor(t);
    await s.sync();
  });
});

function cpuIndex() {
  return { kind: 'index' as const, backend: 'cpu', shape: [1], handle: null, disposed: false, mirror: Int32Array.of(1) };
}
