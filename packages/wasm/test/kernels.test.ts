/**
 * The kernels on their own, as XNNPACK tests its micro-kernels: every generated shape and
 * operand form against a plain float64 loop over edge shapes (row counts that are not a multiple
 * of 4, k = 1, strides wider than the tile), with a tolerance that grows with k; the vector exp
 * and tanh against Math.exp / Math.tanh over their whole range; and the fa_problem layout the
 * TypeScript side writes. Each test runs on the SIMD128 binary, the relaxed-SIMD one when this
 * Node can enable it, and the native addons this CPU runs (x86-64-v4 and v3 on an AVX-512 CPU:
 * their own generated micro-kernels, the other kernels compiled from the same source).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { decode, encode } from '@fa/core';
import { addonUrl, binaryUrl, enableRelaxedSimd, nativeTarget } from '../dist/index.js';
import { loadAddon } from '../dist/native.js';
import { PROBLEM_BYTES } from '../dist/params.js';

interface TestExports {
  fa_problem_bytes(): number;
  fa_encode16(ptr: number, n: number, bf16: number): void;
  fa_test_mm(form: number, m: number, n: number, k: number, a: number, lda: number, b: number, ldb: number, c: number, ldc: number): void;
  fa_test_vmath(fn: number, x: number, y: number, n: number): void;
  fa_test_widen(dt: number, src: number, dst: number, n: number): void;
}

const U32 = 2 ** -24;
const relaxed = await enableRelaxedSimd();
const native = await nativeTarget();
const nativeLevels = native.level === 'x86-64-v4' ? ['x86-64-v4', 'x86-64-v3'] : native.level ? [native.level] : [];
const binaries = ['fa-simd128-st.wasm', ...(relaxed ? ['fa-relaxed-st.wasm'] : []), ...nativeLevels.map((l) => `native ${l}`)];

async function load(name: string): Promise<{ ex: TestExports; mem: WebAssembly.Memory }> {
  if (name.startsWith('native ')) {
    // the addon works on a shared memory, as in the engine
    const mem = new WebAssembly.Memory({ initial: 256, maximum: 256, shared: true });
    const addon = await loadAddon(addonUrl(name.slice(7) as 'x86-64-v4' | 'x86-64-v3'));
    return { ex: addon.bind(new Uint8Array(mem.buffer)) as unknown as TestExports, mem };
  }
  const mem = new WebAssembly.Memory({ initial: 256 }); // 16 MiB; the module's stack is below 1 MiB
  const inst = await WebAssembly.instantiate(readFileSync(binaryUrl(name)), { env: { memory: mem } });
  return { ex: inst.instance.exports as unknown as TestExports, mem };
}

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32 - 0.5;
  };
}

const FORMS = [
  { form: 0, name: 'nn set', trans: false, acc: false },
  { form: 1, name: 'nn acc', trans: false, acc: true },
  { form: 2, name: 'tn acc', trans: true, acc: true },
];

for (const name of binaries) {
  describe(`kernels in ${name}`, async () => {
    const { ex, mem } = await load(name);
    const A = 1 << 20, B = 2 << 20, C = 3 << 20, X = 4 << 20, Y = 8 << 20;

    it('fa_problem has the layout src/params.ts writes', () => {
      expect(ex.fa_problem_bytes()).toBe(PROBLEM_BYTES);
    });

    for (const f of FORMS) {
      it(`f32 gemm ${f.name}: every row remainder, k from 1, strided operands, against float64`, () => {
        const r = rng(7 + f.form);
        const ms = f.trans ? [4, 8, 12, 20, 64] : [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 17, 64];
        let cases = 0;
        for (const m of ms) {
          for (const n of [8, 16, 24, 32, 40, 56, 64, 72]) {
            for (const k of [1, 2, 3, 8, 17, 64, 129]) {
              const lda = (f.trans ? m : k) + 3;
              const ldb = n + 5;
              const ldc = n + 4;
              const fill = (at: number, len: number) => {
                const v = new Float32Array(mem.buffer, at, len);
                for (let i = 0; i < len; i++) v[i] = r();
                return v;
              };
              const a = fill(A, (f.trans ? k : m) * lda);
              const b = fill(B, k * ldb);
              const c = fill(C, m * ldc);
              const c0 = Float64Array.from(c);
              ex.fa_test_mm(f.form, m, n, k, A, lda, B, ldb, C, ldc);
              for (let i = 0; i < m; i++) {
                for (let j = 0; j < n; j++) {
                  let want = f.acc ? c0[i * ldc + j] : 0;
                  let mag = Math.abs(want);
                  for (let x = 0; x < k; x++) {
                    const av = f.trans ? a[x * lda + i] : a[i * lda + x];
                    want += av * b[x * ldb + j];
                    mag += Math.abs(av * b[x * ldb + j]);
                  }
                  const err = Math.abs(c[i * ldc + j] - want);
                  if (!(err <= 2 * (k + 1) * U32 * mag)) expect.fail(`m=${m} n=${n} k=${k} at (${i}, ${j}): got ${c[i * ldc + j]}, want ${want} (err ${err}, bound ${2 * (k + 1) * U32 * mag})`);
                }
                // columns past n are not touched
                for (let j = n; j < ldc; j++) expect(c[i * ldc + j]).toBe(Math.fround(c0[i * ldc + j]));
              }
              cases++;
            }
          }
        }
        expect(cases).toBeGreaterThan(100);
      });
    }

    const vmath = (fn: number, xs: Float32Array): Float32Array => {
      new Float32Array(mem.buffer, X, xs.length).set(xs);
      ex.fa_test_vmath(fn, X, Y, xs.length);
      return new Float32Array(mem.buffer, Y, xs.length).slice();
    };
    const grid = (lo: number, hi: number, n: number) => Float32Array.from({ length: n }, (_, i) => lo + ((hi - lo) * i) / (n - 1));
    const maxRel = (xs: Float32Array, ys: Float32Array, f: (x: number) => number, skip: (x: number) => boolean = () => false) => {
      let worst = 0;
      for (let i = 0; i < xs.length; i++) {
        if (skip(xs[i])) continue;
        const want = f(xs[i]);
        if (want === 0) continue;
        worst = Math.max(worst, Math.abs(ys[i] - want) / Math.abs(want));
      }
      return worst;
    };

    it('exp: within 3 ulp on [-87.3, 88], 0 below, e^88 above; -inf gives 0, NaN stays NaN', () => {
      const xs = grid(-87.3, 88, 400_000);
      expect(maxRel(xs, vmath(0, xs), Math.exp)).toBeLessThan(3 * 2 * U32);
      const edge = Float32Array.from([-Infinity, -1000, -87.5, 0, 89, 1000, Infinity, NaN]);
      const y = vmath(0, edge);
      expect([...y.slice(0, 3)]).toEqual([0, 0, 0]);
      expect(y[3]).toBe(1);
      expect(y[4]).toBe(y[5]);
      expect(y[5]).toBe(y[6]);
      expect(Math.abs(y[4] - Math.exp(88)) / Math.exp(88)).toBeLessThan(3 * 2 * U32);
      expect(Number.isNaN(y[7])).toBe(true);
    });

    it('exp for x <= 0 (the online softmax): within 3 ulp on [-87.3, 0]', () => {
      const xs = grid(-87.3, 0, 400_000);
      expect(maxRel(xs, vmath(1, xs), Math.exp)).toBeLessThan(3 * 2 * U32);
      const y = vmath(1, Float32Array.from([-Infinity, NaN, 0, -0]));
      expect(y[0]).toBe(0);
      expect(Number.isNaN(y[1])).toBe(true);
      expect(y[2]).toBe(1);
      expect(y[3]).toBe(1);
    });

    for (const dtype of ['f16', 'bf16'] as const) {
      it(`float32 -> ${dtype} in place rounds exactly as core's encode (ties to even, subnormals, overflow, NaN)`, () => {
        const r = rng(dtype === 'f16' ? 11 : 12);
        const xs: number[] = [0, -0, Infinity, -Infinity, NaN, 65504, 65519.99, 65520, 65536, -65520, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 2 ** -14, 2 ** -15, 1e-45, 3.4e38, -3.4e38];
        if (dtype === 'bf16') {
          // for every bf16 pattern: the midpoint to the next one (a tie) and a hair either side
          const u = new Uint32Array(1);
          const f = new Float32Array(u.buffer);
          for (let b = 0; b < 0x10000; b++) {
            for (const low of [0x8000, 0x8001, 0x7fff]) {
              u[0] = ((b << 16) | low) >>> 0;
              xs.push(f[0]);
            }
          }
        } else {
          // every f16 binade from below the subnormals to past the largest: values and ties
          for (let e = -26; e <= 16; e++) for (let m = 0; m < 2048; m++) xs.push((1 + m / 2048) * 2 ** e, -(1 + (m + 0.5) / 1024) * 2 ** e);
        }
        for (let i = 0; i < 200_000; i++) xs.push(r() * 2 ** Math.floor(r() * 80 - 40));
        const n = xs.length;
        const src = Float32Array.from(xs);
        const want = encode(dtype, src);
        new Float32Array(mem.buffer, X, n).set(src);
        ex.fa_encode16(X, n, dtype === 'bf16' ? 1 : 0);
        const got = new Uint16Array(mem.buffer, X, n);
        for (let i = 0; i < n; i++) if (got[i] !== want[i]) expect.fail(`${dtype}(${src[i]}): got 0x${got[i].toString(16)}, core's encode gives 0x${want[i].toString(16)}`);
        expect(n).toBeGreaterThan(100_000);
      });
    }

    for (const [dtype, code, how] of [['f16', 1, 'P·V'], ['bf16', 2, 'P·V'], ['f16', 9, 'q·k'], ['bf16', 10, 'q·k']] as const) {
      it(`the KV-cache ${how} products' ${dtype} widening (in registers) equals core's decode on every bit pattern`, () => {
        const n = 0x10000;
        const bits = Uint16Array.from({ length: n }, (_, i) => i);
        new Uint16Array(mem.buffer, X, n).set(bits);
        ex.fa_test_widen(code, X, Y, n);
        const got = new Float32Array(mem.buffer, Y, n);
        const gotBits = new Uint32Array(mem.buffer, Y, n);
        const want = decode(dtype, bits);
        const wantBits = new Uint32Array(want.buffer);
        for (let i = 0; i < n; i++) {
          // NaN payloads are not part of core's contract: NaN must stay NaN (with its sign)
          const ok = Number.isNaN(want[i]) ? Number.isNaN(got[i]) && gotBits[i] >>> 31 === i >>> 15 : gotBits[i] === wantBits[i];
          if (!ok) expect.fail(`${dtype} 0x${i.toString(16)}: got ${got[i]} (0x${gotBits[i].toString(16)}), core's decode gives ${want[i]}`);
        }
      });
    }

    for (const [code, how] of [[3, 'P·V'], [11, 'q·k']] as const) {
      it(`the KV-cache ${how} products' f16 widening for tiles without infinities or NaNs equals core's decode on every finite pattern`, () => {
        const n = 0x10000;
        const bits = Uint16Array.from({ length: n }, (_, i) => i);
        new Uint16Array(mem.buffer, X, n).set(bits);
        ex.fa_test_widen(code, X, Y, n); // FA_F16F (widen.h); + 8: kv_load4
        const gotBits = new Uint32Array(mem.buffer, Y, n);
        const wantBits = new Uint32Array(decode('f16', bits).buffer);
        let finite = 0;
        for (let i = 0; i < n; i++) {
          if ((i & 0x7c00) === 0x7c00) continue; // the kernel never takes this path for exponent 31
          finite++;
          if (gotBits[i] !== wantBits[i]) expect.fail(`f16 0x${i.toString(16)}: got 0x${gotBits[i].toString(16)}, core's decode gives 0x${wantBits[i].toString(16)}`);
        }
        expect(finite).toBe(63488);
      });
    }

    it('tanh: within 4 ulp on [-20, 20], odd, exactly ±1 far out, NaN stays NaN', () => {
      const xs = grid(-20, 20, 400_001);
      expect(maxRel(xs, vmath(2, xs), Math.tanh)).toBeLessThan(4 * 2 * U32);
      const tiny = grid(-1e-3, 1e-3, 4001);
      expect(maxRel(tiny, vmath(2, tiny), Math.tanh)).toBeLessThan(4 * 2 * U32);
      const y = vmath(2, Float32Array.from([0, 50, -50, NaN]));
      expect(y[0]).toBe(0);
      expect(y[1]).toBe(1);
      expect(y[2]).toBe(-1);
      expect(Number.isNaN(y[3])).toBe(true);
    });
  });
}
