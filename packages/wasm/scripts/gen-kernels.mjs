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

function microKernel(form, mr, mode) {
  const nv = NR / 4;
  const name = `f32_gemm_${form}_${mr}x${NR}_${mode}`;
  const L = [];
  L.push(`FA_INLINE void ${name}(int32_t kc, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc) {`);
  for (let i = 0; i < mr; i++) {
    for (let j = 0; j < nv; j++) {
      L.push(`  v128_t c${i}${j} = ${mode === 'acc' ? `wasm_v128_load(c + ${i} * ldc + ${4 * j})` : 'wasm_f32x4_const_splat(0.0f)'};`);
    }
  }
  L.push(`  for (int32_t k = 0; k < kc; k++) {`);
  for (let j = 0; j < nv; j++) L.push(`    const v128_t b${j} = wasm_v128_load(b + ${4 * j});`);
  for (let i = 0; i < mr; i++) {
    const at = form === 'nn' ? (i === 0 ? 'a' : `a + ${i} * lda`) : i === 0 ? 'a' : `a + ${i}`;
    L.push(`    const v128_t a${i} = wasm_v128_load32_splat(${at});`);
    for (let j = 0; j < nv; j++) L.push(`    c${i}${j} = VFMA(a${i}, b${j}, c${i}${j});`);
  }
  L.push(`    a += ${form === 'nn' ? '1' : 'lda'};`);
  L.push(`    b += ldb;`);
  L.push(`  }`);
  for (let i = 0; i < mr; i++) for (let j = 0; j < nv; j++) L.push(`  wasm_v128_store(c + ${i} * ldc + ${4 * j}, c${i}${j});`);
  L.push('}');
  return L.join('\n');
}

function macroKernel(form, mode) {
  const name = `f32_mm_${form}_${mode}`;
  const rowStep = form === 'nn' ? 'r * lda' : 'r';
  const L = [];
  L.push(`/* C[M][N] ${mode === 'acc' ? '+=' : '='} A * B with the ${form} micro-kernels; N % 8 == 0${form === 'tn' ? ', M % 4 == 0' : ''}. */`);
  L.push(`static inline void ${name}(int32_t m, int32_t n, int32_t kc, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc) {`);
  L.push(`  int32_t r = 0;`);
  L.push(`  for (; r + 4 <= m; r += 4)`);
  L.push(`    for (int32_t j = 0; j < n; j += ${NR}) f32_gemm_${form}_4x${NR}_${mode}(kc, a + ${rowStep}, lda, b + j, ldb, c + r * ldc + j, ldc);`);
  if (form === 'nn') {
    L.push(`  switch (m - r) {`);
    for (const mr of [3, 2, 1]) {
      L.push(`    case ${mr}:`);
      L.push(`      for (int32_t j = 0; j < n; j += ${NR}) f32_gemm_${form}_${mr}x${NR}_${mode}(kc, a + ${rowStep}, lda, b + j, ldb, c + r * ldc + j, ldc);`);
      L.push(`      break;`);
    }
    L.push(`    default:`);
    L.push(`      break;`);
    L.push(`  }`);
  }
  L.push('}');
  return L.join('\n');
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
  v4: { guard: 'defined(__AVX512F__)', widths: [32, 16, 8], mr: { 32: 8, 16: 8, 8: 8 } },
  v3: { guard: '1', widths: [16, 8], mr: { 16: 6, 8: 6 } },
};

function x86Vec(nr) {
  // registers of one B row: (type, floats per register, load, fma, set1)
  if (nr >= 16) return { t: '__m512', w: 16, load: '_mm512_loadu_ps', store: '_mm512_storeu_ps', fma: '_mm512_fmadd_ps', set1: '_mm512_set1_ps', zero: '_mm512_setzero_ps()' };
  return { t: '__m256', w: 8, load: '_mm256_loadu_ps', store: '_mm256_storeu_ps', fma: '_mm256_fmadd_ps', set1: '_mm256_set1_ps', zero: '_mm256_setzero_ps()' };
}

function x86MicroKernel(level, form, mr, nr, mode) {
  const v = level === 'v3' ? { ...x86Vec(8) } : x86Vec(nr);
  const nv = nr / v.w;
  const name = `f32_gemm_${form}_${mr}x${nr}_${mode}`;
  const L = [];
  L.push(`FA_INLINE void ${name}(int32_t kc, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc) {`);
  for (let i = 0; i < mr; i++) for (let j = 0; j < nv; j++) L.push(`  ${v.t} c${i}_${j} = ${mode === 'acc' ? `${v.load}(c + ${i} * ldc + ${v.w * j})` : v.zero};`);
  L.push(`  for (int32_t k = 0; k < kc; k++) {`);
  for (let j = 0; j < nv; j++) L.push(`    const ${v.t} b${j} = ${v.load}(b + ${v.w * j});`);
  for (let i = 0; i < mr; i++) {
    const at = form === 'nn' ? (i === 0 ? 'a[0]' : `a[${i} * lda]`) : `a[${i}]`;
    L.push(`    const ${v.t} a${i} = ${v.set1}(${at});`);
    for (let j = 0; j < nv; j++) L.push(`    c${i}_${j} = ${v.fma}(a${i}, b${j}, c${i}_${j});`);
  }
  L.push(`    a += ${form === 'nn' ? '1' : 'lda'};`);
  L.push(`    b += ldb;`);
  L.push(`  }`);
  for (let i = 0; i < mr; i++) for (let j = 0; j < nv; j++) L.push(`  ${v.store}(c + ${i} * ldc + ${v.w * j}, c${i}_${j});`);
  L.push('}');
  return L.join('\n');
}

function x86MacroKernel(level, form, mode) {
  const { widths, mr } = X86[level];
  const name = `f32_mm_${form}_${mode}`;
  const rowStep = form === 'nn' ? 'r * lda' : 'r';
  const L = [];
  // one row block of `rows` rows across all columns: the widest kernel first, then the rest
  const cols = (rows, ind) => {
    const out = [];
    widths.forEach((w, i) => {
      const loop = i === 0 ? `for (; j + ${w} <= n; j += ${w})` : `if (j + ${w} <= n)`;
      const step = i === 0 ? '' : ` j += ${w};`;
      out.push(`${ind}${loop} { f32_gemm_${form}_${rows}x${w}_${mode}(kc, a + ${rowStep}, lda, b + j, ldb, c + r * ldc + j, ldc);${step} }`);
    });
    return out;
  };
  // tn has M % 4 == 0: its row blocks are 8 and 4 (v4) or 4 (v3)
  const top = form === 'tn' ? Math.min(8, mr[widths[0]] - (mr[widths[0]] % 4)) : mr[widths[0]];
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
    for (const rows of rest) {
      L.push(`    case ${rows}:`);
      L.push(...cols(rows, '      '));
      L.push(`      break;`);
    }
    L.push(`    default:`);
    L.push(`      break;`);
    L.push(`  }`);
  }
  L.push('}');
  return L.join('\n');
}

function x86Level(level) {
  const { widths, mr } = X86[level];
  const top = mr[widths[0]];
  const P = [];
  for (const mode of ['set', 'acc']) for (const w of widths) for (let rows = top; rows >= 1; rows--) P.push(x86MicroKernel(level, 'nn', rows, w, mode), '');
  const tnTop = Math.min(8, top - (top % 4));
  for (const w of widths) for (const rows of [tnTop, 4].filter((x, i, a) => a.indexOf(x) === i)) P.push(x86MicroKernel(level, 'tn', rows, w, 'acc'), '');
  P.push(x86MacroKernel(level, 'nn', 'set'), '', x86MacroKernel(level, 'nn', 'acc'), '', x86MacroKernel(level, 'tn', 'acc'), '');
  return P;
}

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
for (const mode of ['set', 'acc']) for (const mr of [4, 3, 2, 1]) parts.push(microKernel('nn', mr, mode), '');
parts.push(microKernel('tn', 4, 'acc'), '');
parts.push(macroKernel('nn', 'set'), '', macroKernel('nn', 'acc'), '', macroKernel('tn', 'acc'), '');
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
