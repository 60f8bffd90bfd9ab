/**
 * Other programs' GPU memory (issue 24): a caller's GPUBuffer wrapped as a tensor without a copy
 * (whole, or a range at an aligned offset), KV caches in a caller's buffers written in place, an
 * engine tensor's buffer handed out (borrowed or transferred), every wrong buffer refused before
 * anything is enqueued — and a tfjs-backend-webgpu program's tensors through our forward and
 * backward on tfjs's own device, our outputs coming back as tfjs tensors on our buffers.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { FAError, tensor, type HostTensor, type Tensor } from '@fa/core';
import { cloneHost, kvCacheCaseInputs, makeKVCacheCase } from '@fa/core/testing';
import { create, globals } from 'webgpu';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';
import { randn, reference, relErr } from './ref.js';
import { TFJS_ROUNDTRIP, tfjsRoundTrip } from './tfjs-roundtrip.js';

let be: WebGPUBackend | undefined;
let why = '';
try {
  be = await createWebGPUBackend();
} catch (e) {
  why = (e as Error).message;
}

const STORAGE = 128, COPY_SRC = 4, COPY_DST = 8, MAP_READ = 1;

const code = async (p: Promise<unknown> | (() => unknown)) => {
  try {
    await (typeof p === 'function' ? p() : p);
    return 'no error';
  } catch (e) {
    expect(e).toBeInstanceOf(FAError);
    return `${(e as FAError).code}: ${(e as FAError).message}`;
  }
};

/** A caller's buffer holding `parts` at the given byte offsets. */
function callerBuffer(dev: GPUDevice, size: number, parts: [number, Float32Array][], usage = STORAGE | COPY_SRC | COPY_DST): GPUBuffer {
  const b = dev.createBuffer({ size, usage });
  for (const [off, d] of parts) dev.queue.writeBuffer(b, off, d as Float32Array<ArrayBuffer>);
  return b;
}

const f32 = (t: HostTensor) => t.data as Float32Array;

describe('webgpu: caller buffers', () => {
  if (!be) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const b = be;
  const dev = b.gpuDevice;
  afterAll(() => b.dispose());
  const shape = [1, 24, 2, 16];
  const n = 24 * 2 * 16;
  const q = randn(n, 1), k = randn(n, 2), v = randn(n, 3), dO = randn(n, 4);
  const hq = tensor(q, shape), hk = tensor(k, shape), hv = tensor(v, shape), hdo = tensor(dO, shape);

  it('runs forward and backward on ranges of one caller buffer, equal to uploaded tensors and near the float64 reference', async () => {
    const align = dev.limits.minStorageBufferOffsetAlignment;
    const stride = Math.ceil((n * 4) / align) * align;
    const buf = callerBuffer(dev, 4 * stride, [[0, q], [stride, k], [2 * stride, v], [3 * stride, dO]]);
    const [wq, wk, wv, wdo] = await Promise.all([0, 1, 2, 3].map((i) => b.wrapBuffer(buf, { dtype: 'f32', shape, offset: i * stride })));
    const opts = { causal: true };
    const f = await b.forward(wq, wk, wv, opts);
    const g = await b.backward(wq, wk, wv, f.out, wdo, f.lse, opts);
    const ref = reference(hq, hk, hv, opts, hdo);
    const out = await b.read(f.out), dq = await b.read(g.dq), dk = await b.read(g.dk), dv = await b.read(g.dv);
    expect(relErr(f32(out), ref.out)).toBeLessThan(1e-5);
    expect(relErr(f32(dq), ref.dq!)).toBeLessThan(1e-4);
    expect(relErr(f32(dk), ref.dk!)).toBeLessThan(1e-4);
    expect(relErr(f32(dv), ref.dv!)).toBeLessThan(1e-4);
    // the same kernels on uploads of the same values: the same bits
    const u = await b.forward(await b.upload(hq), await b.upload(hk), await b.upload(hv), opts);
    expect(f32(await b.read(u.out))).toEqual(f32(out));
    // read() of a range reads that range
    expect(f32(await b.read(wk))).toEqual(k);
    // disposing a wrapped tensor leaves the caller's buffer alive
    for (const t of [wq, wk, wv, wdo]) b.disposeTensor(t);
    const again = await b.wrapBuffer(buf, { dtype: 'f32', shape, offset: 2 * stride });
    expect(f32(await b.read(again))).toEqual(v);
    b.disposeTensor(again);
    buf.destroy();
  });

  it('refuses a wrong buffer with one line before anything is enqueued', async () => {
    const ok = dev.createBuffer({ size: n * 4, usage: STORAGE | COPY_SRC });
    expect(await code(b.wrapBuffer({} as GPUBuffer, { dtype: 'f32', shape }))).toMatch(/^E_ARG: wrapBuffer: the first argument must be a GPUBuffer/);
    expect(await code(b.wrapBuffer(ok, { dtype: 'f32', shape: [1, 25, 2, 16] }))).toMatch(/^E_SHAPE: .*needs 3200 bytes; the buffer has 3072/);
    expect(await code(b.wrapBuffer(ok, { dtype: 'f32', shape: [4], offset: 4 }))).toMatch(/^E_ARG: .*offset 4 must be a non-negative multiple of .*minStorageBufferOffsetAlignment/);
    expect(await code(b.wrapBuffer(ok, { dtype: 'i8' as 'f32', shape }))).toMatch(/^E_DTYPE: /);
    const noCopy = dev.createBuffer({ size: n * 4, usage: STORAGE });
    expect(await code(b.wrapBuffer(noCopy, { dtype: 'f32', shape }))).toMatch(/^E_ARG: .*usage is STORAGE; a tensor's buffer needs STORAGE \| COPY_SRC/);
    const mappable = dev.createBuffer({ size: n * 4, usage: MAP_READ | COPY_DST });
    expect(await code(b.wrapBuffer(mappable, { dtype: 'f32', shape }))).toMatch(/^E_ARG: .*usage is MAP_READ \| COPY_DST/);
    // a buffer of another device
    const other = await createWebGPUBackend();
    const foreign = other.gpuDevice.createBuffer({ size: n * 4, usage: STORAGE | COPY_SRC });
    expect(await code(b.wrapBuffer(foreign, { dtype: 'f32', shape }))).toMatch(/^E_ARG: wrapBuffer: this backend's device cannot use the buffer/);
    foreign.destroy();
    await other.dispose();
    // nothing of that was enqueued: the backend runs on
    const w = await b.wrapBuffer(ok, { dtype: 'f32', shape });
    expect(await code(b.forward(w, w, w))).toBe('no error');
    expect(await code(b.sync())).toBe('no error');
    b.disposeTensor(w);
    for (const x of [ok, noCopy, mappable]) x.destroy();
  });

  it('exports an output borrowed or transferred', async () => {
    const f = await b.forward(await b.upload(hq), await b.upload(hk), await b.upload(hv));
    const ref = f32(await b.read(f.out));
    const lent = b.exportBuffer(f.out);
    expect(lent).toMatchObject({ offset: 0, bytes: n * 4, dtype: 'f32', shape, transferred: false });
    expect(lent.buffer.usage & (STORAGE | COPY_SRC)).toBe(STORAGE | COPY_SRC);
    const before = b.memoryStats().current;
    const given = b.exportBuffer(f.lse, { transfer: true });
    expect(given.transferred).toBe(true);
    expect((f.lse as { disposed?: boolean }).disposed).toBe(true);
    expect(b.memoryStats().current).toBe(before - given.buffer.size);
    // the transferred buffer is the caller's now: wrapping it back works, and disposing never destroys it
    const back = await b.wrapBuffer(given.buffer, { dtype: 'f32', shape: f.lse.shape });
    expect((await b.read(back)).data.length).toBe(24 * 2);
    b.disposeTensor(back);
    expect(await code(() => b.exportBuffer(back))).toMatch(/^E_ARG: exportBuffer: the tensor was already disposed/);
    expect(await code(() => b.exportBuffer(tensor(q, shape) as unknown as Tensor))).toMatch(/^E_ARG: exportBuffer takes a webgpu device tensor/);
    given.buffer.destroy();
    expect(f32(await b.read(f.out))).toEqual(ref);
    b.disposeTensor(f.out);
  });

  it('appends into KV caches in caller buffers, in place', async () => {
    const c = makeKVCacheCase({ h: 4, hkv: 2, d: 16, seqlens: [5, 9], tnew: 1, tq: 1, causal: true, dtype: 'f32' });
    const inp = kvCacheCaseInputs(c);
    const bytes = inp.kCache.data.byteLength;
    const kb = callerBuffer(dev, bytes, [[0, f32(inp.kCache)]]);
    const vb = callerBuffer(dev, bytes, [[0, f32(inp.vCache)]]);
    const kc = await b.wrapBuffer(kb, { dtype: 'f32', shape: inp.kCache.shape });
    const vc = await b.wrapBuffer(vb, { dtype: 'f32', shape: inp.vCache.shape });
    const dq = await b.upload(inp.q);
    const hostOpts = { ...inp.options, cacheSeqlens: inp.cacheSeqlens, kNew: inp.kNew, vNew: inp.vNew };
    const opts = { ...hostOpts, kNew: await b.upload(inp.kNew!), vNew: await b.upload(inp.vNew!) };
    const r = await b.forwardWithKVCache(dq, kc, vc, opts);
    const hostK = cloneHost(inp.kCache), hostV = cloneHost(inp.vCache);
    const h = await b.forwardWithKVCache(inp.q, hostK, hostV, hostOpts);
    expect(f32(await b.read(r.out))).toEqual(f32(h.out as HostTensor));
    // the caller's buffers hold the appended rows, as the host caches do after the same call
    expect(f32(await b.read(kc))).toEqual(f32(hostK));
    expect(f32(await b.read(vc))).toEqual(f32(hostV));
    expect(f32(hostK)).not.toEqual(f32(inp.kCache));
    for (const t of [kc, vc, dq, r.out, r.lse]) b.disposeTensor(t);
    kb.destroy();
    vb.destroy();
  });

  it("records calls into a caller's command encoder: they run when the caller submits it, after its own commands", async () => {
    const ref = await b.forward(hq, hk, hv, { causal: true });
    const src = callerBuffer(dev, n * 4, [[0, q]]);
    const dst = dev.createBuffer({ size: n * 4, usage: STORAGE | COPY_SRC | COPY_DST });
    const qd = await b.wrapBuffer(dst, { dtype: 'f32', shape }); // empty until the caller's copy runs
    const kd = await b.upload(hk), vd = await b.upload(hv), dod = await b.upload(hdo);
    const enc = dev.createCommandEncoder();
    enc.copyBufferToBuffer(src, 0, dst, 0, n * 4); // the caller's own work, first in the encoder
    const rec = b.recordInto(enc);
    const f = await b.forward(qd, kd, vd, { causal: true });
    const g = await b.backward(qd, kd, vd, f.out, dod, f.lse, { causal: true });
    // until the caller submits, work of our own would run first: refused
    expect(await code(b.read(f.out))).toMatch(/^E_ARG: read while a recording into a caller's command encoder is open/);
    expect(await code(b.sync())).toMatch(/^E_ARG: sync while a recording/);
    expect(await code(b.forward(hq, hk, hv))).toMatch(/^E_ARG: forward on host tensors while a recording/);
    expect(await code(() => b.recordInto(dev.createCommandEncoder()))).toMatch(/^E_ARG: recordInto: a recording into another command encoder is open/);
    dev.queue.submit([enc.finish()]);
    rec.submitted();
    expect(f32(await b.read(f.out))).toEqual(f32(ref.out as HostTensor));
    const gRef = await b.backward(hq, hk, hv, ref.out, hdo, ref.lse, { causal: true });
    expect(f32(await b.read(g.dq))).toEqual(f32(gRef.dq as HostTensor));
    expect(await code(b.sync())).toBe('no error');
    // a call made during the recording but encoded after its submission is refused, the backend runs on
    const enc2 = dev.createCommandEncoder();
    const rec2 = b.recordInto(enc2);
    const late = b.forward(qd, kd, vd);
    dev.queue.submit([enc2.finish()]);
    rec2.submitted();
    expect(await code(late)).toMatch(/^E_ARG: this call was made during a recording whose encoder was submitted before/);
    const after = await b.forward(qd, kd, vd, { causal: true });
    expect(f32(await b.read(after.out))).toEqual(f32(ref.out as HostTensor));
    for (const t of [qd, kd, vd, dod, f.out, f.lse, g.dq, g.dk, g.dv, after.out, after.lse]) b.disposeTensor(t);
    src.destroy();
    dst.destroy();
  });

  it('2,000 random wrapBuffer/exportBuffer calls: each a valid tensor or a one-line FAError, and the backend runs on', async () => {
    let x = 12345;
    const rnd = () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    const pick = <T,>(a: readonly T[]): T => a[Math.floor(rnd() * a.length)];
    const align = dev.limits.minStorageBufferOffsetAlignment;
    const bufs = [
      dev.createBuffer({ size: 4096, usage: STORAGE | COPY_SRC | COPY_DST }),
      dev.createBuffer({ size: 4096, usage: STORAGE }),
      dev.createBuffer({ size: 4096, usage: COPY_SRC | COPY_DST }),
      dev.createBuffer({ size: 20, usage: STORAGE | COPY_SRC }),
      dev.createBuffer({ size: 256, usage: MAP_READ | COPY_DST }),
    ];
    const junk: unknown[] = [null, undefined, 0, 'buf', {}, [], { size: 4096, usage: 132 }, new Float32Array(4)];
    let ok = 0, refused = 0;
    const made: Tensor[] = [];
    for (let i = 0; i < 2000; i++) {
      const buffer = rnd() < 0.85 ? pick(bufs) : pick(junk);
      const dtype = pick(['f32', 'f16', 'bf16', 'f64', '', undefined] as const);
      const shape = pick([[4], [1, 8, 2, 16], [0], [3, 5], [-1], [1.5], 'x', [2 ** 40], []] as const);
      const offset = pick([0, 0, align, 2 * align, 4, align - 4, -align, 1.5, 4096, undefined] as const);
      try {
        const t = await b.wrapBuffer(buffer as GPUBuffer, { dtype, shape, offset } as never);
        made.push(t);
        ok++;
        const e = b.exportBuffer(t);
        expect(e.buffer).toBe(buffer);
      } catch (e) {
        expect(e, String(e)).toBeInstanceOf(FAError);
        expect((e as FAError).message).not.toMatch(/\n/);
        refused++;
      }
    }
    expect(ok).toBeGreaterThan(50);
    expect(refused).toBeGreaterThan(1000);
    for (const t of made) b.disposeTensor(t);
    const w = await b.wrapBuffer(bufs[0], { dtype: 'f32', shape: [1, 8, 2, 16] });
    const f = await b.forward(w, w, w);
    expect((await b.read(f.out)).data.length).toBe(256);
    expect(await code(b.sync())).toBe('no error');
    for (const t of [w, f.out, f.lse]) b.disposeTensor(t);
    for (const x2 of bufs) x2.destroy();
  });

  it('a chain that meets a destroyed caller buffer reports that call at sync, and runs on after', async () => {
    const buf = callerBuffer(dev, n * 4, [[0, q]]);
    const w = await b.wrapBuffer(buf, { dtype: 'f32', shape });
    const good = await b.upload(hk);
    const a = await b.forward(good, good, good);
    buf.destroy();
    const bad = await b.forward(w, a.out, a.out); // queued without waiting; the GPU refuses it
    const after = await b.forward(a.out, good, good);
    const msg = await code(b.sync());
    expect(msg).toMatch(/^E_DEVICE: webgpu: forward failed on the device \(reported at sync\)/);
    expect(await code(b.sync())).toBe('no error');
    const fresh = await b.forward(good, good, good);
    expect(f32(await b.read(fresh.out))).toEqual(f32(await b.read(a.out)));
    for (const t of [w, good, a.out, a.lse, bad.out, bad.lse, after.out, after.lse, fresh.out, fresh.lse]) b.disposeTensor(t);
  });
});

// tfjs starts at the top level (describe bodies are synchronous)
let tf: typeof import('@tensorflow/tfjs-core') | undefined;
let tfSkip = why;
if (!tfSkip) {
  try {
    Object.assign(globalThis, globals);
    (globalThis as { navigator?: unknown }).navigator ??= { gpu: create([]), userAgent: 'node' };
    tf = await import('@tensorflow/tfjs-core');
    await import('@tensorflow/tfjs-backend-webgpu');
    tf.env().set('WEBGPU_CPU_FORWARD', false); // small tensors stay on the GPU
    if (!(await tf.setBackend('webgpu'))) tfSkip = 'tfjs found no WebGPU adapter';
    await tf.ready();
  } catch (e) {
    tfSkip = `tfjs-backend-webgpu failed to start: ${(e as Error).message}`;
  }
}

describe('webgpu: a tfjs-backend-webgpu program on its own device, no copies', () => {
  if (tfSkip || !tf) {
    it.skip(`skipped: ${tfSkip}`, () => undefined);
    return;
  }
  const tfjs = tf;
  it(TFJS_ROUNDTRIP, async () => {
    expect(await tfjsRoundTrip(tfjs as unknown as Parameters<typeof tfjsRoundTrip>[0])).toMatch(/^ok: /);
  });
});
