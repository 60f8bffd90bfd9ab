import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { decode, encode, fromBF16Bits, fromF16Bits, roundScalar, roundTo, toBF16Bits, toF16Bits } from '../dist/index.js';

const hex = (b: number) => '0x' + b.toString(16).padStart(4, '0');
const isF16NaN = (b: number) => (b & 0x7c00) === 0x7c00 && (b & 0x03ff) !== 0;
const isBF16NaN = (b: number) => (b & 0x7f80) === 0x7f80 && (b & 0x007f) !== 0;

/** Float32 value of a 32-bit pattern. */
function f32FromBits(u: number): number {
  return new Float32Array(new Uint32Array([u >>> 0]).buffer)[0];
}

/** Python's float.hex() → the exact double. */
function parseHexFloat(s: string): number {
  const m = /^(-)?0x([01])\.([0-9a-f]*)p([+-]\d+)$/.exec(s);
  if (!m) throw new Error(`bad hex float ${s}`);
  const mant = BigInt('0x' + m[2] + m[3]);
  const v = Number(mant) * 2 ** (Number(m[4]) - 4 * m[3].length);
  return m[1] ? -v : v;
}

describe('toF16Bits: known bit patterns', () => {
  const cases: [string, number, number][] = [
    ['+0', 0, 0x0000],
    ['-0', -0, 0x8000],
    ['1', 1, 0x3c00],
    ['-2', -2, 0xc000],
    ['1/3', 1 / 3, 0x3555],
    ['min subnormal 2^-24', 2 ** -24, 0x0001],
    ['-min subnormal', -(2 ** -24), 0x8001],
    ['max subnormal 1023·2^-24', 1023 * 2 ** -24, 0x03ff],
    ['min normal 2^-14', 2 ** -14, 0x0400],
    ['max finite 65504', 65504, 0x7bff],
    ['-65504', -65504, 0xfbff],
    ['65519.99 rounds down to 65504', 65519.99, 0x7bff],
    ['65520 (halfway to 2^16) overflows to Inf', 65520, 0x7c00],
    ['-65520 overflows to -Inf', -65520, 0xfc00],
    ['1e6 overflows', 1e6, 0x7c00],
    ['Number.MAX_VALUE overflows', Number.MAX_VALUE, 0x7c00],
    ['+Inf', Infinity, 0x7c00],
    ['-Inf', -Infinity, 0xfc00],
    // ties to even at several exponents (ulp at 1 is 2^-10, at 1024 is 1, at 2048 is 2)
    ['1 + 2^-11 (tie) → 1', 1 + 2 ** -11, 0x3c00],
    ['1 + 3·2^-11 (tie) → 1 + 2^-9', 1 + 3 * 2 ** -11, 0x3c02],
    ['1024.5 (tie) → 1024', 1024.5, 0x6400],
    ['1025.5 (tie) → 1026', 1025.5, 0x6402],
    ['2049 (tie) → 2048', 2049, 0x6800],
    ['2051 (tie) → 2052', 2051, 0x6802],
    ['0.5 + 2^-12 (tie) → 0.5', 0.5 + 2 ** -12, 0x3800],
    ['-(1 + 3·2^-11) → -(1 + 2^-9)', -(1 + 3 * 2 ** -11), 0xbc02],
    // just above / below halfway
    ['1 + 2^-11 + 2^-30 → up', 1 + 2 ** -11 + 2 ** -30, 0x3c01],
    ['1 + 2^-11 − 2^-30 → down', 1 + 2 ** -11 - 2 ** -30, 0x3c00],
    ['2049 + 2^-20 → up', 2049 + 2 ** -20, 0x6801],
    // subnormal ties and underflow
    ['2^-25 (tie between 0 and min subnormal) → 0', 2 ** -25, 0x0000],
    ['-2^-25 → -0', -(2 ** -25), 0x8000],
    ['2^-25 + 2^-40 → min subnormal', 2 ** -25 + 2 ** -40, 0x0001],
    ['3·2^-25 (tie) → 2·2^-24', 3 * 2 ** -25, 0x0002],
    ['5·2^-25 (tie) → 2·2^-24', 5 * 2 ** -25, 0x0002],
    ['1023.5·2^-24 (tie) → min normal', 1023.5 * 2 ** -24, 0x0400],
    ['2^-26 underflows to 0', 2 ** -26, 0x0000],
    ['smallest double underflows', 5e-324, 0x0000],
    // float64 input rounded once: via float32 this would be the tie 1 + 2^-11 → 1
    ['1 + 2^-11 + 2^-40 (double) → up', 1 + 2 ** -11 + 2 ** -40, 0x3c01],
  ];
  for (const [name, x, bits] of cases) {
    it(`${name} → ${hex(bits)}`, () => expect(hex(toF16Bits(x))).toBe(hex(bits)));
  }

  it('NaN stays NaN', () => {
    expect(isF16NaN(toF16Bits(NaN))).toBe(true);
    expect(isF16NaN(toF16Bits(-NaN))).toBe(true);
    expect(Number.isNaN(fromF16Bits(toF16Bits(NaN)))).toBe(true);
  });

  it('double rounding through float32 would differ: the value is rounded once', () => {
    const x = 1 + 2 ** -11 + 2 ** -40;
    expect(Math.fround(x)).toBe(1 + 2 ** -11); // float32 lands exactly on the f16 tie
    expect(toF16Bits(Math.fround(x))).toBe(0x3c00); // which would round to even (down)
    expect(toF16Bits(x)).toBe(0x3c01); // the exact value is above the tie (up)
    expect(roundScalar('f16', x)).toBe(1 + 2 ** -10);
  });
});

describe('toBF16Bits: known bit patterns', () => {
  const maxFinite = (2 - 2 ** -7) * 2 ** 127; // 0x7f7f
  const cases: [string, number, number][] = [
    ['+0', 0, 0x0000],
    ['-0', -0, 0x8000],
    ['1', 1, 0x3f80],
    ['-2', -2, 0xc000],
    ['min subnormal 2^-133', 2 ** -133, 0x0001],
    ['max subnormal 127·2^-133', 127 * 2 ** -133, 0x007f],
    ['min normal 2^-126', 2 ** -126, 0x0080],
    ['max finite', maxFinite, 0x7f7f],
    ['-max finite', -maxFinite, 0xff7f],
    ['just below the overflow tie → max finite', (2 - 2 ** -8) * 2 ** 127 - 2 ** 100, 0x7f7f],
    ['overflow tie (2 − 2^-8)·2^127 → Inf (max finite is odd)', (2 - 2 ** -8) * 2 ** 127, 0x7f80],
    ['float32 max → Inf', 3.4028234663852886e38, 0x7f80],
    ['1e39 → Inf', 1e39, 0x7f80],
    ['-1e39 → -Inf', -1e39, 0xff80],
    ['+Inf', Infinity, 0x7f80],
    ['-Inf', -Infinity, 0xff80],
    ['1 + 2^-8 (tie) → 1', 1 + 2 ** -8, 0x3f80],
    ['1 + 3·2^-8 (tie) → 1 + 2^-6', 1 + 3 * 2 ** -8, 0x3f82],
    ['256 + 1 (tie) → 256', 257, 0x4380],
    ['256 + 3 (tie) → 260', 259, 0x4382],
    ['2^100·(1 + 2^-8) (tie) → 2^100', 2 ** 100 * (1 + 2 ** -8), 0x71800000 >>> 16],
    ['1 + 2^-8 + 2^-30 → up', 1 + 2 ** -8 + 2 ** -30, 0x3f81],
    ['1 + 2^-8 − 2^-30 → down', 1 + 2 ** -8 - 2 ** -30, 0x3f80],
    ['2^-134 (tie) → 0', 2 ** -134, 0x0000],
    ['3·2^-134 (tie) → 2·2^-133', 3 * 2 ** -134, 0x0002],
    ['127.5·2^-133 (tie) → min normal', 127.5 * 2 ** -133, 0x0080],
    ['2^-135 underflows', 2 ** -135, 0x0000],
    ['1 + 2^-8 + 2^-40 (double) → up', 1 + 2 ** -8 + 2 ** -40, 0x3f81],
  ];
  for (const [name, x, bits] of cases) {
    it(`${name} → ${hex(bits)}`, () => expect(hex(toBF16Bits(x))).toBe(hex(bits)));
  }

  it('NaN stays NaN', () => {
    expect(isBF16NaN(toBF16Bits(NaN))).toBe(true);
    expect(Number.isNaN(fromBF16Bits(toBF16Bits(NaN)))).toBe(true);
  });

  it('double rounding through float32 would differ: the value is rounded once', () => {
    const x = 1 + 2 ** -8 + 2 ** -40;
    expect(Math.fround(x)).toBe(1 + 2 ** -8);
    expect(toBF16Bits(Math.fround(x))).toBe(0x3f80);
    expect(toBF16Bits(x)).toBe(0x3f81);
    expect(roundScalar('bf16', x)).toBe(1 + 2 ** -7);
  });
});

describe('decoding known bit patterns', () => {
  it('f16', () => {
    expect(fromF16Bits(0x0000)).toBe(0);
    expect(Object.is(fromF16Bits(0x8000), -0)).toBe(true);
    expect(fromF16Bits(0x0001)).toBe(2 ** -24);
    expect(fromF16Bits(0x03ff)).toBe(1023 * 2 ** -24);
    expect(fromF16Bits(0x0400)).toBe(2 ** -14);
    expect(fromF16Bits(0x3c00)).toBe(1);
    expect(fromF16Bits(0x3c01)).toBe(1 + 2 ** -10);
    expect(fromF16Bits(0x7bff)).toBe(65504);
    expect(fromF16Bits(0xfbff)).toBe(-65504);
    expect(fromF16Bits(0x7c00)).toBe(Infinity);
    expect(fromF16Bits(0xfc00)).toBe(-Infinity);
    expect(Number.isNaN(fromF16Bits(0x7c01))).toBe(true);
    expect(Number.isNaN(fromF16Bits(0xfe00))).toBe(true);
  });

  it('bf16', () => {
    expect(fromBF16Bits(0x3f80)).toBe(1);
    expect(Object.is(fromBF16Bits(0x8000), -0)).toBe(true);
    expect(fromBF16Bits(0x0001)).toBe(2 ** -133);
    expect(fromBF16Bits(0x0080)).toBe(2 ** -126);
    expect(fromBF16Bits(0x7f7f)).toBe((2 - 2 ** -7) * 2 ** 127);
    expect(fromBF16Bits(0xff80)).toBe(-Infinity);
    expect(Number.isNaN(fromBF16Bits(0x7fc0))).toBe(true);
    expect(Number.isNaN(fromBF16Bits(0xff81))).toBe(true);
  });
});

describe('exhaustive', () => {
  it('every f16 bit pattern decodes and re-encodes to itself (NaNs to NaN)', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const dec = decode('f16', all);
    const enc = encode('f16', dec);
    let nans = 0;
    for (let b = 0; b < 65536; b++) {
      const x = fromF16Bits(b);
      expect(Object.is(dec[b], x) || (Number.isNaN(dec[b]) && Number.isNaN(x))).toBe(true);
      if (isF16NaN(b)) {
        nans++;
        if (!Number.isNaN(x) || !isF16NaN(toF16Bits(x)) || !isF16NaN(enc[b])) throw new Error(`NaN ${hex(b)}`);
      } else if (toF16Bits(x) !== b || enc[b] !== b) {
        throw new Error(`${hex(b)} → ${x} → ${hex(toF16Bits(x))} / ${hex(enc[b])}`);
      }
    }
    expect(nans).toBe(2 * 1023);
  });

  it('every bf16 bit pattern decodes and re-encodes to itself (NaNs to NaN)', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const dec = decode('bf16', all);
    const enc = encode('bf16', dec);
    const encSlow = encode('bf16', Array.from(dec));
    let nans = 0;
    for (let b = 0; b < 65536; b++) {
      const x = fromBF16Bits(b);
      expect(Object.is(dec[b], x) || (Number.isNaN(dec[b]) && Number.isNaN(x))).toBe(true);
      if (isBF16NaN(b)) {
        nans++;
        if (!Number.isNaN(x) || !isBF16NaN(toBF16Bits(x)) || !isBF16NaN(enc[b]) || !isBF16NaN(encSlow[b])) throw new Error(`NaN ${hex(b)}`);
      } else if (toBF16Bits(x) !== b || enc[b] !== b || encSlow[b] !== b) {
        throw new Error(`${hex(b)} → ${x} → ${hex(toBF16Bits(x))} / ${hex(enc[b])} / ${hex(encSlow[b])}`);
      }
    }
    expect(nans).toBe(2 * 127);
  });

  // Between each pair of adjacent finite values a < b: the midpoint goes to the one with an even
  // last bit, and anything strictly between a and the midpoint (or the midpoint and b) to the
  // nearer one. With negative values mirrored. Covers every exponent, subnormals included.
  for (const [name, toBits, fromBits, maxFinite] of [
    ['f16', toF16Bits, fromF16Bits, 0x7bff],
    ['bf16', toBF16Bits, fromBF16Bits, 0x7f7f],
  ] as const) {
    it(`${name}: every midpoint ties to even, and values beside it go to the nearer neighbour`, () => {
      for (let lo = 0; lo <= maxFinite; lo++) {
        const a = fromBits(lo);
        const b = fromBits(lo + 1); // +Inf after maxFinite: its "midpoint" is the overflow threshold
        const mid = lo === maxFinite ? a + (a - fromBits(lo - 1)) / 2 : (a + b) / 2;
        const even = lo % 2 === 0 ? lo : lo + 1;
        const eps = (lo === 0 ? mid : mid - a) * 2 ** -20;
        const got = [toBits(mid), toBits(mid - eps), toBits(mid + eps), toBits(-mid), toBits(-(mid + eps))];
        const want = [even, lo, lo + 1, 0x8000 | even, 0x8000 | (lo + 1)];
        if (got.some((g, i) => g !== want[i])) throw new Error(`${name} ${hex(lo)}: got ${got.map(hex)} want ${want.map(hex)}`);
      }
    });
  }
});

describe('float64 → f16 / bf16: the bit-level fast path against the arithmetic rounding', () => {
  // The encoders round values of a normal exponent on their float64 bits (dtype.ts
  // encodeMagnitude); this is the arithmetic they replaced, which still takes the rest.
  function slow(x: number, mant: number, emin: number, emax: number, inf: number): number {
    const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
    const a = Math.abs(x);
    if (a === 0) return sign;
    let e = Math.floor(Math.log2(a));
    if (2 ** e > a) e--;
    else if (2 ** (e + 1) <= a) e++;
    e = Math.max(e, emin);
    const v = a / 2 ** (e - mant);
    const f = Math.floor(v);
    let r = v - f > 0.5 || (v - f === 0.5 && f % 2 === 1) ? f + 1 : f;
    if (r >= 2 ** (mant + 1)) {
      r /= 2;
      e += 1;
    }
    if (e > emax) return sign | inf;
    return sign | (r < 2 ** mant ? r : ((e - emin + 1) << mant) | (r - 2 ** mant));
  }
  const f64 = new Float64Array(1);
  const u32 = new Uint32Array(f64.buffer); // little-endian: [low word, high word]
  let seed = 12345;
  const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
  for (const [name, toBits, mant, emin, emax, inf] of [
    ['f16', toF16Bits, 10, -14, 15, 0x7c00],
    ['bf16', toBF16Bits, 7, -126, 127, 0x7f80],
  ] as const) {
    it(`${name}: 200,000 random doubles (every exponent around the format's range, random and zero low words)`, () => {
      let bad = 0;
      for (let i = 0; i < 200_000; i++) {
        const e = emin - mant - 3 + (rnd() % (emax - emin + mant + 6));
        const sign = rnd() & 1 ? 0x80000000 : 0;
        u32[1] = (sign | ((e + 1023) << 20) | (rnd() & 0xfffff)) >>> 0;
        // a zero low word half the time, so that exact ties (rem = half) come up
        u32[0] = i & 1 ? rnd() : 0;
        if (i % 4 === 2) u32[1] = (u32[1] & ~((1 << (20 - mant)) - 1)) | (1 << (19 - mant)); // exactly half an ulp of the format
        const x = f64[0];
        if (toBits(x) !== slow(x, mant, emin, emax, inf) && bad++ < 5) expect(hex(toBits(x)), `${x}`).toBe(hex(slow(x, mant, emin, emax, inf)));
      }
      expect(bad).toBe(0);
    });
  }
});

describe('encode() on Float32Array agrees with the scalar conversions', () => {
  // Random float32 bit patterns cover every exponent (subnormals, NaN payloads, ±Inf) uniformly.
  let seed = 0x9e3779b9;
  const nextU32 = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return seed >>> 0;
  };
  const n = 200_000;
  const sample = new Float32Array(n);
  const u = new Uint32Array(sample.buffer);
  for (let i = 0; i < n; i++) u[i] = nextU32();
  // plus values near f16 range, near ties, and specials
  for (let i = 0; i < 20_000; i++) sample[i] = (nextU32() / 2 ** 32 - 0.5) * 2 ** ((nextU32() % 48) - 30);
  const specials = [0, -0, Infinity, -Infinity, NaN, 65504, 65519, 65520, 65536, 2 ** -24, 2 ** -25, 3 * 2 ** -25, 2 ** -149, -(2 ** -149), 2 ** -126, 3.4028234663852886e38, -3.4028234663852886e38, 1 + 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8];
  sample.set(specials, 20_000);
  u[20_100] = 0x7f800001; // signalling NaN
  u[20_101] = 0xffc00000; // negative quiet NaN
  u[20_102] = 0x7f7fffff; // float32 max
  u[20_103] = 0x3f808000; // 1 + 2^-8: bf16 tie
  u[20_104] = 0x3f818000; // 1 + 3·2^-8: bf16 tie

  it('f16', () => {
    const enc = encode('f16', sample);
    for (let i = 0; i < n; i++) {
      const want = toF16Bits(sample[i]);
      if (enc[i] !== want && !(isF16NaN(enc[i]) && isF16NaN(want))) throw new Error(`${sample[i]}: ${hex(enc[i])} vs ${hex(want)}`);
    }
  });

  it('bf16 (the bit trick on float32 against the exact scalar rounding)', () => {
    const enc = encode('bf16', sample);
    let nans = 0;
    for (let i = 0; i < n; i++) {
      const want = toBF16Bits(sample[i]);
      if (isBF16NaN(want)) nans++;
      if (enc[i] !== want && !(isBF16NaN(enc[i]) && isBF16NaN(want))) throw new Error(`${sample[i]} (${u[i].toString(16)}): ${hex(enc[i])} vs ${hex(want)}`);
    }
    expect(nans).toBeGreaterThan(100);
  });

  it('encode writes into a given output and decode into a subarray view', () => {
    const out = new Uint16Array(4);
    expect(encode('bf16', new Float32Array([1, 2, 3, 4]), out)).toBe(out);
    expect([...out]).toEqual([0x3f80, 0x4000, 0x4040, 0x4080]);
    const big = new Float32Array(6);
    decode('bf16', out, big.subarray(1, 5));
    expect([...big]).toEqual([0, 1, 2, 3, 4, 0]);
    decode('f16', Uint16Array.from([0x3c00, 0x4000]), big.subarray(4));
    expect([...big.subarray(4)]).toEqual([1, 2]);
  });

  it('roundTo and roundScalar agree with encode/decode', () => {
    const xs = sample.subarray(0, 30_000);
    const r16 = roundTo('f16', xs);
    const rb = roundTo('bf16', xs);
    const r32 = roundTo('f32', [1 + 2 ** -30, 0.1]);
    expect([...r32]).toEqual([1, Math.fround(0.1)]);
    for (let i = 0; i < xs.length; i++) {
      const a = roundScalar('f16', xs[i]);
      const b = roundScalar('bf16', xs[i]);
      if (!(Object.is(a, r16[i]) || (Number.isNaN(a) && Number.isNaN(r16[i])))) throw new Error(`f16 ${xs[i]}`);
      if (!(Object.is(b, rb[i]) || (Number.isNaN(b) && Number.isNaN(rb[i])))) throw new Error(`bf16 ${xs[i]}`);
    }
    expect(roundScalar('f32', 0.1)).toBe(Math.fround(0.1));
  });
});

describe('float64 → f16 agrees with NumPy (direct rounding, no float32 step)', () => {
  const file = fileURLToPath(new URL('./fixtures/dtype/f16_numpy.json', import.meta.url));
  const { cases } = JSON.parse(readFileSync(file, 'utf8')) as { cases: [string, number][] };
  it(`${cases.length} values from make_dtype_fixtures.py`, () => {
    expect(cases.length).toBeGreaterThan(1500);
    let viaF32Differs = 0;
    for (const [h, bits] of cases) {
      const x = parseHexFloat(h);
      if (toF16Bits(x) !== bits) throw new Error(`${h} = ${x}: ${hex(toF16Bits(x))}, NumPy ${hex(bits)}`);
      if (toF16Bits(Math.fround(x)) !== bits) viaF32Differs++;
    }
    // the fixture includes values where rounding through float32 first would be wrong
    expect(viaF32Differs).toBeGreaterThan(100);
  });
});
