// Helpers of the context-parallel device scripts (single.mjs, bench.mjs): device data, shard
// gathering, result comparison, sampled-row checks against the float64 reference, timing.
import { fromBF16Bits, fromF16Bits, referenceRows, UNIT_ROUNDOFF } from '@fa/core';
import { CudaTensor, loadNative } from '@fa/cuda';

const native = () => {
  const n = loadNative();
  if (!n.ok || !n.binding.shardOps) throw new Error(`the CUDA addon with shard ops is needed: ${n.ok ? 'rebuild it' : n.reason}`);
  return n.binding.shardOps;
};

/** A device tensor of seeded uniform values in [-scale, scale). */
export async function randomTensor(backend, shape, dtype, seed, scale = 1) {
  const n = shape.reduce((a, b) => a * b, 1);
  const t = new CudaTensor(dtype, shape, backend.context.alloc(n * (dtype === 'f32' ? 4 : 2)), backend);
  await native().random(t.handle, dtype, n, seed, scale);
  return t;
}

/** Rows of the token axis (axis 1 of [1, T, H, D], or the last axis of an LSE [1, H, T]) gathered on the device. */
export async function gatherRows(backend, full, ranges, kind = 'tokens') {
  const ops = native();
  const el = full.dtype === 'f32' ? 4 : 2;
  const rows = ranges.reduce((a, g) => a + g.end - g.start, 0);
  if (kind === 'lse') {
    const [B, H, T] = full.shape;
    const t = new CudaTensor('f32', [B, H, rows], backend.context.alloc(B * H * rows * 4), backend);
    let o = 0;
    for (let bh = 0; bh < B * H; bh++) for (const g of ranges) {
      await ops.copy(t.handle, o * 4, full.handle, (bh * T + g.start) * 4, (g.end - g.start) * 4);
      o += g.end - g.start;
    }
    return t;
  }
  const [B, T, H, D] = full.shape;
  const row = H * D * el;
  const t = new CudaTensor(full.dtype, [B, rows, H, D], backend.context.alloc(B * rows * row), backend);
  let o = 0;
  for (let b = 0; b < B; b++) for (const g of ranges) {
    await ops.copy(t.handle, o * row, full.handle, (b * T + g.start) * row, (g.end - g.start) * row);
    o += g.end - g.start;
  }
  return t;
}

export function values(t) {
  if (t.dtype === 'f32') return t.data;
  const rd = t.dtype === 'bf16' ? fromBF16Bits : fromF16Bits;
  const out = new Float32Array(t.data.length);
  for (let i = 0; i < out.length; i++) out[i] = rd(t.data[i]);
  return out;
}

/** max |a − b|, ‖a − b‖/‖b‖, and whether the bits are identical (host tensors). */
export function diff(a, b) {
  const x = values(a);
  const y = values(b);
  let maxAbs = 0;
  let e2 = 0;
  let r2 = 0;
  let identical = a.data.length === b.data.length;
  for (let i = 0; i < y.length; i++) {
    if (a.data[i] !== b.data[i]) identical = false;
    const fx = Number.isFinite(x[i]) ? x[i] : 0;
    const fy = Number.isFinite(y[i]) ? y[i] : 0;
    if (Number.isFinite(x[i]) !== Number.isFinite(y[i])) maxAbs = Infinity;
    const e = Math.abs(fx - fy);
    if (e > maxAbs) maxAbs = e;
    e2 += e * e;
    r2 += fy * fy;
  }
  return { maxAbs, rel: r2 > 0 ? Math.sqrt(e2 / r2) : Math.sqrt(e2), identical };
}

/**
 * Sampled rows against the float64 reference (referenceRows): the ring's out must err at most
 * twice as much as the single-GPU result's plus two ulps of the dtype (the conformance kit's
 * f16/bf16 rule with the single-GPU engine in place of naive attention), and its LSE within the
 * kit's LSE tolerance. `rowOf(which, b, h, i)` returns { out: Float32Array(D), lse } for
 * which = 'ring' | 'single' (single may be absent: then only the LSE rule and the ring's error are reported).
 */
export function checkRows({ q, k, v, opts, rows, rowOf, dtype }) {
  const ref = referenceRows(q, k, v, opts, rows);
  const u = UNIT_ROUNDOFF[dtype];
  let errRing = 0;
  let errSingle = 0;
  let refMax = 0;
  let lseErr = 0;
  let lseOk = true;
  let haveSingle = true;
  ref.forEach((r, n) => {
    const ring = rowOf('ring', rows[n]);
    const single = rowOf('single', rows[n]);
    if (!single) haveSingle = false;
    for (let d = 0; d < r.out.length; d++) {
      refMax = Math.max(refMax, Math.abs(r.out[d]));
      errRing = Math.max(errRing, Math.abs(ring.out[d] - r.out[d]));
      if (single) errSingle = Math.max(errSingle, Math.abs(single.out[d] - r.out[d]));
    }
    if (r.lse === -Infinity) lseOk &&= ring.lse === -Infinity;
    else {
      const e = Math.abs(ring.lse - r.lse);
      lseErr = Math.max(lseErr, e);
      lseOk &&= e <= 4 * (1e-5 + 8 * 2 ** -24 * (Math.abs(r.lse) + 1));
    }
  });
  const bound = haveSingle ? 2 * errSingle + 4 * u * refMax : 8 * u * refMax;
  return { rows: rows.length, errRing, errSingle: haveSingle ? errSingle : undefined, bound, lseErr, pass: errRing <= bound && lseOk };
}

/** Median wall time (ms) of `reps` awaited calls after one warm-up; `after` runs untimed after each. */
export async function timeIt(fn, reps, after) {
  const r0 = await fn();
  if (after) await after(r0);
  const ms = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    const r = await fn();
    ms.push(performance.now() - t0);
    if (after) await after(r);
  }
  ms.sort((a, b) => a - b);
  return ms[Math.floor(ms.length / 2)];
}

/** An engine whose forward/backward calls are timed (ms summed) — the attention inside a ring pass. */
export function timedEngine(engine) {
  const stats = { forwardMs: 0, backwardMs: 0, calls: 0 };
  const wrap = (name, key) => async (...a) => {
    const t0 = performance.now();
    try {
      return await engine[name](...a);
    } finally {
      stats[key] += performance.now() - t0;
      stats.calls++;
    }
  };
  const proxy = new Proxy(engine, {
    get(target, p) {
      if (p === 'forward') return wrap('forward', 'forwardMs');
      if (p === 'backward') return wrap('backward', 'backwardMs');
      const x = Reflect.get(target, p);
      return typeof x === 'function' ? x.bind(target) : x;
    },
  });
  return { engine: proxy, stats, reset: () => Object.assign(stats, { forwardMs: 0, backwardMs: 0, calls: 0 }) };
}

/** Bytes in use by the device's default memory pool: peak since the last reset. */
export function poolPeak(device, reset = false) {
  return native().memStats(device, reset).high;
}

export const gb = (x) => (x / 2 ** 30).toFixed(2);
