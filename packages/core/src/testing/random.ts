/**
 * Seeded randomness for tests: a small, fast PRNG (sfc32 seeded through splitmix32) and
 * generators of normal-ish values and host tensors of any dtype. Same seed, same numbers, on
 * every platform.
 */
import type { DType } from '../dtype.js';
import { decode } from '../dtype.js';
import { dtypeRounder } from '../naive.js';
import { numel, type HostTensor } from '../tensor.js';

export interface Rng {
  /** Uniform in [0, 1), 32 bits of randomness. */
  next(): number;
  /** Uniform in [lo, hi). */
  uniform(lo: number, hi: number): number;
  /** Uniform integer in [lo, hi] (inclusive). */
  int(lo: number, hi: number): number;
  /** Standard normal (Box–Muller). */
  normal(): number;
  /** true with probability p. */
  bool(p?: number): boolean;
  pick<T>(items: readonly T[]): T;
  /** An independent generator derived from this one's stream. */
  fork(): Rng;
}

function splitmix32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** A seeded generator (sfc32). Any finite number is a valid seed. */
export function createRng(seed: number): Rng {
  const sm = splitmix32(Math.floor(Math.abs(seed)) ^ (seed < 0 ? 0x5bd1e995 : 0));
  let a = sm();
  let b = sm();
  let c = sm();
  let d = sm();
  const u32 = (): number => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) >>> 0;
    return t;
  };
  for (let i = 0; i < 12; i++) u32();
  let spare: number | undefined;
  const rng: Rng = {
    next: () => u32() / 4294967296,
    uniform: (lo, hi) => lo + (hi - lo) * (u32() / 4294967296),
    int: (lo, hi) => lo + Math.floor((u32() / 4294967296) * (hi - lo + 1)),
    normal: () => {
      if (spare !== undefined) {
        const s = spare;
        spare = undefined;
        return s;
      }
      let u = 0;
      while (u === 0) u = u32() / 4294967296;
      const v = u32() / 4294967296;
      const r = Math.sqrt(-2 * Math.log(u));
      spare = r * Math.sin(2 * Math.PI * v);
      return r * Math.cos(2 * Math.PI * v);
    },
    bool: (p = 0.5) => u32() / 4294967296 < p,
    pick: <T>(items: readonly T[]): T => items[Math.floor((u32() / 4294967296) * items.length)],
    fork: () => createRng(u32()),
  };
  return rng;
}

/** n normal values times `scale`, as float32. */
export function randomValues(rng: Rng, n: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = rng.normal() * scale;
  return out;
}

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

/**
 * Bit patterns of the values rounded to f16 or bf16 (ties to even, from the exact value); the
 * same as encode() but fast for any input array type.
 */
export function toBits(dtype: 'f16' | 'bf16', values: ArrayLike<number>, out: Uint16Array = new Uint16Array(values.length)): Uint16Array {
  const rd = dtypeRounder(dtype);
  for (let i = 0; i < values.length; i++) {
    const x = values[i];
    if (x !== x) {
      out[i] = dtype === 'f16' ? 0x7e00 : 0x7fc0;
      continue;
    }
    f32buf[0] = rd(x); // exact in float32
    const u = u32buf[0];
    if (dtype === 'bf16') {
      out[i] = u >>> 16;
      continue;
    }
    const sign = (u >>> 16) & 0x8000;
    const e = ((u >>> 23) & 0xff) - 127;
    if (e === 128) out[i] = sign | 0x7c00;
    else if (e >= -14) out[i] = sign | ((e + 15) << 10) | ((u >>> 13) & 0x3ff);
    else out[i] = sign | Math.round(Math.abs(f32buf[0]) * 16777216); // subnormal (or zero): an exact multiple of 2^-24
  }
  return out;
}

/** Rounds values to `dtype` and wraps them as a host tensor (raw bits for f16/bf16). */
export function hostTensor(values: ArrayLike<number>, shape: readonly number[], dtype: DType): HostTensor {
  if (values.length !== numel(shape)) throw new RangeError(`hostTensor: ${values.length} values for shape [${shape.join(', ')}]`);
  const data = dtype === 'f32' ? Float32Array.from(values) : toBits(dtype, values);
  return { kind: 'host', dtype, shape: [...shape], data };
}

/** A tensor of normal values times `scale`, rounded to `dtype`. */
export function randomTensor(rng: Rng, shape: readonly number[], dtype: DType, scale = 1): HostTensor {
  return hostTensor(randomValues(rng, numel(shape), scale), shape, dtype);
}

/** The exact values of a host tensor as float64. */
export function tensorValues(t: HostTensor): Float64Array {
  if (t.dtype === 'f32') return Float64Array.from(t.data as Float32Array);
  return Float64Array.from(decode(t.dtype, t.data as Uint16Array));
}
