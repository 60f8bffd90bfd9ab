/*
 * Moving tiles between the caller's [rows, heads, D] tensors and the kernels' tiles: K and V
 * transposed into [D][bc8] panels (the B operand of S = Q K^T and dP = dO V^T), and float32
 * tiles of row length dp written back, or added back, D columns per row.
 */
#ifndef FA_TILEIO_H
#define FA_TILEIO_H

#include "vmath.h"

/* dst[c + dd * ld] = src[c * stride + dd] for c < nc, dd < d; columns nc..ncols are zeroed. */
static inline void fa_transpose_rows(const float *src, int32_t stride, int32_t nc, int32_t d, float *dst, int32_t ld, int32_t ncols) {
  int32_t c = 0;
  for (; c + 4 <= nc; c += 4) {
    const float *s0 = src + c * stride, *s1 = s0 + stride, *s2 = s1 + stride, *s3 = s2 + stride;
    int32_t dd = 0;
    for (; dd + 4 <= d; dd += 4) {
      /* 4x4 transpose of rows s0..s3, columns dd..dd+3 */
      v128_t r0 = wasm_v128_load(s0 + dd), r1 = wasm_v128_load(s1 + dd), r2 = wasm_v128_load(s2 + dd), r3 = wasm_v128_load(s3 + dd);
      v128_t t0 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5), t1 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7);
      v128_t t2 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5), t3 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);
      wasm_v128_store(dst + (dd + 0) * ld + c, wasm_i64x2_shuffle(t0, t2, 0, 2));
      wasm_v128_store(dst + (dd + 1) * ld + c, wasm_i64x2_shuffle(t0, t2, 1, 3));
      wasm_v128_store(dst + (dd + 2) * ld + c, wasm_i64x2_shuffle(t1, t3, 0, 2));
      wasm_v128_store(dst + (dd + 3) * ld + c, wasm_i64x2_shuffle(t1, t3, 1, 3));
    }
    for (; dd < d; dd++) {
      dst[dd * ld + c] = s0[dd];
      dst[dd * ld + c + 1] = s1[dd];
      dst[dd * ld + c + 2] = s2[dd];
      dst[dd * ld + c + 3] = s3[dd];
    }
  }
  for (; c < nc; c++)
    for (int32_t dd = 0; dd < d; dd++) dst[dd * ld + c] = src[c * stride + dd];
  for (int32_t dd = 0; dd < d; dd++)
    for (int32_t cc = nc; cc < ncols; cc++) dst[dd * ld + cc] = 0.0f;
}

/* dst[r * ld + c] = src[r * stride + c] for r < nr, c < d; columns d..ld are zeroed. */
static inline void fa_copy_rows(const float *src, int32_t stride, int32_t nr, int32_t d, float *dst, int32_t ld) {
  for (int32_t r = 0; r < nr; r++) {
    const float *s = src + r * stride;
    float *o = dst + r * ld;
    int32_t c = 0;
    for (; c + 4 <= d; c += 4) wasm_v128_store(o + c, wasm_v128_load(s + c));
    for (; c < d; c++) o[c] = s[c];
    for (; c < ld; c++) o[c] = 0.0f;
  }
}

/* dst[r * stride + c] = src[r * ld + c] for r < nr, c < d. */
static inline void fa_store_rows(const float *src, int32_t ld, int32_t nr, int32_t d, float *dst, int32_t stride) {
  for (int32_t r = 0; r < nr; r++) {
    const float *s = src + r * ld;
    float *o = dst + r * stride;
    int32_t c = 0;
    for (; c + 4 <= d; c += 4) wasm_v128_store(o + c, wasm_v128_load(s + c));
    for (; c < d; c++) o[c] = s[c];
  }
}

/* dst[r * stride + c] += src[r * ld + c] for r < nr, c < d (the float32 dQ accumulator). */
static inline void fa_add_rows(const float *src, int32_t ld, int32_t nr, int32_t d, float *dst, int32_t stride) {
  for (int32_t r = 0; r < nr; r++) {
    const float *s = src + r * ld;
    float *o = dst + r * stride;
    int32_t c = 0;
    for (; c + 4 <= d; c += 4) wasm_v128_store(o + c, wasm_f32x4_add(wasm_v128_load(o + c), wasm_v128_load(s + c)));
    for (; c < d; c++) o[c] += s[c];
  }
}

static inline void fa_zero(float *dst, int32_t n) {
  __builtin_memset(dst, 0, (unsigned long)n * sizeof(float));
}

#endif
