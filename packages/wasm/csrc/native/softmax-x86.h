/*
 * fa_softmax_update (softmax.h) on 512-bit registers for the x86-64-v4 native build (256-bit for
 * x86-64-v3, below): the same steps, row by row, 16 scores a step (the tail masked): the row max by maxps (skipping NaN, as
 * f32x4.pmax does), e^(s - m') by fa_vexp_le0's reduction and polynomial with the same constants
 * and the same fused multiply-adds (so each probability is bit for bit the 128-bit build's), the
 * row sum, and the rescale of the accumulator row. Once the matrix products run on 512-bit
 * registers, this is where a forward spends most of its time (KERNEL_NOTES.md, "Native build").
 */
#ifndef FA_NATIVE_SOFTMAX_X86_H
#define FA_NATIVE_SOFTMAX_X86_H

#include <immintrin.h>
#include "../vmath.h"
#include "../tileio.h"
#include "vmath-x86.h"

#if defined(__AVX512F__)

static inline void fa_softmax_update(float *s, int32_t ld, int32_t nr, int32_t ncols, float *m, float *l, float *acc, int32_t dp) {
  for (int32_t r = 0; r < nr; r++) {
    float *row = s + r * ld;
    /* maxps(x, acc) returns acc when x is NaN (pmax): a NaN score reaches l through e^(NaN - m) */
    __m512 vmax = _mm512_set1_ps(m[r]);
    for (int32_t c = 0; c < ncols; c += 16) {
      const __mmask16 k = fa_x86_mask(ncols - c);
      vmax = _mm512_mask_max_ps(vmax, k, _mm512_maskz_loadu_ps(k, row + c), vmax);
    }
    /* fold to one lane with f32x4.max, which propagates a NaN m[r] */
    const __m256 h0 = _mm512_castps512_ps256(vmax), h1 = _mm512_extractf32x8_ps(vmax, 1);
    const v128_t q0 = (v128_t)_mm256_castps256_ps128(h0), q1 = (v128_t)_mm256_extractf128_ps(h0, 1);
    const v128_t q2 = (v128_t)_mm256_castps256_ps128(h1), q3 = (v128_t)_mm256_extractf128_ps(h1, 1);
    float mnew = fa_hmax(wasm_f32x4_max(wasm_f32x4_max(q0, q1), wasm_f32x4_max(q2, q3)));
    if (fa_row_unseen(row, ncols, &mnew)) continue;
    const float alpha = m[r] == mnew ? 1.0f : fa_exp1(m[r] - mnew);
    const __m512 vm = _mm512_set1_ps(mnew);
    __m512 sum = _mm512_setzero_ps();
    int32_t c = 0;
    for (; c + 16 <= ncols; c += 16) {
      const __m512 p = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_loadu_ps(row + c), vm));
      _mm512_storeu_ps(row + c, p);
      sum = _mm512_add_ps(sum, p);
    }
    if (c < ncols) {
      const __mmask16 k = fa_x86_mask(ncols - c);
      const __m512 p = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + c), vm));
      _mm512_mask_storeu_ps(row + c, k, p);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, p));
    }
    l[r] = l[r] * alpha + _mm512_reduce_add_ps(sum);
    m[r] = mnew;
    if (alpha != 1.0f) {
      const __m512 va = _mm512_set1_ps(alpha);
      float *a = acc + r * dp;
      for (int32_t x = 0; x < dp; x += 16) {
        const __mmask16 k = fa_x86_mask(dp - x);
        _mm512_mask_storeu_ps(a + x, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a + x), va));
      }
    }
  }
}

#else /* x86-64-v3: AVX2 + FMA, 8 scores a step; column counts are multiples of 4, the last 4 on 128 bits */

static inline void fa_softmax_update(float *s, int32_t ld, int32_t nr, int32_t ncols, float *m, float *l, float *acc, int32_t dp) {
  const int32_t n8 = ncols & ~7;
  for (int32_t r = 0; r < nr; r++) {
    float *row = s + r * ld;
    /* maxps(x, acc) returns acc when x is NaN (pmax) */
    __m256 vmax = _mm256_set1_ps(m[r]);
    for (int32_t c = 0; c < n8; c += 8) vmax = _mm256_max_ps(_mm256_loadu_ps(row + c), vmax);
    v128_t v4 = wasm_f32x4_max((v128_t)_mm256_castps256_ps128(vmax), (v128_t)_mm256_extractf128_ps(vmax, 1));
    if (n8 < ncols) v4 = wasm_f32x4_max(v4, wasm_f32x4_pmax(VSPLAT(m[r]), wasm_v128_load(row + n8)));
    float mnew = fa_hmax(v4);
    if (fa_row_unseen(row, ncols, &mnew)) continue;
    const float alpha = m[r] == mnew ? 1.0f : fa_exp1(m[r] - mnew);
    const __m256 vm = _mm256_set1_ps(mnew);
    __m256 sum = _mm256_setzero_ps();
    for (int32_t c = 0; c < n8; c += 8) {
      const __m256 p = fa_vexp_le0_x8(_mm256_sub_ps(_mm256_loadu_ps(row + c), vm));
      _mm256_storeu_ps(row + c, p);
      sum = _mm256_add_ps(sum, p);
    }
    v128_t sum4 = wasm_f32x4_add((v128_t)_mm256_castps256_ps128(sum), (v128_t)_mm256_extractf128_ps(sum, 1));
    if (n8 < ncols) {
      const v128_t p = fa_vexp_le0(wasm_f32x4_sub(wasm_v128_load(row + n8), VSPLAT(mnew)));
      wasm_v128_store(row + n8, p);
      sum4 = wasm_f32x4_add(sum4, p);
    }
    l[r] = l[r] * alpha + fa_hsum(sum4);
    m[r] = mnew;
    if (alpha != 1.0f) {
      const __m256 va = _mm256_set1_ps(alpha);
      float *a = acc + r * dp;
      for (int32_t x = 0; x < dp; x += 8) _mm256_storeu_ps(a + x, _mm256_mul_ps(_mm256_loadu_ps(a + x), va));
    }
  }
}

#endif

#endif
