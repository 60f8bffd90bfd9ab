/**
 * Engine choice by problem, with fake engines that decline: resolveBackendFor() picks the
 * highest-priority engine whose supports() accepts the problem and says why the ones above it
 * were passed over; resolveBackend() returns the auto backend, which does the same per call, so
 * a program written for "the best engine" runs wherever one engine declines its problem. KV-cache
 * calls are chosen the same way by supportsKVCache(), and index tensors stay with their engine.
 */
import { readFileSync } from 'node:fs';
import ts from 'typescript';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  AutoBackend,
  FAError,
  describeKVCacheProblem,
  describeKVCacheProblemShapes,
  describeProblem,
  describeProblemShapes,
  fallbackNote,
  registerBackend,
  registeredBackendNames,
  resetBackends,
  resolveBackend,
  resolveBackendFor,
  tensor,
  unregisterBackend,
  type AttentionBackend,
  type AttentionOptions,
  type AttentionProblem,
  type DeviceIndexTensor,
  type DeviceTensor,
  type DType,
  type HostTensor,
  type KVCacheOptions,
  type KVCacheProblem,
  type Tensor,
} from '../dist/index.js';
import { cloneHost, createRng, decliningBackend, randomTensor, referenceBackend, referenceKVCacheMethods } from '../dist/testing/index.js';

const F32_REASON = 'f32 is not computed natively on this GPU; use f16 or bf16';

/** A device tensor of a fake engine: the host tensor inside, owned by `backend`. */
class FakeDeviceTensor implements DeviceTensor {
  readonly kind = 'device' as const;
  disposed = false;
  constructor(readonly backend: string, readonly handle: HostTensor) {}
  get dtype(): DType {
    return this.handle.dtype;
  }
  get shape(): readonly number[] {
    return this.handle.shape;
  }
}

/**
 * A GPU-like engine over the float64 reference: device tensors and index tensors of its own,
 * and a forward, backward and forwardWithKVCache that refuse (E_UNSUPPORTED) what supports() /
 * supportsKVCache() decline, as real engines do. `calls` counts the passes it ran.
 */
function fakeGpu(name: string, o: { dtypes?: readonly DType[]; declines?: (p: AttentionProblem) => string | undefined; declinesKVCache?: (p: KVCacheProblem) => string | undefined } = {}) {
  const dtypes = o.dtypes ?? ['f16', 'bf16'];
  const ref = referenceBackend({ name, dtypes });
  const kvRef = referenceKVCacheMethods(name, { dtypes });
  const calls = { forward: 0, backward: 0, kv: 0 };
  const unwrap = (t: Tensor): Tensor => (t instanceof FakeDeviceTensor ? t.handle : t);
  const refuse = (p: AttentionProblem) => {
    const s = be.supports(p);
    if (!s.ok) throw new FAError('E_UNSUPPORTED', `${name}: ${s.reason}`);
  };
  const be = {
    name,
    device: `${name} device`,
    dtypes,
    calls,
    supports: (p: AttentionProblem) => {
      if (p.dtype === 'f32' && !dtypes.includes('f32')) return { ok: false as const, reason: F32_REASON };
      const r = o.declines?.(p);
      return r === undefined ? { ok: true as const } : { ok: false as const, reason: r };
    },
    async forward(q: Tensor, k: Tensor, v: Tensor, opts?: AttentionOptions) {
      refuse(describeProblem(q, k, v, opts));
      calls.forward++;
      const r = await ref.forward(unwrap(q), unwrap(k), unwrap(v), opts);
      return q instanceof FakeDeviceTensor ? { out: new FakeDeviceTensor(name, r.out as HostTensor), lse: new FakeDeviceTensor(name, r.lse as HostTensor) } : r;
    },
    async backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dOut: Tensor, lse: Tensor, opts?: AttentionOptions) {
      refuse(describeProblem(q, k, v, opts));
      calls.backward++;
      return ref.backward(unwrap(q), unwrap(k), unwrap(v), unwrap(out), unwrap(dOut), unwrap(lse), opts);
    },
    supportsKVCache: (p: KVCacheProblem) => {
      const r = o.declinesKVCache?.(p);
      return r === undefined ? kvRef.supportsKVCache(p) : { ok: false as const, reason: r };
    },
    async forwardWithKVCache(q: Tensor, kCache: Tensor, vCache: Tensor, opts: KVCacheOptions) {
      const s = be.supportsKVCache(describeKVCacheProblem(q, kCache, vCache, opts, name));
      if (!s.ok) throw new FAError('E_UNSUPPORTED', `${name}: ${s.reason}`);
      calls.kv++;
      const news = opts.kNew && opts.vNew ? { kNew: unwrap(opts.kNew), vNew: unwrap(opts.vNew) } : {};
      const r = await kvRef.forwardWithKVCache(unwrap(q), unwrap(kCache), unwrap(vCache), { ...opts, ...news });
      return q instanceof FakeDeviceTensor ? { out: new FakeDeviceTensor(name, r.out as HostTensor), lse: new FakeDeviceTensor(name, r.lse as HostTensor) } : r;
    },
    uploadIndex: kvRef.uploadIndex,
    writeIndex: kvRef.writeIndex,
    async upload(t: HostTensor): Promise<Tensor> {
      return new FakeDeviceTensor(name, t);
    },
    async read(t: Tensor) {
      return unwrap(t) as HostTensor;
    },
    disposeTensor(t: Tensor | DeviceIndexTensor) {
      if (t instanceof FakeDeviceTensor) t.disposed = true;
      kvRef.disposeIndex(t);
    },
    disposed: false,
    async dispose() {
      be.disposed = true;
    },
  } satisfies AttentionBackend & Record<string, unknown>;
  return be;
}

type Fake = ReturnType<typeof fakeGpu>;
const starts: Record<string, number> = {};
const fakes: Record<string, Fake> = {};

/** Registers a fake engine (a fresh instance per start); remembers the latest instance. */
function register(name: string, priority: number, make: () => Fake): void {
  starts[name] = 0;
  registerBackend(
    name,
    async () => {
      starts[name]++;
      return (fakes[name] = make());
    },
    priority,
  );
}

const FAKES = ['gpu', 'dead', 'mid'];
beforeEach(async () => {
  await resetBackends();
  register('gpu', 100, () => fakeGpu('gpu'));
  registerBackend('dead', () => Promise.reject(new FAError('E_DEVICE', 'unavailable: no driver')), 90);
  starts.dead = 0;
});
afterEach(async () => {
  await resetBackends();
  for (const n of FAKES) unregisterBackend(n);
});
afterAll(() => expect(registeredBackendNames()).toEqual(['cpu']));

const rng = createRng(11);
const qkv = (dtype: DType, shape = [1, 6, 2, 8]) => ({ q: randomTensor(rng, shape, dtype), k: randomTensor(rng, shape, dtype), v: randomTensor(rng, shape, dtype) });
const code = async (p: Promise<unknown>) => (await p.then(() => undefined, (e: unknown) => e)) as FAError | undefined;

describe('resolveBackendFor(problem)', () => {
  it('passes over an engine that declines the problem and one that did not start, saying why', async () => {
    const r = await resolveBackendFor(qkv('f32'));
    expect(r.backend.name).toBe('cpu');
    expect(r.passedOver).toEqual([
      { name: 'gpu', why: 'declined', reason: F32_REASON },
      { name: 'dead', why: 'unavailable', reason: 'no driver' },
    ]);
    expect(fallbackNote(r)).toBe(`gpu declines this problem (${F32_REASON}); running it on cpu`);
  });

  it('takes the highest-priority engine that accepts, and starts none below it', async () => {
    register('mid', 50, () => fakeGpu('mid', { dtypes: ['f32', 'f16', 'bf16'] }));
    const { q, k, v } = qkv('bf16');
    const r = await resolveBackendFor(describeProblem(q, k, v, { causal: true }));
    expect(r.backend.name).toBe('gpu');
    expect(r.passedOver).toEqual([]);
    expect(fallbackNote(r)).toBeUndefined();
    expect(starts.mid).toBe(0);
    const r32 = await resolveBackendFor({ q: qkv('f32').q, k: qkv('f32').k, v: qkv('f32').v, opts: { causal: true } });
    expect(r32.backend.name).toBe('mid');
    expect(r32.passedOver.map((x) => x.name)).toEqual(['gpu', 'dead']);
    expect(starts.mid).toBe(1);
  });

  it('asks about both passes in one problem: options decide as much as dtypes', async () => {
    register('mid', 50, () => fakeGpu('mid', { dtypes: ['f32'], declines: (p) => (p.softcap > 0 ? 'no softcap' : undefined) }));
    expect((await resolveBackendFor(qkv('f32'))).backend.name).toBe('mid');
    const r = await resolveBackendFor({ ...qkv('f32'), opts: { softcap: 5 } });
    expect(r.backend.name).toBe('cpu');
    expect(r.passedOver.find((x) => x.name === 'mid')).toEqual({ name: 'mid', why: 'declined', reason: 'no softcap' });
  });

  it('honours a list of candidates, in its order', async () => {
    const r = await resolveBackendFor(qkv('bf16'), { backends: ['cpu', 'gpu'] });
    expect(r.backend.name).toBe('cpu');
    expect((await resolveBackendFor(qkv('bf16'), { backends: 'gpu' })).backend.name).toBe('gpu');
  });

  it('E_UNSUPPORTED names every reason when each engine that started declines; E_DEVICE when none started', async () => {
    const e = await code(resolveBackendFor(qkv('f32'), { backends: ['gpu', 'dead'] }));
    expect(e).toBeInstanceOf(FAError);
    expect(e!.code).toBe('E_UNSUPPORTED');
    expect(e!.message).toBe(`no available engine computes this problem (gpu: ${F32_REASON}; dead: unavailable: no driver)`);
    const d = await code(resolveBackendFor(qkv('f32'), { backends: ['dead'] }));
    expect(d!.code).toBe('E_DEVICE');
    expect(d!.message).toBe('no backend is available (dead: unavailable: no driver)');
  });

  it('validates first (the same FAError on every machine), and rejects unknown names', async () => {
    const { q, k } = qkv('f32');
    expect((await code(resolveBackendFor({ q, k, v: qkv('f32', [1, 5, 2, 8]).v })))!.code).toBe('E_SHAPE');
    expect((await code(resolveBackendFor({ q, k, v: k, opts: { softcap: -1 } })))!.code).toBe('E_ARG');
    expect((await code(resolveBackendFor(qkv('f32'), { backends: ['gpu', 'nope'] })))!.code).toBe('E_ARG');
  });

  it('an engine whose supports() throws counts as declining; the registry stays usable', async () => {
    register('mid', 150, () => ({ ...fakeGpu('mid'), supports: () => { throw new Error('boom'); } }));
    const r = await resolveBackendFor(qkv('bf16'));
    expect(r.backend.name).toBe('gpu');
    expect(r.passedOver[0]).toEqual({ name: 'mid', why: 'declined', reason: 'supports() failed: boom' });
  });
});

describe('resolveBackend() — the auto backend', () => {
  it('runs each call on the best engine that accepts it, forward and backward, and notes a fallback once', async () => {
    const notes: string[] = [];
    const fa = await resolveBackend(undefined, { onFallback: (n) => notes.push(n) });
    expect(fa).toBeInstanceOf(AutoBackend);
    expect(fa.name).toBe('auto');
    expect(fa.device).toMatch(/^gpu: gpu device, then cpu: CPU/);
    expect((fa as AutoBackend).engines.map((c) => [c.name, c.reason])).toEqual([['gpu', undefined], ['dead', 'no driver'], ['cpu', undefined]]);
    expect(fa.dtypes).toEqual(['f32', 'f16', 'bf16']);
    const gpu = fakes.gpu;

    const h = qkv('bf16');
    const r16 = await fa.forward(h.q, h.k, h.v, { causal: true });
    await fa.backward(h.q, h.k, h.v, r16.out, h.q, r16.lse, { causal: true });
    expect(gpu.calls).toEqual({ forward: 1, backward: 1, kv: 0 });
    expect(notes).toEqual([]);

    const x = qkv('f32');
    const cpu = await resolveBackend('cpu');
    const want = await cpu.forward(x.q, x.k, x.v, { causal: true });
    for (let i = 0; i < 2; i++) {
      const got = await fa.forward(x.q, x.k, x.v, { causal: true });
      expect((got.out as HostTensor).data).toEqual((want.out as HostTensor).data);
      const g = await fa.backward(x.q, x.k, x.v, got.out, x.q, got.lse, { causal: true });
      const gw = await cpu.backward(x.q, x.k, x.v, want.out, x.q, want.lse, { causal: true });
      expect((g.dq as HostTensor).data).toEqual((gw.dq as HostTensor).data);
    }
    expect(gpu.calls).toEqual({ forward: 1, backward: 1, kv: 0 });
    expect(notes).toEqual([`gpu declines this problem (${F32_REASON}); running it on cpu`]);
  });

  it('says "@fa: ..." on console.warn by default, once per process; null says nothing', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      const x = qkv('f32');
      for (let i = 0; i < 2; i++) {
        const fa = await resolveBackend();
        await fa.forward(x.q, x.k, x.v);
      }
      expect(warn.mock.calls).toEqual([[`@fa: gpu declines this problem (${F32_REASON}); running it on cpu`]]);
      warn.mockClear();
      const quiet = await resolveBackend('auto', { onFallback: null });
      await quiet.forward(x.q, x.k, x.v, { window: [2, 2] });
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
    }
  });

  it('supports() is true when some engine accepts, and names every reason when none does', async () => {
    const fa = await resolveBackend(['gpu', 'dead']);
    const { q, k, v } = qkv('f32');
    expect(fa.supports(describeProblem(q, k, v))).toEqual({ ok: false, reason: `no available engine computes this problem (gpu: ${F32_REASON}; dead: unavailable: no driver)` });
    const e = await code(fa.forward(q, k, v));
    expect(e!.code).toBe('E_UNSUPPORTED');
    const b = qkv('f16');
    expect(fa.supports(describeProblem(b.q, b.k, b.v))).toEqual({ ok: true });
    expect((await resolveBackend()).supports(describeProblem(q, k, v))).toEqual({ ok: true });
  });

  it('device tensors stay with their engine: upload goes to the first engine that takes the dtype', async () => {
    const fa = await resolveBackend();
    const gpu = fakes.gpu;
    const h = qkv('f16');
    const [q, k, v] = await Promise.all([fa.upload(h.q), fa.upload(h.k), fa.upload(h.v)]);
    expect(q.kind).toBe('device');
    expect((q as DeviceTensor).backend).toBe('gpu');
    const r = await fa.forward(q, k, v);
    expect(r.out.kind).toBe('device');
    expect(gpu.calls.forward).toBe(1);
    const back = await fa.read(r.out);
    expect(back.dtype).toBe('f16');
    fa.disposeTensor(r.out);
    expect((r.out as DeviceTensor).disposed).toBe(true);

    const f = qkv('f32');
    const q32 = await fa.upload(f.q); // the fake declines f32, so the cpu engine takes it
    expect(q32.kind).toBe('host');

    // f32 data put on the fake engine directly: the call cannot move, and says so
    const onGpu = await Promise.all([gpu.upload(f.q), gpu.upload(f.k), gpu.upload(f.v)]);
    const e = await code(fa.forward(onGpu[0], onGpu[1], onGpu[2]));
    expect(e!.code).toBe('E_UNSUPPORTED');
    expect(e!.message).toBe(`the inputs are device tensors of gpu, which declines this problem (${F32_REASON}); pass host tensors so that another engine can compute it`);
    const mixed = await code(fa.forward(q, h.k, new FakeDeviceTensor('elsewhere', h.v)));
    expect(mixed!.code).toBe('E_ARG');
    expect(mixed!.message).toMatch(/different engines \(q: gpu, v: elsewhere\)/);
    const foreign = await code(fa.forward(new FakeDeviceTensor('elsewhere', h.q), h.k, h.v));
    expect(foreign!.message).toMatch(/q is a device tensor of backend elsewhere, which this auto backend does not use/);
  });

  it('dispose() frees the engines it started; the next resolve starts them afresh', async () => {
    const fa = await resolveBackend();
    const first = fakes.gpu;
    expect(starts.gpu).toBe(1);
    await fa.dispose();
    expect(first.disposed).toBe(true);
    // E_DEVICE, as a disposed cpu, wasm or webgpu engine says
    expect((await code(fa.forward(qkv('f16').q, qkv('f16').k, qkv('f16').v)))!.code).toBe('E_DEVICE');
    const again = await resolveBackend();
    expect(starts.gpu).toBe(2);
    const h = qkv('f16');
    await again.forward(h.q, h.k, h.v);
    expect(fakes.gpu.calls.forward).toBe(1);
  });

  it('dispose() of one auto backend leaves the engines another one, or a caller by name, still uses', async () => {
    const a = await resolveBackend();
    const b = await resolveBackend();
    const gpu = fakes.gpu;
    expect(starts.gpu).toBe(1); // started once, shared
    await a.dispose();
    expect(gpu.disposed).toBe(false); // b still holds it
    const h = qkv('f16');
    await b.forward(h.q, h.k, h.v);
    expect(gpu.calls.forward).toBe(1);
    await b.dispose();
    expect(gpu.disposed).toBe(true); // the last holder let go

    const named = await resolveBackend('gpu'); // a caller by name owns the engine from now on
    const c = await resolveBackend();
    expect(starts.gpu).toBe(2);
    await c.dispose();
    expect(fakes.gpu.disposed).toBe(false);
    await named.forward(h.q, h.k, h.v);
    expect(fakes.gpu.calls.forward).toBe(1);

    const chosen = (await resolveBackendFor({ q: h.q, k: h.k, v: h.v })).backend; // so is an engine resolveBackendFor hands out
    expect(chosen).toBe(named);
    await resetBackends(); // disposes them all
    expect(fakes.gpu.disposed).toBe(true);
  });

  it('keeps the string forms: a name is that engine; unknown names are E_ARG; a dead one is E_DEVICE', async () => {
    const cpu = await resolveBackend('cpu');
    expect(cpu.name).toBe('cpu');
    expect(cpu).not.toBeInstanceOf(AutoBackend);
    expect((await resolveBackend('gpu')).name).toBe('gpu');
    expect((await code(resolveBackend('nope')))!.code).toBe('E_ARG');
    expect((await code(resolveBackend(['cpu', 'nope'])))!.code).toBe('E_ARG');
    const dead = await code(resolveBackend('dead'));
    expect(dead!.code).toBe('E_DEVICE');
    expect(dead!.message).toBe('no backend is available (dead: no driver)');
    expect((await code(resolveBackend(['dead'])))!.code).toBe('E_DEVICE');
  });
});

const NO_KV = 'no KV-cache kernels on this GPU';
const declineKV = () => register('gpu', 100, () => fakeGpu('gpu', { declinesKVCache: () => NO_KV }));

/** A decode step: 2 sequences with 3 and 5 tokens in a contiguous cache of 8, one new token each, GQA 2/1. */
function kvCall(dtype: DType) {
  return {
    q: randomTensor(rng, [2, 1, 2, 8], dtype),
    kCache: randomTensor(rng, [2, 8, 1, 8], dtype),
    vCache: randomTensor(rng, [2, 8, 1, 8], dtype),
    kNew: randomTensor(rng, [2, 1, 1, 8], dtype),
    vNew: randomTensor(rng, [2, 1, 1, 8], dtype),
  };
}
type KVCall = ReturnType<typeof kvCall>;
const kvOpts = (x: KVCall, cacheSeqlens: KVCacheOptions['cacheSeqlens'] = [3, 5]): KVCacheOptions => ({ cacheSeqlens, kNew: x.kNew, vNew: x.vNew, causal: true });
const kvProblem = (x: KVCall) => describeKVCacheProblem(x.q, x.kCache, x.vCache, kvOpts(x));

describe('KV-cache calls: the engine chosen by supportsKVCache()', () => {
  it('resolveBackendFor(kvProblem) passes over an engine that declines the KV call, though it takes the dense one', async () => {
    declineKV();
    const x = kvCall('bf16');
    const r = await resolveBackendFor(kvProblem(x));
    expect(r.backend.name).toBe('cpu');
    expect(r.passedOver).toEqual([
      { name: 'gpu', why: 'declined', reason: NO_KV },
      { name: 'dead', why: 'unavailable', reason: 'no driver' },
    ]);
    expect(fallbackNote(r)).toBe(`gpu declines this problem (${NO_KV}); running it on cpu`);
    expect((await resolveBackendFor(qkv('bf16'))).backend.name).toBe('gpu');
  });

  it("an engine's dtypes bound its KV calls, even when its supportsKVCache() says yes", async () => {
    register('gpu', 100, () => ({ ...fakeGpu('gpu'), supportsKVCache: () => ({ ok: true as const }) }));
    const f = kvCall('f32');
    const r = await resolveBackendFor(kvProblem(f));
    expect(r.backend.name).toBe('cpu');
    expect(r.passedOver[0]).toEqual({ name: 'gpu', why: 'declined', reason: 'dtype f32 is not one of f16, bf16' });
    expect((await resolveBackendFor(kvProblem(kvCall('bf16')))).backend.name).toBe('gpu');
  });

  it('the auto backend runs a KV call on the first engine that accepts it and notes the fallback once: the result is that engine\'s', async () => {
    declineKV();
    const notes: string[] = [];
    const fa = await resolveBackend(undefined, { onFallback: (n) => notes.push(n) });
    const x = kvCall('bf16');
    const mine = { k: cloneHost(x.kCache), v: cloneHost(x.vCache) };
    const want = await (await resolveBackend('cpu')).forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x));
    for (let i = 0; i < 2; i++) {
      const got = await fa.forwardWithKVCache(x.q, mine.k, mine.v, kvOpts(x));
      expect((got.out as HostTensor).data).toEqual((want.out as HostTensor).data);
      expect((got.lse as HostTensor).data).toEqual((want.lse as HostTensor).data);
    }
    expect(mine.k.data).toEqual(x.kCache.data); // appended in place, as the cpu engine did
    expect(mine.v.data).toEqual(x.vCache.data);
    expect(fakes.gpu.calls.kv).toBe(0);
    expect(notes).toEqual([`gpu declines this problem (${NO_KV}); running it on cpu`]);
    expect(fa.supportsKVCache(kvProblem(x))).toEqual({ ok: true });

    const only = await resolveBackend(['gpu', 'dead']);
    expect(only.supportsKVCache(kvProblem(x))).toEqual({ ok: false, reason: `no available engine computes this problem (gpu: ${NO_KV}; dead: unavailable: no driver)` });
    expect((await code(only.forwardWithKVCache(x.q, mine.k, mine.v, kvOpts(x))))!.code).toBe('E_UNSUPPORTED');
  });

  it('an engine that accepts computes it, without a note; bad arguments get their validation code first', async () => {
    const notes: string[] = [];
    const fa = await resolveBackend(undefined, { onFallback: (n) => notes.push(n) });
    const x = kvCall('bf16');
    const r = await fa.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x));
    expect(r.out.shape).toEqual([2, 1, 2, 8]);
    expect(fakes.gpu.calls.kv).toBe(1);
    expect(notes).toEqual([]);
    expect((await code(fa.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x, [3]))))!.code).toBe('E_SHAPE');
    expect((await code(fa.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x, [3, 8]))))!.code).toBe('E_ARG');
    expect((await code(fa.forwardWithKVCache(x.q, x.kCache, x.vCache, undefined as unknown as KVCacheOptions)))!.code).toBe('E_ARG');
    expect(fakes.gpu.calls.kv).toBe(1);
  });

  it('uploadIndex goes to the first engine that takes KV calls; writeIndex and disposeTensor go to its owner', async () => {
    declineKV();
    const fa = await resolveBackend(undefined, { onFallback: null });
    const lens = await fa.uploadIndex([3, 5]);
    expect(lens.backend).toBe('cpu');
    await fa.writeIndex(lens, [4], 0);
    expect([...lens.mirror]).toEqual([4, 5]);
    const x = kvCall('bf16');
    const r = await fa.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x, lens));
    expect(r.out.kind).toBe('host');
    fa.disposeTensor(lens);
    expect(lens.disposed).toBe(true);
    expect((await code(fa.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x, lens))))!.code).toBe('E_ARG');

    register('gpu', 100, () => fakeGpu('gpu')); // now the best engine takes KV calls: index tensors go there
    const fa2 = await resolveBackend(undefined, { onFallback: null });
    const table = await fa2.uploadIndex(Int32Array.from([1, 0]), [2, 1]);
    expect(table.backend).toBe('gpu');
    expect(table.shape).toEqual([2, 1]);
    await fa2.writeIndex(table, [0, 1]);
    expect([...table.mirror]).toEqual([0, 1]);
  });

  it('index and device tensors keep a KV call on their engine, or say why it cannot run there', async () => {
    declineKV();
    const fa = await resolveBackend(undefined, { onFallback: null });
    const gpu = fakes.gpu;
    const x = kvCall('bf16');
    const lensGpu = await gpu.uploadIndex([3, 5]);
    const e = await code(fa.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x, lensGpu)));
    expect(e!.code).toBe('E_UNSUPPORTED');
    expect(e!.message).toBe(`the inputs are index tensors of gpu, which declines this problem (${NO_KV}); pass host tensors and arrays so that another engine can compute it`);
    const [kc, vc] = [await gpu.upload(x.kCache), await gpu.upload(x.vCache)];
    const d = await code(fa.forwardWithKVCache(x.q, kc, vc, kvOpts(x)));
    expect(d!.message).toBe(`the inputs are device tensors of gpu, which declines this problem (${NO_KV}); pass host tensors so that another engine can compute it`);
    const lensCpu = await fa.uploadIndex([3, 5]);
    const mixed = await code(fa.forwardWithKVCache(x.q, kc, vc, kvOpts(x, lensCpu)));
    expect(mixed!.code).toBe('E_ARG');
    expect(mixed!.message).toMatch(/different engines \(kCache: gpu, vCache: gpu, cacheSeqlens: cpu\)/);
    const foreign: DeviceIndexTensor = { kind: 'index', backend: 'elsewhere', shape: [2], handle: null, disposed: false, mirror: Int32Array.from([3, 5]) };
    const f = await code(fa.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x, foreign)));
    expect(f!.message).toMatch(/^cacheSeqlens is an index tensor of backend elsewhere, which this auto backend does not use/);
    expect((await code(fa.writeIndex(foreign, [1])))!.code).toBe('E_ARG');
    expect(gpu.calls.kv).toBe(0);
  });

  it('device caches on an engine that accepts the call: it runs there, outputs on that engine', async () => {
    const fa = await resolveBackend(undefined, { onFallback: null });
    const gpu = fakes.gpu;
    const x = kvCall('f16');
    const [q, kc, vc] = [await fa.upload(x.q), await fa.upload(x.kCache), await fa.upload(x.vCache)];
    expect((kc as DeviceTensor).backend).toBe('gpu');
    const lens = await fa.uploadIndex([3, 5]);
    expect(lens.backend).toBe('gpu');
    const before = cloneHost(await fa.read(kc));
    const r = await fa.forwardWithKVCache(q, kc, vc, kvOpts(x, lens));
    expect(r.out.kind).toBe('device');
    expect(gpu.calls.kv).toBe(1);
    const after = await fa.read(kc);
    expect(after.data).not.toEqual(before.data); // the new keys were written into the device cache
    fa.disposeTensor(r.out);
    fa.disposeTensor(lens);
    expect((r.out as DeviceTensor).disposed).toBe(true);
    expect(lens.disposed).toBe(true);
  });

  it('engineFor(problem) is the engine to put a call\'s data on, with the note a call would give', async () => {
    declineKV();
    const notes: string[] = [];
    const fa = (await resolveBackend(undefined, { onFallback: (n) => notes.push(n) })) as AutoBackend;
    const p = describeKVCacheProblemShapes([2, 1, 2, 8], [2, 8, 1, 8], 'bf16', { cacheSeqlens: [3, 5], newShape: [2, 1, 1, 8], causal: true });
    expect(p).toEqual(kvProblem(kvCall('bf16')));
    expect(fa.engineFor(p).name).toBe('cpu');
    expect(notes).toEqual([`gpu declines this problem (${NO_KV}); running it on cpu`]);
    expect(fa.engineFor(describeProblemShapes([1, 6, 2, 8], [1, 6, 2, 8], 'bf16')).name).toBe('gpu');
    expect(fa.resolve(p).passedOver.map((x) => x.name)).toEqual(['gpu', 'dead']);
  });

  it('decliningBackend declines the KV calls it names, refuses them, and computes the rest with its inner engine', async () => {
    const d = decliningBackend({ name: 'picky', declines: () => undefined, declinesKVCache: (p) => (p.paged ? undefined : 'only paged caches') });
    const x = kvCall('f32');
    expect(d.supportsKVCache(kvProblem(x))).toEqual({ ok: false, reason: 'only paged caches' });
    const e = await code(d.forwardWithKVCache(x.q, x.kCache, x.vCache, kvOpts(x)));
    expect(e!.code).toBe('E_UNSUPPORTED');
    expect(e!.message).toBe('picky: only paged caches');
    const kc = randomTensor(rng, [4, 4, 1, 8], 'f32');
    const opts = { cacheSeqlens: await d.uploadIndex([3, 2]), blockTable: [[0, 1], [2, 3]], kNew: x.kNew, vNew: x.vNew };
    const r = await d.forwardWithKVCache(x.q, kc, randomTensor(rng, [4, 4, 1, 8], 'f32'), opts);
    expect(r.out.shape).toEqual([2, 1, 2, 8]);
  });
});

describe('helpers for asking before computing', () => {
  it('describeProblemShapes is describeProblem without the data', () => {
    const { q, k } = qkv('bf16', [2, 6, 4, 8]);
    const k2 = { ...k, shape: [2, 9, 2, 8], data: new Uint16Array(2 * 9 * 2 * 8) };
    const opts = { causal: true, softcap: 3, alibiSlopes: [0.1, 0.2, 0.3, 0.4] };
    expect(describeProblemShapes([2, 6, 4, 8], [2, 9, 2, 8], 'bf16', opts)).toEqual(describeProblem(q, k2, { ...k2 }, opts));
    expect(() => describeProblemShapes([2, 6, 3, 8], [2, 9, 2, 8], 'f32')).toThrow(/multiple of Hkv/);
  });

  it('decliningBackend declines, refuses what it declines, and computes the rest with its inner engine', async () => {
    const d = decliningBackend({ name: 'picky', dtypes: ['f16'], declines: (p) => (p.dtype === 'f16' ? undefined : 'only f16') });
    const a = qkv('f32');
    expect(d.supports(describeProblem(a.q, a.k, a.v))).toEqual({ ok: false, reason: 'only f16' });
    const e = await code(d.forward(a.q, a.k, a.v));
    expect(e!.code).toBe('E_UNSUPPORTED');
    expect(e!.message).toBe('picky: only f16');
    const h = qkv('f16');
    const r = await d.forward(h.q, h.k, h.v);
    expect(r.out.dtype).toBe('f16');
    expect((await code(d.backward(a.q, a.k, a.v, a.q, a.q, r.lse)))!.code).toBe('E_UNSUPPORTED');
  });
});

describe("the README's \"Use it\" example", () => {
  it('runs unchanged when the best engine declines f32: the auto backend hands it to the next', async () => {
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
    const block = /## Use it\s+```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBeDefined();
    const imports = block!.split('\n').filter((l) => l.startsWith('import '));
    expect(imports[0]).toBe("import { resolveBackend, tensor } from '@fa/core';");
    // smaller than the README's sizes, to keep the test quick on the CPU engine
    const body = block!
      .split('\n')
      .filter((l) => !l.startsWith('import '))
      .join('\n')
      .replace(/const B = 1, T = 1024, H = 8, D = 64;/, 'const B = 1, T = 96, H = 2, D = 64;');
    expect(body).toContain('const B = 1, T = 96');
    const AsyncFunction = Object.getPrototypeOf(async () => undefined).constructor as new (...a: string[]) => (...x: unknown[]) => Promise<Record<string, unknown>>;
    const js = ts.transpileModule(body, { compilerOptions: { target: ts.ScriptTarget.ES2022 } }).outputText;
    const run = new AsyncFunction('resolveBackend', 'tensor', `${js}\nreturn { fa, q, k, v, out, lse, dq };`);
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      const r = await run(resolveBackend, tensor);
      const cpu = await resolveBackend('cpu');
      const want = await cpu.forward(r.q as Tensor, r.k as Tensor, r.v as Tensor, { causal: true });
      expect((r.out as HostTensor).data).toEqual((want.out as HostTensor).data);
      expect((r.dq as HostTensor).shape).toEqual((r.q as HostTensor).shape);
      expect(fakes.gpu.calls).toEqual({ forward: 0, backward: 0, kv: 0 });
    } finally {
      warn.mockRestore();
    }
  });
});
