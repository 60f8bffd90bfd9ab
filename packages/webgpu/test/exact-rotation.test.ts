/**
 * wgsl/exact-rotation.ts against the float64 reference it must equal bit for bit: exact_rot(a, b,
 * c, d) = fround(a·b − c·d) as JavaScript computes it (exact products in doubles, one rounding
 * to float64, one to float32), and xr_f16 = core's toF16Bits, over random bit patterns of every
 * binade (subnormals, zeros, ±∞, NaN), rotary-like values, exponent gaps around the kernel's
 * cut-off and constructed double-rounding ties.
 */
import { describe, expect, it } from 'vitest';
import { toF16Bits } from '@fa/core';
import { acquire } from '../dist/gpu.js';
import { EXACT_ROTATION_WGSL } from '../dist/wgsl/exact-rotation.js';

let dev: GPUDevice | undefined;
let why = '';
try {
  dev = (await acquire()).device;
} catch (e) {
  why = (e as Error).message;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const bitsOf = (x: number) => ((f32[0] = x), u32[0]);
const valOf = (b: number) => ((u32[0] = b >>> 0), f32[0]);

function cases(): Uint32Array<ArrayBuffer> {
  let s = 0x9e3779b9;
  const rnd = () => ((s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0), s);
  const out: number[] = [];
  const push = (...x: number[]) => out.push(...x.map((v) => v >>> 0));
  for (let i = 0; i < 6000; i++) push(rnd(), rnd(), rnd(), rnd()); // any bits
  for (let i = 0; i < 6000; i++) {
    // rotary-like: values of unit size, cos/sin in [-1, 1]
    const g = () => bitsOf((rnd() / 2 ** 32 - 0.5) * 8);
    const t = () => bitsOf(Math.cos(rnd() / 2 ** 20));
    push(g(), t(), g(), t());
  }
  for (let i = 0; i < 4000; i++) {
    // exponent gaps near the cut-off (56 after normalisation), subnormal and huge magnitudes
    const e1 = (rnd() % 254) + 1, gap = (rnd() % 80) - 20;
    const e2 = Math.min(254, Math.max(0, e1 - gap));
    const m = () => rnd() & 0x807fffff;
    push(m() | (e1 << 23), m() | (127 << 23), m() | (e2 << 23), m() | (127 << 23));
  }
  for (let i = 0; i < 4000; i++) {
    // a·b − c·d with c·d a tiny offset from a value halfway between two float32s: a·b is a
    // float32 midpoint times 1 (exact), c·d a few float64 ulps of it
    const mid = bitsOf(1 + ((rnd() & 0x7fffff) + 0.5) * 2 ** -23) ; // (rounded to f32: a neighbour)
    const a = (rnd() & 0x007fffff) | (127 << 23);
    const c = (rnd() & 0x007fffff) | ((127 - 24 - (rnd() % 40)) << 23);
    push(a | (rnd() & 0x80000000), bitsOf(1 + 2 ** -23), c, mid & 0x3fffffff);
  }
  // double rounding: a·b = 1 + 2^-11 + 2^-24 is a float32 midpoint; ± 2^-k beneath float64's
  // half ulp rounds to the midpoint first, then to even — not to the nearer float32 (both paths:
  // exponents within the cut-off, and farther)
  for (const k of [15, 25, 30, 35, 40, 50]) {
    const a = bitsOf(1 + 2 ** -12), t = bitsOf(2 ** -k);
    push(a, a, t, t, a, a, t | 0x80000000, t, a | 0x80000000, a, t, t);
  }
  for (const x of [0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 1, 0x80000001, 0x00800000, 0x7f7fffff, 0xff7fffff]) {
    for (const y of [0, 0x80000000, 0x3f800000, 0xbf800000, 1, 0x7f7fffff, 0x00800000]) push(x, y, y, x), push(x, x, y, y);
  }
  return new Uint32Array(out);
}

describe('exact rotation in WGSL integers', () => {
  if (!dev) {
    it.skip(`skipped: no WebGPU in this process — ${why}`, () => undefined);
    return;
  }
  const device = dev;
  it('equals fround(a·b − c·d) and core\'s toF16Bits of it, bit for bit', async () => {
    const input = cases();
    const n = input.length / 4;
    const code = `${EXACT_ROTATION_WGSL}
@group(0) @binding(0) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> y: array<vec2<u32>>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.x + g.y * 65535u * 64u;
  if (i >= arrayLength(&x)) { return; }
  let v = x[i];
  let r = exact_rot(v.x, v.y, v.z, v.w);
  y[i] = vec2<u32>(r, xr_f16(r));
}`;
    const module = device.createShaderModule({ code });
    const pipe = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    const xb = device.createBuffer({ size: input.byteLength, usage: 128 | 8 });
    device.queue.writeBuffer(xb, 0, input);
    const yb = device.createBuffer({ size: n * 8, usage: 128 | 4 });
    const rb = device.createBuffer({ size: n * 8, usage: 1 | 8 });
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipe);
    pass.setBindGroup(0, device.createBindGroup({ layout: pipe.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: xb } }, { binding: 1, resource: { buffer: yb } }] }));
    pass.dispatchWorkgroups(Math.ceil(n / 64));
    pass.end();
    enc.copyBufferToBuffer(yb, 0, rb, 0, n * 8);
    device.queue.submit([enc.finish()]);
    await rb.mapAsync(1);
    const got = new Uint32Array(rb.getMappedRange().slice(0));
    rb.unmap();
    const bad: string[] = [];
    for (let i = 0; i < n; i++) {
      const [a, b, c, d] = [0, 1, 2, 3].map((k) => valOf(input[4 * i + k]));
      const want = Math.fround(a * b - c * d);
      const wb = bitsOf(want);
      const same = Number.isNaN(want) ? Number.isNaN(valOf(got[2 * i])) : got[2 * i] === wb;
      if (!same && bad.length < 5) bad.push(`rot(${[a, b, c, d].join(', ')}) = ${valOf(got[2 * i])} (0x${got[2 * i].toString(16)}), want ${want} (0x${wb.toString(16)})`);
      const h = toF16Bits(Number.isNaN(want) ? NaN : want);
      if (same && got[2 * i + 1] !== h && bad.length < 5) bad.push(`f16(${want}) = 0x${got[2 * i + 1].toString(16)}, want 0x${h.toString(16)}`);
      if (!same || got[2 * i + 1] !== h) bad.push('');
    }
    expect(bad.filter(Boolean), `${bad.length} of ${n} differ`).toEqual([]);
  });
});
