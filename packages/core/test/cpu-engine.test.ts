import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createCpuBackend, isFAError, registeredBackendNames, resolveBackend, tensor, zeros, type DeviceTensor, type HostTensor } from '../dist/index.js';
import { WorkerPool } from '../dist/cpu/pool.js';
import { buildProblem, values, valuesOf, type ProblemSpec } from './cpu-helpers.js';

const distIndex = fileURLToPath(new URL('../dist/index.js', import.meta.url));

const spec = (o: Partial<ProblemSpec> = {}): ProblemSpec => ({ b: 1, h: 2, hkv: 1, d: 16, tqs: [40], tks: [40], varlen: false, causal: false, seed: 5, ...o });

const toCleanup: { dispose(): Promise<void> }[] = [];
afterAll(async () => {
  for (const b of toCleanup) await b.dispose();
});

async function expectFAError(p: Promise<unknown>, code: string): Promise<void> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  expect(isFAError(err), `expected FAError ${code}, got ${String(err)}`).toBe(true);
  expect((err as { code: string }).code).toBe(code);
}

describe('the cpu backend: registry, identity, host tensors', () => {
  it('is registered as "cpu" and resolves', async () => {
    expect(registeredBackendNames()).toContain('cpu');
    const be = await resolveBackend('cpu');
    expect(be.name).toBe('cpu');
    expect(be.device).toMatch(/^CPU ×\d+$/);
    expect([...be.dtypes]).toEqual(['f32', 'f16', 'bf16']);
    expect(be.supports(undefined as never)).toEqual({ ok: true });
  });

  it('upload and read return the host tensor itself; disposeTensor is a no-op', async () => {
    const be = await createCpuBackend({ threads: 0 });
    const t = tensor(new Float32Array(4), [1, 1, 1, 4], 'f32');
    expect(await be.upload(t)).toBe(t);
    expect(await be.read(t)).toBe(t);
    be.disposeTensor(t);
    expect(await be.read(t)).toBe(t);
  });

  it('outputs are SharedArrayBuffer-backed host tensors with the right shapes and dtypes', async () => {
    const be = await createCpuBackend({ threads: 0 });
    for (const dtype of ['f32', 'f16', 'bf16'] as const) {
      const p = buildProblem(spec({ varlen: true, b: 2, tqs: [3, 0], tks: [5, 2] }), dtype);
      const f = await be.forward(p.q, p.k, p.v, p.opts);
      const fo = f.out as HostTensor;
      expect(fo.dtype).toBe(dtype);
      expect(fo.shape).toEqual([3, 2, 16]);
      expect(fo.data.buffer).toBeInstanceOf(SharedArrayBuffer);
      expect((f.lse as HostTensor).dtype).toBe('f32');
      expect(f.lse.shape).toEqual([2, 3]);
      const g = await be.backward(p.q, p.k, p.v, f.out, p.dOut, f.lse, p.opts);
      expect(g.dq.shape).toEqual([3, 2, 16]);
      expect(g.dk.shape).toEqual([7, 1, 16]);
      expect((g.dv as HostTensor).dtype).toBe(dtype);
    }
  });
});

describe('edge semantics', () => {
  it('rows that see no key: out 0, lse −∞, and zero gradients (Tq > Tk causal; empty key segment)', async () => {
    const be = await createCpuBackend({ threads: 0, tiles: { br: 4, bc: 4 } });
    // Tq = 6 > Tk = 3 with causal: query i sees keys j <= i − 3, so rows 0..2 see nothing
    const p = buildProblem(spec({ h: 1, tqs: [6], tks: [3], causal: true, d: 5 }));
    const f = await be.forward(p.q, p.k, p.v, p.opts);
    const out = valuesOf(f.out as HostTensor);
    const lse = valuesOf(f.lse as HostTensor);
    for (let i = 0; i < 3; i++) {
      expect(lse[i]).toBe(-Infinity);
      for (let c = 0; c < 5; c++) expect(out[i * 5 + c]).toBe(0);
    }
    for (let i = 3; i < 6; i++) expect(Number.isFinite(lse[i])).toBe(true);
    const g = await be.backward(p.q, p.k, p.v, f.out, p.dOut, f.lse, p.opts);
    const dq = valuesOf(g.dq as HostTensor);
    for (let x = 0; x < 15; x++) expect(dq[x]).toBe(0);
    for (const t of [dq, valuesOf(g.dk as HostTensor), valuesOf(g.dv as HostTensor)]) for (const x of t) expect(Number.isNaN(x)).toBe(false);
    // varlen: a sequence with keys but no queries, one with queries but no keys
    const v = buildProblem(spec({ h: 1, varlen: true, b: 3, tqs: [0, 4, 2], tks: [3, 0, 2] }));
    const fv = await be.forward(v.q, v.k, v.v, v.opts);
    const lv = valuesOf(fv.lse as HostTensor);
    expect(Array.from(lv.subarray(0, 4))).toEqual([-Infinity, -Infinity, -Infinity, -Infinity]);
    expect(Number.isFinite(lv[4])).toBe(true);
    const gv = await be.backward(v.q, v.k, v.v, fv.out, v.dOut, fv.lse, v.opts);
    expect(Array.from(valuesOf(gv.dk as HostTensor).subarray(0, 3 * 16)).every((x) => x === 0)).toBe(true);
  });

  it('NaN propagates: a NaN in v reaches exactly the rows that see that key', async () => {
    const be = await createCpuBackend({ threads: 0, tiles: { br: 8, bc: 8 } });
    const p = buildProblem(spec({ h: 1, d: 4, tqs: [20], tks: [20], causal: true }));
    (p.v.data as Float32Array)[10 * 4 + 1] = NaN; // key 10
    const f = await be.forward(p.q, p.k, p.v, p.opts);
    const out = valuesOf(f.out as HostTensor);
    for (let i = 0; i < 20; i++) expect(Number.isNaN(out[i * 4 + 1])).toBe(i >= 10);
    // NaN at a masked position of a partly visible tile does not leak into rows that do not see it
    for (let i = 0; i < 10; i++) for (let c = 0; c < 4; c++) expect(Number.isNaN(out[i * 4 + c])).toBe(false);
  });

  it('NaN in q stays in its row (forward), and does not leak into keys that row does not see (backward)', async () => {
    const be = await createCpuBackend({ threads: 0, tiles: { br: 8, bc: 8 } });
    const p = buildProblem(spec({ h: 1, d: 4, tqs: [20], tks: [20], causal: true }));
    (p.q.data as Float32Array)[5 * 4] = NaN; // query 5 sees keys 0..5
    const f = await be.forward(p.q, p.k, p.v, p.opts);
    const lse = valuesOf(f.lse as HostTensor);
    for (let i = 0; i < 20; i++) expect(Number.isNaN(lse[i])).toBe(i === 5);
    const g = await be.backward(p.q, p.k, p.v, f.out, p.dOut, f.lse, p.opts);
    const dk = valuesOf(g.dk as HostTensor);
    for (let j = 6; j < 20; j++) for (let c = 0; c < 4; c++) expect(Number.isNaN(dk[j * 4 + c])).toBe(false);
  });
});

describe('bad input and failures', () => {
  it('bad inputs throw FAError before any work, and the backend stays usable', async () => {
    const be = await createCpuBackend({ inlineBelowFlops: 0 });
    toCleanup.push(be);
    const p = buildProblem(spec());
    const badShape = tensor(new Float32Array(40 * 2 * 15), [1, 40, 2, 15], 'f32');
    await expectFAError(be.forward(badShape, p.k, p.v), 'E_SHAPE');
    await expectFAError(be.forward(p.q, p.k, p.v, { window: [1.5, 0] as never }), 'E_ARG');
    await expectFAError(be.forward(p.q, p.k, p.v, { softcap: -1 }), 'E_ARG');
    await expectFAError(be.forward(p.q, p.k, p.v, { alibiSlopes: [1, 2, 3] }), 'E_SHAPE');
    await expectFAError(be.forward({ kind: 'host', dtype: 'f16', shape: [1, 40, 2, 16], data: new Float32Array(40 * 32) } as never, p.k, p.v), 'E_DTYPE');
    const dev: DeviceTensor = { kind: 'device', backend: 'webgpu', dtype: 'f32', shape: [1, 40, 2, 16], handle: null, disposed: false };
    await expectFAError(be.forward(dev, p.k, p.v), 'E_ARG');
    const f = await be.forward(p.q, p.k, p.v);
    await expectFAError(be.backward(p.q, p.k, p.v, f.out, p.dOut, tensor(new Float32Array(3), [3], 'f32')), 'E_SHAPE');
    await expectFAError(be.backward(p.q, p.k, p.v, f.out, p.k, f.lse), 'E_SHAPE');
    // still fine
    const again = await be.forward(p.q, p.k, p.v);
    expect(Array.from(valuesOf(again.out as HostTensor))).toEqual(Array.from(valuesOf(f.out as HostTensor)));
  });

  it('engine options are validated', async () => {
    await expectFAError(createCpuBackend({ threads: -1 }), 'E_ARG');
    await expectFAError(createCpuBackend({ threads: 1.5 }), 'E_ARG');
    await expectFAError(createCpuBackend({ tiles: { br: 8, bc: 0 } }), 'E_ARG');
    await expectFAError(createCpuBackend({ inlineBelowFlops: -3 }), 'E_ARG');
  });

  it('after dispose() every call fails with E_DEVICE; dispose is idempotent', async () => {
    const be = await createCpuBackend({ inlineBelowFlops: 0 });
    const p = buildProblem(spec());
    await be.forward(p.q, p.k, p.v);
    await be.dispose();
    await be.dispose();
    await expectFAError(be.forward(p.q, p.k, p.v), 'E_DEVICE');
  });

  it('dispose() while a call runs on the workers rejects that call with E_DEVICE (it does not hang)', async () => {
    const be = await createCpuBackend({ threads: 2, inlineBelowFlops: 0 });
    await be.warm();
    const p = buildProblem(spec({ h: 1, d: 64, tqs: [3000], tks: [3000] }));
    // Attach the expectation at once: the call rejects while dispose() runs, and a rejection
    // with no handler yet would be reported as unhandled.
    const rejected = expectFAError(be.forward(p.q, p.k, p.v), 'E_DEVICE');
    await new Promise((r) => setTimeout(r, 100));
    await be.dispose();
    await rejected;
  });

  it('a worker that fails fails the job with E_DEVICE; the pool then runs the next job', async () => {
    const { Worker } = await import('node:worker_threads');
    const pool = new WorkerPool(2, Worker, new URL('../dist/cpu/worker.js', import.meta.url));
    toCleanup.push(pool);
    await expectFAError(pool.run({ kind: 'backward' } as never, 2), 'E_DEVICE');
    const be = await createCpuBackend({ threads: 0 });
    const p = buildProblem(spec());
    const want = await be.forward(p.q, p.k, p.v);
    // the same job through the pool
    const { planForward } = await import('../dist/cpu/forward.js');
    const { describeProblem, allocFloat32 } = await import('../dist/index.js');
    const prob = describeProblem(p.q, p.k, p.v, {});
    const out = allocFloat32(40 * 2 * 16);
    const lse = allocFloat32(2 * 40);
    const sh = (x: Float32Array) => {
      const c = allocFloat32(x.length);
      c.set(x);
      return c;
    };
    const units = planForward(prob, 8);
    await pool.run({ kind: 'forward', p: prob, br: 8, bc: 8, q: sh(p.q.data as Float32Array), k: sh(p.k.data as Float32Array), v: sh(p.v.data as Float32Array), out, lse, units, counter: new Int32Array(new SharedArrayBuffer(4)) }, 2);
    const ref = valuesOf(want.out as HostTensor);
    for (let i = 0; i < ref.length; i++) expect(Math.abs(out[i] - ref[i])).toBeLessThan(1e-6);
  });
});

describe('threads', () => {
  it('the forward is bit-identical inline and on workers, with plain or shared inputs', async () => {
    const inline = await createCpuBackend({ threads: 0 });
    const pooled = await createCpuBackend({ threads: 2, inlineBelowFlops: 0 });
    toCleanup.push(pooled);
    const p = buildProblem(spec({ b: 2, h: 4, hkv: 2, tqs: [70], tks: [90], causal: true, softcap: 3 }));
    const a = await inline.forward(p.q, p.k, p.v, p.opts);
    const b = await pooled.forward(p.q, p.k, p.v, p.opts); // plain ArrayBuffers: copied into shared memory
    const sh = (t: HostTensor) => {
      const z = zeros(t.shape, t.dtype);
      z.data.set(t.data);
      return z;
    };
    const c = await pooled.forward(sh(p.q), sh(p.k), sh(p.v), p.opts);
    for (const x of [b, c]) {
      expect(Array.from((x.out as HostTensor).data)).toEqual(Array.from((a.out as HostTensor).data));
      expect(Array.from((x.lse as HostTensor).data)).toEqual(Array.from((a.lse as HostTensor).data));
    }
  });

  it('the backward is deterministic: repeated pooled runs are bit-identical (split key tiles with private dQ), dK/dV match inline', async () => {
    const inline = await createCpuBackend({ threads: 0, tiles: { br: 16, bc: 16 } });
    const pooled = await createCpuBackend({ threads: 2, inlineBelowFlops: 0, tiles: { br: 16, bc: 16 } });
    toCleanup.push(pooled);
    // one (batch, kv head) group and 2 threads: the key tiles are split across the workers
    const p = buildProblem(spec({ h: 2, hkv: 1, tqs: [150], tks: [150], causal: true }));
    const f = await inline.forward(p.q, p.k, p.v, p.opts);
    const runs = [];
    for (let r = 0; r < 4; r++) runs.push(await pooled.backward(p.q, p.k, p.v, f.out, p.dOut, f.lse, p.opts));
    const bits = (t: unknown) => Array.from((t as HostTensor).data);
    for (const r of runs.slice(1)) {
      expect(bits(r.dq)).toEqual(bits(runs[0].dq));
      expect(bits(r.dk)).toEqual(bits(runs[0].dk));
      expect(bits(r.dv)).toEqual(bits(runs[0].dv));
    }
    const one = await inline.backward(p.q, p.k, p.v, f.out, p.dOut, f.lse, p.opts);
    expect(bits(runs[0].dk)).toEqual(bits(one.dk));
    expect(bits(runs[0].dv)).toEqual(bits(one.dv));
    const dq1 = valuesOf(one.dq as HostTensor);
    const dq2 = valuesOf(runs[0].dq as HostTensor);
    for (let i = 0; i < dq1.length; i++) expect(Math.abs(dq1[i] - dq2[i])).toBeLessThanOrEqual(1e-6 * (1 + Math.abs(dq1[i])));
  });

  it('an idle pool does not keep the process alive; a running job does (top-level await completes)', () => {
    const script = `
      import { createCpuBackend, tensor } from ${JSON.stringify(distIndex)};
      const be = await createCpuBackend({ threads: 2, inlineBelowFlops: 0 });
      const n = 1 * 512 * 2 * 32;
      const x = () => tensor(Float32Array.from({ length: n }, (_, i) => Math.sin(i)), [1, 512, 2, 32], 'f32');
      const f = await be.forward(x(), x(), x(), { causal: true });
      console.log('done', f.out.data.length);
    `;
    const t0 = Date.now();
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 60_000 });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe(`done ${512 * 2 * 32}`);
    expect(r.status).toBe(0);
    expect(Date.now() - t0).toBeLessThan(60_000);
  });
});

describe('inputs from values', () => {
  it('GQA: query head h reads kv head floor(h / (H / Hkv))', async () => {
    const be = await createCpuBackend({ threads: 0 });
    // one key per kv head, each with a distinct value row: out of query head h = v of its kv head
    const H = 6;
    const Hkv = 3;
    const D = 2;
    const q = tensor(values(H * D, 1), [1, 1, H, D], 'f32');
    const k = tensor(values(Hkv * D, 2), [1, 1, Hkv, D], 'f32');
    const v = tensor(Float32Array.from({ length: Hkv * D }, (_, i) => Math.floor(i / D) + 1), [1, 1, Hkv, D], 'f32');
    const f = await be.forward(q, k, v);
    const out = valuesOf(f.out as HostTensor);
    for (let h = 0; h < H; h++) expect(out[h * D]).toBe(Math.floor(h / (H / Hkv)) + 1);
  });
});
