import { describe, it, expect, afterAll } from 'vitest';
import { tensor } from '@fa/core';
import { createWebGPUBackend, type WebGPUBackend } from '../dist/index.js';
import { randn, reference, relErr, toF64 } from './ref.js';

let be: WebGPUBackend;
afterAll(async () => { await be?.dispose(); });

describe('smoke', () => {
  it('forward + backward f32', async () => {
    be = await createWebGPUBackend();
    const B = 1, T = 37, H = 2, D = 16;
    const q = tensor(randn(B * T * H * D, 1), [B, T, H, D]);
    const k = tensor(randn(B * T * H * D, 2), [B, T, H, D]);
    const v = tensor(randn(B * T * H * D, 3), [B, T, H, D]);
    const dO = tensor(randn(B * T * H * D, 4), [B, T, H, D]);
    const opts = { causal: true };
    const t0 = performance.now();
    const r = await be.forward(q, k, v, opts);
    const ref = reference(q, k, v, opts, dO);
    console.log(be.device, 'fwd ms', performance.now() - t0, 'out err', relErr(toF64(r.out as any), ref.out), 'lse err', relErr((r.lse as any).data, ref.lse));
    const g = await be.backward(q, k, v, r.out, dO, r.lse, opts);
    console.log('dq', relErr(toF64(g.dq as any), ref.dq!), 'dk', relErr(toF64(g.dk as any), ref.dk!), 'dv', relErr(toF64(g.dv as any), ref.dv!));
    expect(relErr(toF64(r.out as any), ref.out)).toBeLessThan(1e-5);
  });
});
