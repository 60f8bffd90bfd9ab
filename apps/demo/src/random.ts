/** Seeded random inputs for demo and bench (mulberry32 + Box–Muller). */
import { encode, type DType, type HostTensor } from '@fa/core';

export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomTensor(shape: readonly number[], dtype: DType, next: () => number): HostTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const f = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(1 - next()));
    const th = 2 * Math.PI * next();
    f[i] = r * Math.cos(th);
    if (i + 1 < n) f[i + 1] = r * Math.sin(th);
  }
  return dtype === 'f32' ? { kind: 'host', dtype, shape: [...shape], data: f } : { kind: 'host', dtype, shape: [...shape], data: encode(dtype, f) };
}
