#!/usr/bin/env node
/**
 * Generates csrc/gen/f32-gemm.h: the register-blocked matrix micro-kernels of @fa/wasm, one per
 * tile shape and operand form, from the one template below (the way XNNPACK generates
 * src/f32-gemm/gen/*.c from a template per family).
 *
 *   f32_gemm_<form>_<MR>x8_<mode>(kc, a, lda, b, ldb, c, ldc)
 *     C[MR][8] (+)= A[MR][kc] * B[kc][8]
 *   form nn: A(r, k) = a[r*lda + k]  (rows of Q, dO, P, dS)
 *   form tn: A(r, k) = a[k*lda + r]  (P^T and dS^T, read from the row-major tiles)
 *   mode set: C = A*B;  acc: C += A*B
 *
 * Each k step loads one B row (two f32x4) and splats one A element per row (v128.load32_splat,
 * a broadcast load on x86 and ARM), then MR*2 multiply-adds into MR*2 accumulators that live in
 * registers for the whole k loop. 4x8 is the largest shape whose accumulators, B row and A splat
 * fit in the 15 vector registers V8 allocates on x86-64 (KERNEL_NOTES.md has the measurements);
 * 1x8..3x8 finish row counts that are not a multiple of 4.
 *
 * And the macro-kernels that tile an M x N product with them: N must be a multiple of 8 (tiles
 * are padded to it); M is any count for nn, a multiple of 4 for tn.
 *
 * Run: node scripts/gen-kernels.mjs (the build script does; the output is committed);
 * --check only compares the committed header with the template's output.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const NR = 8;

/*
 * One template for every micro-kernel, WebAssembly or x86: `vec` says how the ISA spells a
 * vector of `w` floats (type, load, store, zero, broadcast of the float at an address,
 * multiply-add). C(MR x NR) (+)= A(MR x kc) B(kc x NR): B one row of NR floats a k step (NR / w
 * registers), A broadcast one element per row, MR * NR / w accumulators.
 */
const WASM = {
  t: 'v128_t',
  w: 4,
  load: (p) => `wasm_v128_load(${p})`,
  store: (p, x) => `wasm_v128_store(${p}, ${x})`,
  zero: 'wasm_f32x4_const_splat(0.0f)',
  bcast: (p) => `wasm_v128_load32_splat(${p})`,
  fma: (a, b, c) => `VFMA(${a}, ${b}, ${c})`,
};

function microKernel(vec, form, mr, nr, mode) {
  const nv = nr / vec.w;
  const name = `f32_gemm_${form}_${mr}x${nr}_${mode}`;
  const L = [];
  L.push(`FA_INLINE void ${name}(int32_t kc, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc) {`);
  for (let i = 0; i < mr; i++) for (let j = 0; j < nv; j++) L.push(`  ${vec.t} c${i}_${j} = ${mode === 'acc' ? vec.load(`c + ${i} * ldc + ${vec.w * j}`) : vec.zero};`);
  L.push(`  for (int32_t k = 0; k < kc; k++) {`);
  for (let j = 0; j < nv; j++) L.push(`    const ${vec.t} b${j} = ${vec.load(`b + ${vec.w * j}`)};`);
  for (let i = 0; i < mr; i++) {
    const at = i === 0 ? 'a' : form === 'nn' ? `a + ${i} * lda` : `a + ${i}`;
    L.push(`    const ${vec.t} a${i} = ${vec.bcast(at)};`);
    for (let j = 0; j < nv; j++) L.push(`    c${i}_${j} = ${vec.fma(`a${i}`, `b${j}`, `c${i}_${j}`)};`);
  }
  L.push(`    a += ${form === 'nn' ? '1' : 'lda'};`);
  L.push(`    b += ldb;`);
  L.push(`  }`);
  for (let i = 0; i < mr; i++) for (let j = 0; j < nv; j++) L.push(`  ${vec.store(`c + ${i} * ldc + ${vec.w * j}`, `c${i}_${j}`)};`);
  L.push('}');
  return L.join('\n');
}

/*
 * The macro-kernel tiling an M x N product with the micro-kernels: row blocks of `rows` (tn: M is
 * a multiple of 4, so 8 and 4 or 4), the rest of nn's rows by a switch; in each row block the
 * widest kernel of `widths` first, then one each of the narrower ones (N is a multiple of 8).
 */
function macroKernel(form, mode, widths, rows) {
  const name = `f32_mm_${form}_${mode}`;
  const rowStep = form === 'nn' ? 'r * lda' : 'r';
  const L = [];
  const cols = (mr, ind) =>
    widths.map((w, i) => {
      const call = `f32_gemm_${form}_${mr}x${w}_${mode}(kc, a + ${rowStep}, lda, b + j, ldb, c + r * ldc + j, ldc);`;
      return i === 0 ? `${ind}for (; j + ${w} <= n; j += ${w}) { ${call} }` : `${ind}if (j + ${w} <= n) { ${call} j += ${w}; }`;
    });
  const top = form === 'tn' ? Math.min(8, rows - (rows % 4)) : rows;
  L.push(`/* C[M][N] ${mode === 'acc' ? '+=' : '='} A * B with the ${form} micro-kernels; N % 8 == 0${form === 'tn' ? ', M % 4 == 0' : ''}. */`);
  L.push(`static inline void ${name}(int32_t m, int32_t n, int32_t kc, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc) {`);
  L.push(`  int32_t r = 0;`);
  L.push(`  for (; r + ${top} <= m; r += ${top}) {`);
  L.push(`    int32_t j = 0;`);
  L.push(...cols(top, '    '));
  L.push(`  }`);
  const rest = form === 'nn' ? Array.from({ length: top - 1 }, (_, i) => top - 1 - i) : [4].filter((x) => x < top);
  if (rest.length) {
    L.push(`  int32_t j = 0;`);
    L.push(`  switch (m - r) {`);
    for (const mr of rest) {
      L.push(`    case ${mr}:`);
      L.push(...cols(mr, '      '));
      L.push(`      break;`);
    }
    L.push(`    default:`);
    L.push(`      break;`);
    L.push(`  }`);
  }
  L.push('}');
  return L.join('\n');
}

/** Every micro-kernel of one ISA (nn: every row count up to `rows`; tn: its row blocks), then the three macro-kernels. */
function kernelsFor(vecOf, widths, rows) {
  const P = [];
  for (const mode of ['set', 'acc']) for (const w of widths) for (let mr = rows; mr >= 1; mr--) P.push(microKernel(vecOf(w), 'nn', mr, w, mode), '');
  const tnTop = Math.min(8, rows - (rows % 4));
  for (const w of widths) for (const mr of [...new Set([tnTop, 4])]) P.push(microKernel(vecOf(w), 'tn', mr, w, 'acc'), '');
  P.push(macroKernel('nn', 'set', widths, rows), '', macroKernel('nn', 'acc', widths, rows), '', macroKernel('tn', 'acc', widths, rows), '');
  return P;
}

/*
 * The native x86-64 build's micro-kernels (csrc/gen/f32-gemm-x86.h, build-native.sh): the same
 * C(MR x NR) (+)= A(MR x kc) B(kc x NR) with B one row of NR floats a k step and A broadcast,
 * on the CPU's wide registers: 512-bit (x86-64-v4: 32 registers) or 256-bit (x86-64-v3: 16).
 * NR is 2, 1 or half a register's floats (columns come in multiples of 8); MR is as many rows
 * as fit the register file with the B row and one broadcast: v4 8 x 32 (16 accumulators), v3
 * 6 x 16 (12).
 */
const X86 = {
  v4: { widths: [32, 16, 8], rows: 8 },
  v3: { widths: [16, 8], rows: 6 },
};

/** The x86 vector a B row of `nr` floats is loaded into: zmm for 16 and 32 on x86-64-v4, ymm otherwise. */
function x86Vec(level, nr) {
  const [t, p] = level === 'v4' && nr >= 16 ? ['__m512', '_mm512'] : ['__m256', '_mm256'];
  return {
    t,
    w: t === '__m512' ? 16 : 8,
    load: (q) => `${p}_loadu_ps(${q})`,
    store: (q, x) => `${p}_storeu_ps(${q}, ${x})`,
    zero: `${p}_setzero_ps()`,
    bcast: (q) => `${p}_set1_ps(${q === 'a' ? '*a' : `*(${q})`})`,
    fma: (a, b, c) => `${p}_fmadd_ps(${a}, ${b}, ${c})`,
  };
}

const x86Level = (level) => kernelsFor((w) => x86Vec(level, w), X86[level].widths, X86[level].rows);

const x86Parts = [
  '/* Generated by scripts/gen-kernels.mjs from its x86 template: do not edit. The native build',
  ' * (build-native.sh) includes it through csrc/gemm.h; the WebAssembly binaries use f32-gemm.h. */',
  '#ifndef FA_GEN_F32_GEMM_X86_H',
  '#define FA_GEN_F32_GEMM_X86_H',
  '',
  '#include <immintrin.h>',
  '#include "../fa.h"',
  '',
  '#if defined(__AVX512F__)',
  '',
  ...x86Level('v4'),
  '#elif defined(__AVX2__) && defined(__FMA__)',
  '',
  ...x86Level('v3'),
  '#else',
  '#error "the native build needs x86-64-v3 (AVX2, FMA) or x86-64-v4 (AVX-512)"',
  '#endif',
  '',
  '#endif',
  '',
];

const parts = [
  '/* Generated by scripts/gen-kernels.mjs from its one template: do not edit. */',
  '#ifndef FA_GEN_F32_GEMM_H',
  '#define FA_GEN_F32_GEMM_H',
  '',
  '#include "../vmath.h"',
  '',
];
parts.push(...kernelsFor(() => WASM, [NR], 4));
parts.push('#endif', '');

for (const [file, lines] of [['f32-gemm.h', parts], ['f32-gemm-x86.h', x86Parts]]) {
  const out = fileURLToPath(new URL(`../csrc/gen/${file}`, import.meta.url));
  const text = lines.join('\n');
  if (process.argv.includes('--check')) {
    // test/build.test.ts: the committed header is what the template generates
    const have = existsSync(out) ? readFileSync(out, 'utf8') : '';
    if (have !== text) {
      console.error(`gen-kernels: ${out} is not what the template generates: run node scripts/gen-kernels.mjs`);
      process.exit(1);
    }
    console.log(`gen-kernels: ${out} is up to date`);
  } else {
    writeFileSync(out, text);
    console.log(`gen-kernels: wrote ${out}`);
  }
}
