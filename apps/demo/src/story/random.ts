/**
 * Seeded inputs for the story's parts (run.ts: q, k, v, dOut; generate.ts: the KV cache and the
 * queries). Runs in Node and in browsers: no node:* imports.
 */
import { allocHost, encode, tensor, type DType, type HostTensor } from '@fa/core';

/** mulberry32: a seeded generator of uniform numbers in [0, 1). */
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

/** n standard-normal numbers (Box–Muller, two from each pair of uniforms). */
export function gaussian(n: number, next: () => number): Float32Array {
  const f = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(1 - next()));
    const th = 2 * Math.PI * next();
    f[i] = r * Math.cos(th);
    if (i + 1 < n) f[i + 1] = r * Math.sin(th);
  }
  return f;
}

/**
 * A host tensor of `values` in `dtype` (rounded once for f16/bf16). `shared`: in SharedArrayBuffer
 * memory where available (the CPU engine's worker threads then need no copy); GPU engines get
 * ordinary ArrayBuffers (Dawn's writeBuffer refuses shared ones).
 */
export function hostIn(values: Float32Array, dtype: DType, shape: readonly number[], shared: boolean): HostTensor {
  const n = values.length;
  const data = shared ? allocHost(dtype, n) : dtype === 'f32' ? new Float32Array(n) : new Uint16Array(n);
  if (dtype === 'f32') (data as Float32Array).set(values);
  else encode(dtype, values, data as Uint16Array);
  return tensor(data, shape, dtype);
}
