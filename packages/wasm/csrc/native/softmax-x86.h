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

/* The row max of rows [0, n) from m[r] and row r's scores (maxps: a NaN score is skipped, as
 * f32x4.pmax does), folded to one lane with f32x4.max, which propagates a NaN m[r]. */
FA_INLINE float fa_x16_fold_max(__m512 vmax) {
  const __m256 h0 = _mm512_castps512_ps256(vmax), h1 = _mm512_extractf32x8_ps(vmax, 1);
  const v128_t q0 = (v128_t)_mm256_castps256_ps128(h0), q1 = (v128_t)_mm256_extractf128_ps(h0, 1);
  const v128_t q2 = (v128_t)_mm256_castps256_ps128(h1), q3 = (v128_t)_mm256_extractf128_ps(h1, 1);
  return fa_hmax(wasm_f32x4_max(wasm_f32x4_max(q0, q1), wasm_f32x4_max(q2, q3)));
}

/* acc row *= alpha (dp columns). */
FA_INLINE void fa_x16_rescale(float *a, int32_t dp, float alpha) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int32_t x = 0; x < dp; x += 16) {
    const __mmask16 k = fa_x86_mask(dp - x);
    _mm512_mask_storeu_ps(a + x, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a + x), va));
  }
}

/* One row: the reference form of the update (every row takes these steps, whichever path). */
static inline void fa_softmax_row_x16(float *row, int32_t ncols, float *m, float *l, float *acc, int32_t dp) {
  __m512 vmax = _mm512_set1_ps(*m);
  for (int32_t c = 0; c < ncols; c += 16) {
    const __mmask16 k = fa_x86_mask(ncols - c);
    vmax = _mm512_mask_max_ps(vmax, k, _mm512_maskz_loadu_ps(k, row + c), vmax);
  }
  float mnew = fa_x16_fold_max(vmax);
  if (fa_row_unseen(row, ncols, &mnew)) return;
  const float alpha = *m == mnew ? 1.0f : fa_exp1(*m - mnew);
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
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  *m = mnew;
  if (alpha != 1.0f) fa_x16_rescale(acc, dp, alpha);
}

/*
 * Four rows at a time: the same operations per row (so the same bits), interleaved so that the
 * four rows' max folds, exponentials and sums overlap instead of waiting on one row's chain of
 * dependent steps (a row of 64 scores is only 4 vectors: alone, its latencies dominate). A group
 * where some row has seen nothing yet (or only NaN) takes the one-row path.
 */
static inline void fa_softmax_update(float *s, int32_t ld, int32_t nr, int32_t ncols, float *m, float *l, float *acc, int32_t dp) {
  int32_t r = 0;
  for (; r + 4 <= nr; r += 4) {
    float *row0 = s + r * ld, *row1 = row0 + ld, *row2 = row1 + ld, *row3 = row2 + ld;
    __m512 x0 = _mm512_set1_ps(m[r]), x1 = _mm512_set1_ps(m[r + 1]), x2 = _mm512_set1_ps(m[r + 2]), x3 = _mm512_set1_ps(m[r + 3]);
    for (int32_t c = 0; c < ncols; c += 16) {
      const __mmask16 k = fa_x86_mask(ncols - c);
      x0 = _mm512_mask_max_ps(x0, k, _mm512_maskz_loadu_ps(k, row0 + c), x0);
      x1 = _mm512_mask_max_ps(x1, k, _mm512_maskz_loadu_ps(k, row1 + c), x1);
      x2 = _mm512_mask_max_ps(x2, k, _mm512_maskz_loadu_ps(k, row2 + c), x2);
      x3 = _mm512_mask_max_ps(x3, k, _mm512_maskz_loadu_ps(k, row3 + c), x3);
    }
    const float n0 = fa_x16_fold_max(x0), n1 = fa_x16_fold_max(x1), n2 = fa_x16_fold_max(x2), n3 = fa_x16_fold_max(x3);
    /* the rare rows (max -inf: nothing seen, or only NaN) and NaN maxima: row by row */
    if (!(n0 > -FA_INF && n1 > -FA_INF && n2 > -FA_INF && n3 > -FA_INF)) {
      for (int32_t q = r; q < r + 4; q++) fa_softmax_row_x16(s + q * ld, ncols, m + q, l + q, acc + q * dp, dp);
      continue;
    }
    const float a0 = m[r] == n0 ? 1.0f : fa_exp1(m[r] - n0), a1 = m[r + 1] == n1 ? 1.0f : fa_exp1(m[r + 1] - n1);
    const float a2 = m[r + 2] == n2 ? 1.0f : fa_exp1(m[r + 2] - n2), a3 = m[r + 3] == n3 ? 1.0f : fa_exp1(m[r + 3] - n3);
    const __m512 v0 = _mm512_set1_ps(n0), v1 = _mm512_set1_ps(n1), v2 = _mm512_set1_ps(n2), v3 = _mm512_set1_ps(n3);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int32_t c = 0;
    for (; c + 16 <= ncols; c += 16) {
      const __m512 p0 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_loadu_ps(row0 + c), v0));
      const __m512 p1 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_loadu_ps(row1 + c), v1));
      const __m512 p2 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_loadu_ps(row2 + c), v2));
      const __m512 p3 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_loadu_ps(row3 + c), v3));
      _mm512_storeu_ps(row0 + c, p0);
      _mm512_storeu_ps(row1 + c, p1);
      _mm512_storeu_ps(row2 + c, p2);
      _mm512_storeu_ps(row3 + c, p3);
      s0 = _mm512_add_ps(s0, p0);
      s1 = _mm512_add_ps(s1, p1);
      s2 = _mm512_add_ps(s2, p2);
      s3 = _mm512_add_ps(s3, p3);
    }
    if (c < ncols) {
      const __mmask16 k = fa_x86_mask(ncols - c);
      const __m512 p0 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row0 + c), v0));
      const __m512 p1 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row1 + c), v1));
      const __m512 p2 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row2 + c), v2));
      const __m512 p3 = fa_vexp_le0_x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row3 + c), v3));
      _mm512_mask_storeu_ps(row0 + c, k, p0);
      _mm512_mask_storeu_ps(row1 + c, k, p1);
      _mm512_mask_storeu_ps(row2 + c, k, p2);
      _mm512_mask_storeu_ps(row3 + c, k, p3);
      s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(k, p0));
      s1 = _mm512_add_ps(s1, _mm512_maskz_mov_ps(k, p1));
      s2 = _mm512_add_ps(s2, _mm512_maskz_mov_ps(k, p2));
      s3 = _mm512_add_ps(s3, _mm512_maskz_mov_ps(k, p3));
    }
    l[r] = l[r] * a0 + _mm512_reduce_add_ps(s0);
    l[r + 1] = l[r + 1] * a1 + _mm512_reduce_add_ps(s1);
    l[r + 2] = l[r + 2] * a2 + _mm512_reduce_add_ps(s2);
    l[r + 3] = l[r + 3] * a3 + _mm512_reduce_add_ps(s3);
    m[r] = n0, m[r + 1] = n1, m[r + 2] = n2, m[r + 3] = n3;
    if (a0 != 1.0f) fa_x16_rescale(acc + r * dp, dp, a0);
    if (a1 != 1.0f) fa_x16_rescale(acc + (r + 1) * dp, dp, a1);
    if (a2 != 1.0f) fa_x16_rescale(acc + (r + 2) * dp, dp, a2);
    if (a3 != 1.0f) fa_x16_rescale(acc + (r + 3) * dp, dp, a3);
  }
  for (; r < nr; r++) fa_softmax_row_x16(s + r * ld, ncols, m + r, l + r, acc + r * dp, dp);
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
