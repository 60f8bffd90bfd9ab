/*
 * The backward's two elementwise passes on 512-bit registers, for the x86-64-v4 native build
 * (backward.c includes this in place of its SIMD128 loops): P = e^(S - lse) with fa_vexp's clamp
 * and polynomial (vmath-x86.h's fa_vexp_le0_x16), and dS' = P (dP - Dvec) [dcap]. Same
 * operations per element as the 128-bit code, 16 at a time, the tail masked.
 */
#ifndef FA_NATIVE_BACKWARD_X86_H
#define FA_NATIVE_BACKWARD_X86_H

#include <immintrin.h>
#include "../fa.h"
#include "../tileio.h"
#include "vmath-x86.h"

/* P = e^(S - lse) on rows [0, nr) (-inf logits give 0; a row whose lse is -inf sees nothing). */
static void probabilities(float *s, int32_t ld, int32_t nr, int32_t ncols, const float *lse) {
  const __m512 hi = _mm512_set1_ps(88.0f);
  for (int32_t r = 0; r < nr; r++) {
    float *row = s + r * ld;
    if (lse[r] == -FA_INF) {
      fa_zero(row, ncols);
      continue;
    }
    const __m512 vl = _mm512_set1_ps(lse[r]);
    for (int32_t c = 0; c < ncols; c += 16) {
      const __mmask16 k = fa_x86_mask(ncols - c);
      const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + c), vl);
      /* pmin(x, 88): minps returns x when x is NaN */
      _mm512_mask_storeu_ps(row + c, k, fa_vexp_le0_x16(_mm512_min_ps(hi, x)));
    }
  }
}

/* dS' = P (dP - Dvec) [dcap], in place in dp (0 where P is 0 and dP finite). */
static void dscores(const float *s, float *dp, const float *dcap, int32_t ld, int32_t nr, int32_t ncols, const float *dvec) {
  for (int32_t r = 0; r < nr; r++) {
    const float *pr = s + r * ld;
    float *dr = dp + r * ld;
    const __m512 dv = _mm512_set1_ps(dvec[r]);
    for (int32_t c = 0; c < ncols; c += 16) {
      const __mmask16 k = fa_x86_mask(ncols - c);
      __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, pr + c), _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dr + c), dv));
      if (dcap) x = _mm512_mul_ps(x, _mm512_maskz_loadu_ps(k, dcap + r * ld + c));
      _mm512_mask_storeu_ps(dr + c, k, x);
    }
  }
}

#endif
