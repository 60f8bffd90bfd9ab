import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { FAError, fromF16Bits, npyToTensor, parseNpy, serializeNpy, tensorToNpy, toBF16Bits, toF16Bits, type FAErrorCode } from '../dist/index.js';

// Fixtures written by NumPy 2.4 with test/fixtures/make_npy_fixtures.py.
const fixture = (name: string): Uint8Array => new Uint8Array(readFileSync(fileURLToPath(new URL(`./fixtures/npy/${name}`, import.meta.url))));
const ascii = (b: Uint8Array): string => String.fromCharCode(...b);

function codeOf(fn: () => unknown): { code: FAErrorCode; message: string } {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(FAError);
    return { code: (e as FAError).code, message: (e as FAError).message };
  }
  throw new Error('expected an FAError');
}

describe('parseNpy on NumPy-written files', () => {
  it('reads the header of f4_2x3.npy byte for byte as NumPy wrote it', () => {
    const b = fixture('f4_2x3.npy');
    // magic \x93NUMPY, version 1.0, header length 118 (uint16 LE) → data at 10 + 118 = 128
    expect([...b.subarray(0, 6)]).toEqual([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);
    expect([b[6], b[7]]).toEqual([1, 0]);
    expect(b[8] | (b[9] << 8)).toBe(118);
    const text = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    // NumPy adds 21 - len('2') = 20 spaces of growth room, then pads to 64 bytes, then '\n'
    expect(ascii(b.subarray(10, 10 + text.length))).toBe(text);
    expect(ascii(b.subarray(10 + text.length, 127))).toBe(' '.repeat(127 - 10 - text.length));
    expect(b[127]).toBe(0x0a);
    expect(b.length).toBe(128 + 6 * 4);
    const a = parseNpy(b);
    expect(a.dtype).toBe('float32');
    expect(a.shape).toEqual([2, 3]);
    expect(a.data).toBeInstanceOf(Float32Array);
    // np.arange(6).reshape(2, 3) * 0.5 - 1
    expect([...a.data]).toEqual([-1, -0.5, 0, 0.5, 1, 1.5]);
  });

  it('reads vectors, scalars, empty arrays and 4-d arrays', () => {
    const v = parseNpy(fixture('f4_vec5.npy'));
    expect(v.shape).toEqual([5]);
    expect([...v.data]).toEqual([1, -2.5, 3.25, Infinity, -0]);
    expect(Object.is(v.data[4], -0)).toBe(true);

    const s = parseNpy(fixture('f4_scalar.npy'));
    expect(s.shape).toEqual([]);
    expect([...s.data]).toEqual([3.5]);

    const e = parseNpy(fixture('f4_empty_0x3.npy'));
    expect(e.shape).toEqual([0, 3]);
    expect(e.data.length).toBe(0);

    const big = parseNpy(fixture('f4_2x3x4x5.npy'));
    expect(big.shape).toEqual([2, 3, 4, 5]);
    for (let i = 0; i < 120; i++) expect(big.data[i]).toBe(Math.fround(i / 7));

    const long = parseNpy(fixture('f4_long_1234567x0.npy'));
    expect(long.shape).toEqual([1234567, 0]);
  });

  it('reads float16 as raw bits and int32 as Int32Array', () => {
    const h = parseNpy(fixture('f2_vec5.npy'));
    expect(h.dtype).toBe('float16');
    expect(h.data).toBeInstanceOf(Uint16Array);
    // 1 = 0x3c00, -2 = 0xc000, 65504 = 0x7bff, 6e-8 → 0x0001 (the min subnormal 2^-24), NaN = 0x7e00
    expect([...h.data]).toEqual([0x3c00, 0xc000, 0x7bff, 0x0001, 0x7e00]);
    expect(fromF16Bits(h.data[3])).toBe(2 ** -24);

    const cu = parseNpy(fixture('i4_cu.npy'));
    expect(cu.dtype).toBe('int32');
    expect(cu.data).toBeInstanceOf(Int32Array);
    expect([...cu.data]).toEqual([0, 3, 3, 10]);

    const si = parseNpy(fixture('i4_scalar.npy'));
    expect(si.shape).toEqual([]);
    expect([...si.data]).toEqual([-7]);
  });

  it('reads versions 2.0 and 3.0', () => {
    for (const [name, major] of [['f4_2x3_v2.npy', 2], ['f4_2x3_v3.npy', 3]] as const) {
      const b = fixture(name);
      expect(b[6]).toBe(major);
      // 4-byte header length: 12 + len = 64-byte boundary
      const hlen = b[8] | (b[9] << 8) | (b[10] << 16) | (b[11] << 24);
      expect((12 + hlen) % 64).toBe(0);
      const a = parseNpy(b);
      expect(a.shape).toEqual([2, 3]);
      expect([...a.data]).toEqual([0, 1, 2, 3, 4, 5]);
    }
  });

  it('accepts a Fortran-order header when the layout equals C order (a vector)', () => {
    const a = parseNpy(fixture('f4_vec3_fortran_header.npy'));
    expect([...a.data]).toEqual([1, 2, 3]);
  });

  it('accepts an ArrayBuffer, a Node Buffer and a misaligned view', () => {
    const b = fixture('f4_2x3.npy');
    expect([...parseNpy(b.slice().buffer).data]).toEqual([-1, -0.5, 0, 0.5, 1, 1.5]);
    expect([...parseNpy(readFileSync(fileURLToPath(new URL('./fixtures/npy/f4_2x3.npy', import.meta.url)))).data]).toEqual([-1, -0.5, 0, 0.5, 1, 1.5]);
    const shifted = new Uint8Array(b.length + 1);
    shifted.set(b, 1);
    expect([...parseNpy(shifted.subarray(1)).data]).toEqual([-1, -0.5, 0, 0.5, 1, 1.5]);
  });
});

describe('serializeNpy', () => {
  it('writes exactly the bytes NumPy writes (version 1.0 files)', () => {
    for (const name of ['f4_2x3.npy', 'f4_vec5.npy', 'f4_scalar.npy', 'f4_empty_0x3.npy', 'f4_2x3x4x5.npy', 'f2_vec5.npy', 'i4_cu.npy', 'i4_scalar.npy', 'f4_long_1234567x0.npy']) {
      const b = fixture(name);
      const out = serializeNpy(parseNpy(b));
      expect(ascii(out.subarray(0, 128)), name).toBe(ascii(b.subarray(0, 128)));
      expect(Buffer.from(out).equals(Buffer.from(b)), name).toBe(true);
    }
  });

  it('starts the data on a 64-byte boundary with a newline-terminated header', () => {
    for (const shape of [[], [0], [7], [3, 4], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [123456789012, 0]]) {
      const n = shape.reduce((a, b) => a * b, 1);
      const out = serializeNpy({ data: new Float32Array(n), shape });
      const hlen = out[8] | (out[9] << 8);
      expect(out[6]).toBe(1);
      expect((10 + hlen) % 64).toBe(0);
      expect(out[10 + hlen - 1]).toBe(0x0a);
      expect(out.length).toBe(10 + hlen + 4 * n);
      expect(parseNpy(out).shape).toEqual(shape);
    }
  });

  it('round-trips random float32, float16 and int32 data bit for bit (incl. NaN, ±Inf, -0)', () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const f = new Float32Array(1000).map(() => (rnd() - 0.5) * 10 ** (rnd() * 20 - 10));
    f.set([NaN, Infinity, -Infinity, -0, 0, 2 ** -149, 3.4028234663852886e38], 0);
    const back = parseNpy(serializeNpy({ data: f, shape: [10, 100] }));
    expect(back.dtype).toBe('float32');
    expect(back.shape).toEqual([10, 100]);
    expect(Buffer.from((back.data as Float32Array).buffer).equals(Buffer.from(f.buffer))).toBe(true);

    const h = new Uint16Array(65536).map((_, i) => i);
    const hb = parseNpy(serializeNpy({ data: h, shape: [256, 256], dtype: 'float16' }));
    expect(hb.dtype).toBe('float16');
    expect([...hb.data]).toEqual([...h]);

    const iv = Int32Array.from([0, -1, 2 ** 31 - 1, -(2 ** 31), 42]);
    const ib = parseNpy(serializeNpy({ data: iv, shape: [5] }));
    expect(ib.dtype).toBe('int32');
    expect([...ib.data]).toEqual([...iv]);
  });

  it('writes a view of a larger buffer correctly', () => {
    const base = new Float32Array([9, 1, 2, 3, 9]);
    const a = parseNpy(serializeNpy({ data: base.subarray(1, 4), shape: [3] }));
    expect([...a.data]).toEqual([1, 2, 3]);
  });

  it('rejects mismatched shapes and data types', () => {
    expect(codeOf(() => serializeNpy({ data: new Float32Array(5), shape: [2, 3] })).code).toBe('E_SHAPE');
    expect(codeOf(() => serializeNpy({ data: new Float32Array(6), shape: [2, -3] })).code).toBe('E_SHAPE');
    expect(codeOf(() => serializeNpy({ data: new Float64Array(6) as unknown as Float32Array, shape: [6] })).code).toBe('E_DTYPE');
    expect(codeOf(() => serializeNpy({ data: new Float32Array(6), shape: [6], dtype: 'int32' })).code).toBe('E_DTYPE');
  });
});

describe('parseNpy errors', () => {
  const cases: [string, () => Uint8Array, FAErrorCode, RegExp][] = [
    ['float64', () => fixture('f8_2x2.npy'), 'E_DTYPE', /float64.*astype\(np\.float32\)/],
    ['Fortran order', () => fixture('f4_fortran_2x3.npy'), 'E_IO', /Fortran.*np\.ascontiguousarray/],
    ['big-endian', () => fixture('f4_bigendian.npy'), 'E_DTYPE', /big-endian/],
    ['int64', () => fixture('i8_cu.npy'), 'E_DTYPE', /int64|<i8.*np\.int32/],
    ['bool', () => fixture('bool_3.npy'), 'E_DTYPE', /\|b1.*not supported/],
    ['uint8', () => fixture('u1_3.npy'), 'E_DTYPE', /\|u1.*not supported/],
    ['complex64', () => fixture('c8_2.npy'), 'E_DTYPE', /<c8.*not supported/],
    ['structured dtype', () => fixture('structured.npy'), 'E_DTYPE', /structured/],
    ['bad magic', () => new TextEncoder().encode('hello, this is not numpy at all'), 'E_IO', /not a \.npy file/],
    ['empty file', () => new Uint8Array(0), 'E_IO', /not a \.npy file/],
    ['magic only', () => fixture('f4_2x3.npy').slice(0, 8), 'E_IO', /truncated/],
    ['truncated header', () => fixture('f4_2x3.npy').slice(0, 60), 'E_IO', /truncated/],
    ['truncated data', () => fixture('f4_2x3.npy').slice(0, 128 + 23), 'E_IO', /truncated.*needs 24 data bytes, the file has 23/],
    ['unknown version', () => withByte(fixture('f4_2x3.npy'), 6, 4), 'E_IO', /version 4\.0/],
    ['header not a dict', () => npyWithHeader("[1, 2, 3]"), 'E_IO', /not a dict/],
    ['header not a literal', () => npyWithHeader("{'descr': <f4}"), 'E_IO', /not a Python dict literal/],
    ['missing shape', () => npyWithHeader("{'descr': '<f4', 'fortran_order': False}"), 'E_IO', /'descr', 'fortran_order' and 'shape'/],
    ['extra key', () => npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"), 'E_IO', /exactly the keys/],
    ['shape not a tuple', () => npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': 3}"), 'E_IO', /not a tuple/],
    ['negative extent', () => npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"), 'E_IO', /non-negative/],
    ['fortran_order not a bool', () => npyWithHeader("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}"), 'E_IO', /True or False/],
  ];
  for (const [name, bytes, code, re] of cases) {
    it(`${name} → ${code}`, () => {
      const e = codeOf(() => parseNpy(bytes(), 'X.npy'));
      expect(e.code).toBe(code);
      expect(e.message).toMatch(/^X\.npy: /);
      expect(e.message).toMatch(re);
    });
  }

  it('rejects a non-bytes argument with E_ARG', () => {
    expect(codeOf(() => parseNpy('abc' as unknown as Uint8Array)).code).toBe('E_ARG');
  });

  it('parses header variants NumPy and Python 2 wrote: 1-tuples, "L" suffixes, double quotes, no trailing comma', () => {
    const mk = (h: string, n: number) => {
      const b = npyWithHeader(h);
      const full = new Uint8Array(b.length + 4 * n);
      full.set(b);
      return parseNpy(full);
    };
    expect(mk("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", 5).shape).toEqual([5]);
    expect(mk("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L)}", 6).shape).toEqual([2, 3]);
    expect(mk('{"descr": "<f4", "fortran_order": False, "shape": ()}', 1).shape).toEqual([]);
    expect(mk("{'shape': (1, 1), 'fortran_order': True, 'descr': '<i4'}", 1).dtype).toBe('int32');
  });
});

describe('npyToTensor / tensorToNpy', () => {
  it('rounds float32 to f16 and bf16 and widens back exactly', () => {
    const f = new Float32Array([1, 1 + 2 ** -11, 1 + 2 ** -8 + 2 ** -20, -3.3, 65520]);
    const a = { dtype: 'float32' as const, shape: [5], data: f };
    const t32 = npyToTensor(a);
    expect(t32.dtype).toBe('f32');
    expect(t32.data).toBe(f);
    const t16 = npyToTensor(a, 'f16');
    expect([...t16.data]).toEqual([...f].map(toF16Bits));
    const tb = npyToTensor(a, 'bf16');
    expect([...tb.data]).toEqual([...f].map(toBF16Bits));
    // bf16 has no .npy dtype: it is widened to float32
    const back = tensorToNpy(tb);
    expect(back.dtype).toBe('float32');
    expect(back.data[0]).toBe(1);
    const back16 = tensorToNpy(t16);
    expect(back16.dtype).toBe('float16');
    expect(tensorToNpy(t16, true).dtype).toBe('float32');
  });

  it('reads a float16 file into any dtype', () => {
    const h = parseNpy(fixture('f2_vec5.npy'));
    expect([...npyToTensor(h, 'f16').data]).toEqual([0x3c00, 0xc000, 0x7bff, 0x0001, 0x7e00]);
    const f = npyToTensor(h, 'f32').data as Float32Array;
    expect([...f.subarray(0, 4)]).toEqual([1, -2, 65504, 2 ** -24]);
    expect(Number.isNaN(f[4])).toBe(true);
    // 65504 → bf16: 65504 = 0xffe0 → between 65280 and 65536; ties/nearest → 65536 (0x4780)
    expect(npyToTensor(h, 'bf16').data[2]).toBe(0x4780);
  });

  it('rejects int32 arrays', () => {
    expect(codeOf(() => npyToTensor(parseNpy(fixture('i4_cu.npy')))).code).toBe('E_DTYPE');
  });
});

function withByte(b: Uint8Array, at: number, v: number): Uint8Array {
  const c = b.slice();
  c[at] = v;
  return c;
}

/** A version 1.0 file with the given header text (padded like NumPy) and no data. */
function npyWithHeader(h: string): Uint8Array {
  let hlen = h.length + 1;
  hlen += 64 - ((10 + hlen) % 64);
  const out = new Uint8Array(10 + hlen).fill(0x20);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, hlen & 0xff, hlen >> 8]);
  for (let i = 0; i < h.length; i++) out[10 + i] = h.charCodeAt(i);
  out[10 + hlen - 1] = 0x0a;
  return out;
}
