/*
 * Vector math on the native build's wide registers: fa_vexp_le0 (vmath.h) on 16 lanes (AVX-512)
 * or 8 (AVX2) with the same constants and fused steps, so each value is bit for bit the 128-bit
 * build's; and the lane mask of a row's last partial step. softmax-x86.h and backward-x86.h use it.
 */
#ifndef FA_NATIVE_VMATH_X86_H
#define FA_NATIVE_VMATH_X86_H

#include <immintrin.h>
#include "../fa.h"

#if defined(__AVX512F__)

FA_INLINE __mmask16 fa_x86_mask(int32_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* fa_vexp_le0 on 16 lanes. */
FA_INLINE __m512 fa_vexp_le0_x16(__m512 x) {
  const __m512 magic = _mm512_set1_ps(0x1.8000FEp23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), magic);
  const __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(z), 23));
  const __m512 n = _mm512_sub_ps(z, magic);
  __m512 t = _mm512_fmadd_ps(n, _mm512_set1_ps(-0x1.62E400p-1f), x);
  t = _mm512_fmadd_ps(n, _mm512_set1_ps(-0x1.7F7D1Cp-20f), t);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0F9F9Cp-7f), t, _mm512_set1_ps(0x1.573A1Ap-5f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0x1.555A80p-3f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0x1.FFFDC6p-2f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0x1.FFFFF6p-1f));
  t = _mm512_mul_ps(t, s);
  const __m512 f = _mm512_fmadd_ps(t, p, s);
  /* 0 below -87.34 (and for -inf); NaN compares false and stays */
  const __mmask16 low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-0x1.5D589Ep6f), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps((__mmask16)~low, f);
}

#else

/* fa_vexp_le0 on 8 lanes. */
FA_INLINE __m256 fa_vexp_le0_x8(__m256 x) {
  const __m256 magic = _mm256_set1_ps(0x1.8000FEp23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), magic);
  const __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(z), 23));
  const __m256 n = _mm256_sub_ps(z, magic);
  __m256 t = _mm256_fmadd_ps(n, _mm256_set1_ps(-0x1.62E400p-1f), x);
  t = _mm256_fmadd_ps(n, _mm256_set1_ps(-0x1.7F7D1Cp-20f), t);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0F9F9Cp-7f), t, _mm256_set1_ps(0x1.573A1Ap-5f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0x1.555A80p-3f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0x1.FFFDC6p-2f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0x1.FFFFF6p-1f));
  t = _mm256_mul_ps(t, s);
  const __m256 f = _mm256_fmadd_ps(t, p, s);
  /* 0 below -87.34 (and for -inf); NaN compares false and stays */
  return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-0x1.5D589Ep6f), _CMP_LT_OQ), f);
}

#endif

#endif
