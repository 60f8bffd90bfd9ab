/**
 * Dtypes and exact conversions. f16 and bf16 values travel as raw 16-bit patterns in a
 * Uint16Array; every conversion to them rounds to nearest, ties to even, from the exact value
 * (so a float64 input is rounded once, never through float32 first).
 */
import { FAError } from './errors.js';

export type DType = 'f32' | 'f16' | 'bf16';
export const DTYPES: readonly DType[] = ['f32', 'f16', 'bf16'];

export function isDType(x: unknown): x is DType {
  return x === 'f32' || x === 'f16' || x === 'bf16';
}

export function parseDType(x: unknown, what = 'dtype'): DType {
  if (isDType(x)) return x;
  throw new FAError('E_DTYPE', `${what} must be one of f32, f16, bf16; got ${JSON.stringify(x)}`);
}

export function bytesPerElement(dtype: DType): number {
  return dtype === 'f32' ? 4 : 2;
}

/** Unit roundoff (half an ulp at 1) of each dtype; used by tolerance policies. */
export const UNIT_ROUNDOFF: Record<DType, number> = { f32: 2 ** -24, f16: 2 ** -11, bf16: 2 ** -8 };

function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

function floorLog2(a: number): number {
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  return e;
}

// A float64's bits, for encodeMagnitude's fast path; HI is the index of its high word.
const bitsF64 = new Float64Array(1);
const bitsU32 = new Uint32Array(bitsF64.buffer);
const HI = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0;

/**
 * Rounds |x| to a binary format with `mant` (< 20) fraction bits, minimum normal exponent `emin`
 * and maximum exponent `emax`; returns the bit pattern without sign, or -1 for overflow.
 * A value whose exponent is a normal one of the format (nearly all of them) is rounded on its
 * float64 bits: the top `mant` fraction bits, plus one when the other 52 − mant are above half,
 * or exactly half and the kept bits odd (a carry out of the fraction is the next exponent, and
 * past emax the overflow). That is ~20× faster than the arithmetic below, which takes the rest
 * (subnormal results, float64 subnormals, overflow) and gives the same bits on the whole range.
 */
function encodeMagnitude(a: number, mant: number, emin: number, emax: number): number {
  if (a === 0) return 0;
  bitsF64[0] = a;
  const hi = bitsU32[HI];
  const eb = (hi >>> 20) - 1023;
  if (eb >= emin && eb <= emax) {
    const shift = 20 - mant;
    const frac = hi & 0xfffff;
    const top = frac >>> shift;
    const rem = frac & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    let m = ((eb - emin + 1) << mant) | top;
    if (rem > half || (rem === half && (bitsU32[1 - HI] !== 0 || (top & 1) === 1))) m++;
    return m >= (emax - emin + 2) << mant ? -1 : m;
  }
  let e = Math.max(floorLog2(a), emin);
  let r = roundHalfEven(a / 2 ** (e - mant)); // exact scaling by a power of two
  if (r >= 2 ** (mant + 1)) {
    r /= 2;
    e += 1;
  }
  if (e > emax) return -1;
  if (r < 2 ** mant) return r; // subnormal (only reachable when e === emin)
  return ((e - emin + 1) << mant) | (r - 2 ** mant);
}

/** Nearest f16 bit pattern (ties to even). NaN → quiet NaN with the sign kept. */
export function toF16Bits(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  if (Number.isNaN(x)) return 0x7e00 | (Math.sign(x) < 0 ? 0x8000 : 0);
  const a = Math.abs(x);
  if (a === Infinity) return sign | 0x7c00;
  const m = encodeMagnitude(a, 10, -14, 15);
  return sign | (m < 0 ? 0x7c00 : m);
}

/** Nearest bf16 bit pattern (ties to even). NaN → quiet NaN. */
export function toBF16Bits(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  if (Number.isNaN(x)) return 0x7fc0;
  const a = Math.abs(x);
  if (a === Infinity) return sign | 0x7f80;
  const m = encodeMagnitude(a, 7, -126, 127);
  return sign | (m < 0 ? 0x7f80 : m);
}

let f16Table: Float32Array | undefined;
function f16Decode(): Float32Array {
  if (f16Table) return f16Table;
  const t = new Float32Array(65536);
  for (let b = 0; b < 65536; b++) {
    const s = b & 0x8000 ? -1 : 1;
    const e = (b >> 10) & 0x1f;
    const f = b & 0x3ff;
    if (e === 0) t[b] = s * f * 2 ** -24;
    else if (e === 31) t[b] = f === 0 ? s * Infinity : NaN;
    else t[b] = s * (1 + f / 1024) * 2 ** (e - 15);
  }
  return (f16Table = t);
}

export function fromF16Bits(b: number): number {
  return f16Decode()[b & 0xffff];
}

const cvtBuf = new ArrayBuffer(4);
const cvtF32 = new Float32Array(cvtBuf);
const cvtU32 = new Uint32Array(cvtBuf);

export function fromBF16Bits(b: number): number {
  cvtU32[0] = (b & 0xffff) << 16;
  return cvtF32[0];
}

/** Rounds float32 values to f16 or bf16 bit patterns (exact, ties to even). */
export function encode(dtype: 'f16' | 'bf16', src: ArrayLike<number>, out: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  if (dtype === 'bf16') {
    if (src instanceof Float32Array) {
      // float32 → bf16 on the bit pattern: add half an ulp (plus the tie bit) and truncate.
      const u = new Uint32Array(src.buffer, src.byteOffset, src.length);
      for (let i = 0; i < u.length; i++) {
        const x = u[i];
        if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) out[i] = 0x7fc0;
        else out[i] = ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
      }
    } else for (let i = 0; i < src.length; i++) out[i] = toBF16Bits(src[i]);
  } else {
    for (let i = 0; i < src.length; i++) out[i] = toF16Bits(src[i]);
  }
  return out;
}

/** Widens f16 or bf16 bit patterns to float32 (exact). */
export function decode(dtype: 'f16' | 'bf16', src: Uint16Array, out: Float32Array = new Float32Array(src.length)): Float32Array {
  if (dtype === 'bf16') {
    const u = new Uint32Array(out.buffer, out.byteOffset, out.length);
    for (let i = 0; i < src.length; i++) u[i] = src[i] << 16;
  } else {
    const t = f16Decode();
    for (let i = 0; i < src.length; i++) out[i] = t[src[i]];
  }
  return out;
}

/** Rounds each value to the nearest value representable in `dtype` (returned as float32). */
export function roundTo(dtype: DType, src: ArrayLike<number>, out: Float32Array = new Float32Array(src.length)): Float32Array {
  if (dtype === 'f32') {
    for (let i = 0; i < src.length; i++) out[i] = src[i];
    return out;
  }
  return decode(dtype, encode(dtype, src), out);
}

/** Nearest value of `dtype` to x, as a number. */
export function roundScalar(dtype: DType, x: number): number {
  if (dtype === 'f32') return Math.fround(x);
  return dtype === 'f16' ? fromF16Bits(toF16Bits(x)) : fromBF16Bits(toBF16Bits(x));
}
