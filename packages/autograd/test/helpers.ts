import '@fa/core'; // registers the "cpu" backend
import { expect } from 'vitest';
import { Rng, Tensor, randn, type GradcheckResult } from '@fa/autograd';

/** A float64 leaf with seeded normal values (gradcheck inputs). */
export function leaf(shape: number[], seed: number, opts: { std?: number; requiresGrad?: boolean; name?: string } = {}): Tensor {
  return randn(shape, { rng: new Rng(seed), std: opts.std ?? 1, precision: 'float64', requiresGrad: opts.requiresGrad ?? true, name: opts.name });
}

export function expectGradcheck(r: GradcheckResult, label: string): void {
  console.log(`gradcheck ${label} (${r.precision}):\n${r.summary.replace(/^/gm, '  ')}`);
  expect(r.ok, `${label}\n${r.summary}`).toBe(true);
}

/** max |a − b| / max |b|. */
export function relMaxErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let e = 0;
  let s = 0;
  for (let i = 0; i < a.length; i++) {
    e = Math.max(e, Math.abs(a[i] - b[i]));
    s = Math.max(s, Math.abs(b[i]));
  }
  return s > 0 ? e / s : e;
}

/** ‖a − b‖ / ‖b‖. */
export function relNormErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let e = 0;
  let s = 0;
  for (let i = 0; i < a.length; i++) {
    e += (a[i] - b[i]) ** 2;
    s += b[i] ** 2;
  }
  return s > 0 ? Math.sqrt(e / s) : Math.sqrt(e);
}
