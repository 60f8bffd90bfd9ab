/*
 * The KV-cache products on 512-bit registers for the x86-64-v4 native build, 256-bit for x86-64-v3
 * (below; kvcache.c includes this in place of its SIMD128 kv_tile_products when FA_KV_X86 is
 * set). Same work, same order of keys, 16 (8) elements a step instead of 4:
 *
 *   S = Q K^T   kvx_dot_4x2 (4 query rows x 2 keys, 8 accumulators) / kvx_dot_1x4
 *   acc += P V  kvx_pv_4x32 (4 rows x 32 columns, 8 accumulators) / kvx_pv_4x16 (masked tail)
 *
 * Cache rows are widened to float32 in natural order as they are loaded: bf16 by a zero-extend and
 * a shift (exact), f16 by vcvtph2ps (exact, infinities, NaN and subnormals included), so this
 * build keeps accumulators and q in natural order for every dtype (no (even, odd) permutation:
 * kvcache.c skips it under FA_KV_X86). A head dim that is not a multiple of 16 finishes with
 * masked loads, which never touch memory past the row.
 */
#ifndef FA_NATIVE_KV_X86_H
#define FA_NATIVE_KV_X86_H

#include <immintrin.h>
#include "../fa.h"
#include "../widen.h"

#if defined(__AVX512BW__)

FA_INLINE __mmask16 kvx_mask(int32_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* Elements [e, e + 16) of a cache row (those of mask m; the rest 0) as float32. */
FA_INLINE __m512 kvx_load16(const void *row, int32_t e, __mmask16 m, const int dt) {
  if (dt == FA_F32) return m == 0xffff ? _mm512_loadu_ps((const float *)row + e) : _mm512_maskz_loadu_ps(m, (const float *)row + e);
  const __m256i h = m == 0xffff ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + e)) : _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + e);
  if (dt == FA_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

FA_INLINE __m512 kvx_q16(const float *q, int32_t e, __mmask16 m) { return m == 0xffff ? _mm512_loadu_ps(q + e) : _mm512_maskz_loadu_ps(m, q + e); }

/* [sum a0, sum a1, sum a2, sum a3]: each folded to 4 lanes (halves, then quarters), then fa_hsum4. */
FA_INLINE __m128 kvx_fold(__m512 a) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
FA_INLINE v128_t kvx_hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  return fa_hsum4((v128_t)kvx_fold(a0), (v128_t)kvx_fold(a1), (v128_t)kvx_fold(a2), (v128_t)kvx_fold(a3));
}

#define KVX_FMA_4X2(e, m, x, y)                  \
  do {                                           \
    __m512 u_ = kvx_q16(q0, (e), (m));           \
    a0 = _mm512_fmadd_ps(u_, x, a0);             \
    c0 = _mm512_fmadd_ps(u_, y, c0);             \
    u_ = kvx_q16(q1, (e), (m));                  \
    a1 = _mm512_fmadd_ps(u_, x, a1);             \
    c1 = _mm512_fmadd_ps(u_, y, c1);             \
    u_ = kvx_q16(q2, (e), (m));                  \
    a2 = _mm512_fmadd_ps(u_, x, a2);             \
    c2 = _mm512_fmadd_ps(u_, y, c2);             \
    u_ = kvx_q16(q3, (e), (m));                  \
    a3 = _mm512_fmadd_ps(u_, x, a3);             \
    c3 = _mm512_fmadd_ps(u_, y, c3);             \
  } while (0)

/* [q_r . k0] into *s0 and [q_r . k1] into *s1 for 4 query rows (stride ldq) and two cache rows. */
FA_INLINE void kvx_dot_4x2(const float *q, int32_t ldq, const void *k0, const void *k1, int32_t d, const int dt, v128_t *s0, v128_t *s1) {
  const float *q0 = q, *q1 = q0 + ldq, *q2 = q1 + ldq, *q3 = q2 + ldq;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
  int32_t e = 0;
  for (; e + 16 <= d; e += 16) {
    const __m512 x = kvx_load16(k0, e, 0xffff, dt), y = kvx_load16(k1, e, 0xffff, dt);
    KVX_FMA_4X2(e, 0xffff, x, y);
  }
  if (e < d) {
    const __mmask16 m = kvx_mask(d - e);
    const __m512 x = kvx_load16(k0, e, m, dt), y = kvx_load16(k1, e, m, dt);
    KVX_FMA_4X2(e, m, x, y);
  }
  *s0 = kvx_hsum4(a0, a1, a2, a3);
  *s1 = kvx_hsum4(c0, c1, c2, c3);
}

/* [q . k_0, ..., q . k_3] for one query row and 4 cache rows (at byte offset off). */
FA_INLINE v128_t kvx_dot_1x4(const float *q, const void *const *k, int32_t off, int32_t d, const int dt) {
  const uint8_t *k0 = (const uint8_t *)k[0] + off, *k1 = (const uint8_t *)k[1] + off, *k2 = (const uint8_t *)k[2] + off, *k3 = (const uint8_t *)k[3] + off;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int32_t e = 0; e < d; e += 16) {
    const __mmask16 m = kvx_mask(d - e);
    const __m512 u = kvx_q16(q, e, m);
    a0 = _mm512_fmadd_ps(u, kvx_load16(k0, e, m, dt), a0);
    a1 = _mm512_fmadd_ps(u, kvx_load16(k1, e, m, dt), a1);
    a2 = _mm512_fmadd_ps(u, kvx_load16(k2, e, m, dt), a2);
    a3 = _mm512_fmadd_ps(u, kvx_load16(k3, e, m, dt), a3);
  }
  return kvx_hsum4(a0, a1, a2, a3);
}

/* acc[r][e, e + 32) += sum_{j < nk} P[r][j] v_j[e, e + 32) for 4 rows (8 accumulators). */
FA_INLINE void kvx_pv_4x32(const float *P, int32_t ldp, const void *const *v, int32_t off, int32_t nk, int32_t e, const int dt, float *acc, int32_t lda) {
  float *c0 = acc + e, *c1 = c0 + lda, *c2 = c1 + lda, *c3 = c2 + lda;
  const float *p0 = P, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
  __m512 a0 = _mm512_loadu_ps(c0), b0 = _mm512_loadu_ps(c0 + 16), a1 = _mm512_loadu_ps(c1), b1 = _mm512_loadu_ps(c1 + 16);
  __m512 a2 = _mm512_loadu_ps(c2), b2 = _mm512_loadu_ps(c2 + 16), a3 = _mm512_loadu_ps(c3), b3 = _mm512_loadu_ps(c3 + 16);
  for (int32_t j = 0; j < nk; j++) {
    const uint8_t *row = (const uint8_t *)v[j] + off;
    const __m512 lo = kvx_load16(row, e, 0xffff, dt), hi = kvx_load16(row, e + 16, 0xffff, dt);
    __m512 x = _mm512_set1_ps(p0[j]);
    a0 = _mm512_fmadd_ps(x, lo, a0);
    b0 = _mm512_fmadd_ps(x, hi, b0);
    x = _mm512_set1_ps(p1[j]);
    a1 = _mm512_fmadd_ps(x, lo, a1);
    b1 = _mm512_fmadd_ps(x, hi, b1);
    x = _mm512_set1_ps(p2[j]);
    a2 = _mm512_fmadd_ps(x, lo, a2);
    b2 = _mm512_fmadd_ps(x, hi, b2);
    x = _mm512_set1_ps(p3[j]);
    a3 = _mm512_fmadd_ps(x, lo, a3);
    b3 = _mm512_fmadd_ps(x, hi, b3);
  }
  _mm512_storeu_ps(c0, a0), _mm512_storeu_ps(c0 + 16, b0), _mm512_storeu_ps(c1, a1), _mm512_storeu_ps(c1 + 16, b1);
  _mm512_storeu_ps(c2, a2), _mm512_storeu_ps(c2 + 16, b2), _mm512_storeu_ps(c3, a3), _mm512_storeu_ps(c3 + 16, b3);
}

/* The same for `rows` (1..4) rows and columns [e, e + n), n <= 16 (masked). */
FA_INLINE void kvx_pv_16(const float *P, int32_t ldp, const void *const *v, int32_t off, int32_t nk, int32_t e, int32_t n, int32_t rows, const int dt, float *acc, int32_t lda) {
  const __mmask16 m = kvx_mask(n);
  __m512 a[4];
  for (int32_t r = 0; r < rows; r++) a[r] = _mm512_maskz_loadu_ps(m, acc + r * lda + e);
  for (int32_t j = 0; j < nk; j++) {
    const __m512 x = kvx_load16((const uint8_t *)v[j] + off, e, m, dt);
    for (int32_t r = 0; r < rows; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(P[r * ldp + j]), x, a[r]);
  }
  for (int32_t r = 0; r < rows; r++) _mm512_mask_storeu_ps(acc + r * lda + e, m, a[r]);
}

/* acc += P V for rows [r, r + rows) (rows <= 4) over all d columns. */
FA_INLINE void kvx_pv_rows(const float *s, int32_t ld_s, const void *const *vrow, int32_t off, int32_t nc, int32_t rows, int32_t d, const int dt, float *acc, int32_t dp) {
  int32_t e = 0;
  if (rows == 4)
    for (; e + 32 <= d; e += 32) kvx_pv_4x32(s, ld_s, vrow, off, nc, e, dt, acc, dp);
  for (; e < d; e += 16) kvx_pv_16(s, ld_s, vrow, off, nc, e, fa_min(16, d - e), rows, dt, acc, dp);
}

#else /* x86-64-v3: AVX2, F16C, FMA; 8 elements a step, a head dim's last d % 8 elements in scalar code */

/* Elements [e, e + 8) of a cache row as float32. */
FA_INLINE __m256 kvx_load8(const void *row, int32_t e, const int dt) {
  if (dt == FA_F32) return _mm256_loadu_ps((const float *)row + e);
  const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + e));
  if (dt == FA_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

FA_INLINE __m128 kvx_fold(__m256 a) { return _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); }
FA_INLINE v128_t kvx_hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  return fa_hsum4((v128_t)kvx_fold(a0), (v128_t)kvx_fold(a1), (v128_t)kvx_fold(a2), (v128_t)kvx_fold(a3));
}

/* [q_r . k0] into *s0 and [q_r . k1] into *s1 for 4 query rows (stride ldq) and two cache rows. */
FA_INLINE void kvx_dot_4x2(const float *q, int32_t ldq, const void *k0, const void *k1, int32_t d, const int dt, v128_t *s0, v128_t *s1) {
  const float *q0 = q, *q1 = q0 + ldq, *q2 = q1 + ldq, *q3 = q2 + ldq;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
  int32_t e = 0;
  for (; e + 8 <= d; e += 8) {
    const __m256 x = kvx_load8(k0, e, dt), y = kvx_load8(k1, e, dt);
    __m256 u = _mm256_loadu_ps(q0 + e);
    a0 = _mm256_fmadd_ps(u, x, a0), c0 = _mm256_fmadd_ps(u, y, c0);
    u = _mm256_loadu_ps(q1 + e);
    a1 = _mm256_fmadd_ps(u, x, a1), c1 = _mm256_fmadd_ps(u, y, c1);
    u = _mm256_loadu_ps(q2 + e);
    a2 = _mm256_fmadd_ps(u, x, a2), c2 = _mm256_fmadd_ps(u, y, c2);
    u = _mm256_loadu_ps(q3 + e);
    a3 = _mm256_fmadd_ps(u, x, a3), c3 = _mm256_fmadd_ps(u, y, c3);
  }
  v128_t r0 = kvx_hsum4(a0, a1, a2, a3), r1 = kvx_hsum4(c0, c1, c2, c3);
  if (e < d) kv_dot_tail_4x2(q0, q1, q2, q3, k0, k1, e, d, dt, &r0, &r1);
  *s0 = r0;
  *s1 = r1;
}

/* [q . k_0, ..., q . k_3] for one query row and 4 cache rows (at byte offset off). */
FA_INLINE v128_t kvx_dot_1x4(const float *q, const void *const *k, int32_t off, int32_t d, const int dt) {
  const uint8_t *k0 = (const uint8_t *)k[0] + off, *k1 = (const uint8_t *)k[1] + off, *k2 = (const uint8_t *)k[2] + off, *k3 = (const uint8_t *)k[3] + off;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int32_t e = 0;
  for (; e + 8 <= d; e += 8) {
    const __m256 u = _mm256_loadu_ps(q + e);
    a0 = _mm256_fmadd_ps(u, kvx_load8(k0, e, dt), a0);
    a1 = _mm256_fmadd_ps(u, kvx_load8(k1, e, dt), a1);
    a2 = _mm256_fmadd_ps(u, kvx_load8(k2, e, dt), a2);
    a3 = _mm256_fmadd_ps(u, kvx_load8(k3, e, dt), a3);
  }
  v128_t s = kvx_hsum4(a0, a1, a2, a3);
  if (e < d) s = wasm_f32x4_add(s, kv_dot_tail_1x4(q, k0, k1, k2, k3, e, d, dt));
  return s;
}

/* acc[r][e, e + 16) += sum_{j < nk} P[r][j] v_j[e, e + 16) for 4 rows (8 accumulators). */
FA_INLINE void kvx_pv_4x16(const float *P, int32_t ldp, const void *const *v, int32_t off, int32_t nk, int32_t e, const int dt, float *acc, int32_t lda) {
  float *c0 = acc + e, *c1 = c0 + lda, *c2 = c1 + lda, *c3 = c2 + lda;
  const float *p0 = P, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
  __m256 a0 = _mm256_loadu_ps(c0), b0 = _mm256_loadu_ps(c0 + 8), a1 = _mm256_loadu_ps(c1), b1 = _mm256_loadu_ps(c1 + 8);
  __m256 a2 = _mm256_loadu_ps(c2), b2 = _mm256_loadu_ps(c2 + 8), a3 = _mm256_loadu_ps(c3), b3 = _mm256_loadu_ps(c3 + 8);
  for (int32_t j = 0; j < nk; j++) {
    const uint8_t *row = (const uint8_t *)v[j] + off;
    const __m256 lo = kvx_load8(row, e, dt), hi = kvx_load8(row, e + 8, dt);
    __m256 x = _mm256_broadcast_ss(p0 + j);
    a0 = _mm256_fmadd_ps(x, lo, a0), b0 = _mm256_fmadd_ps(x, hi, b0);
    x = _mm256_broadcast_ss(p1 + j);
    a1 = _mm256_fmadd_ps(x, lo, a1), b1 = _mm256_fmadd_ps(x, hi, b1);
    x = _mm256_broadcast_ss(p2 + j);
    a2 = _mm256_fmadd_ps(x, lo, a2), b2 = _mm256_fmadd_ps(x, hi, b2);
    x = _mm256_broadcast_ss(p3 + j);
    a3 = _mm256_fmadd_ps(x, lo, a3), b3 = _mm256_fmadd_ps(x, hi, b3);
  }
  _mm256_storeu_ps(c0, a0), _mm256_storeu_ps(c0 + 8, b0), _mm256_storeu_ps(c1, a1), _mm256_storeu_ps(c1 + 8, b1);
  _mm256_storeu_ps(c2, a2), _mm256_storeu_ps(c2 + 8, b2), _mm256_storeu_ps(c3, a3), _mm256_storeu_ps(c3 + 8, b3);
}

/* The same for `rows` (1..4) rows and the 8 columns [e, e + 8). */
FA_INLINE void kvx_pv_8(const float *P, int32_t ldp, const void *const *v, int32_t off, int32_t nk, int32_t e, int32_t rows, const int dt, float *acc, int32_t lda) {
  __m256 a[4];
  for (int32_t r = 0; r < rows; r++) a[r] = _mm256_loadu_ps(acc + r * lda + e);
  for (int32_t j = 0; j < nk; j++) {
    const __m256 x = kvx_load8((const uint8_t *)v[j] + off, e, dt);
    for (int32_t r = 0; r < rows; r++) a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(P + r * ldp + j), x, a[r]);
  }
  for (int32_t r = 0; r < rows; r++) _mm256_storeu_ps(acc + r * lda + e, a[r]);
}

/* acc += P V for rows [r, r + rows) (rows <= 4) over all d columns (the last d % 8 in scalar code). */
FA_INLINE void kvx_pv_rows(const float *s, int32_t ld_s, const void *const *vrow, int32_t off, int32_t nc, int32_t rows, int32_t d, const int dt, float *acc, int32_t dp) {
  const int32_t d8 = d & ~7;
  int32_t e = 0;
  if (rows == 4)
    for (; e + 16 <= d8; e += 16) kvx_pv_4x16(s, ld_s, vrow, off, nc, e, dt, acc, dp);
  for (; e < d8; e += 8) kvx_pv_8(s, ld_s, vrow, off, nc, e, rows, dt, acc, dp);
  kv_pv_tail(s, ld_s, vrow, off, nc, rows, d8, d, dt, acc, dp);
}

#endif

/* kv_tile_products (kvcache.c) on these kernels: pass 0 S = Q K^T, pass 1 acc += P V. */
FA_INLINE void kvx_tile_products(const float *q, float *acc, float *s, int32_t ld_s, const void *const *krow, const void *const *vrow, int32_t off, int32_t d, int32_t dp, int32_t R, int32_t nc, int32_t nc4, int pass, const int dt) {
  const int32_t R4 = R & ~3;
  if (pass == 0) {
    for (int32_t r = 0; r < R4; r += 4) {
      for (int32_t j = 0; j < nc4; j += 2) {
        v128_t s0, s1;
        kvx_dot_4x2(q + r * dp, dp, (const uint8_t *)krow[j] + off, (const uint8_t *)krow[j + 1] + off, d, dt, &s0, &s1);
        float *o = s + r * ld_s + j;
        wasm_v128_store32_lane(o, s0, 0);
        wasm_v128_store32_lane(o + ld_s, s0, 1);
        wasm_v128_store32_lane(o + 2 * ld_s, s0, 2);
        wasm_v128_store32_lane(o + 3 * ld_s, s0, 3);
        wasm_v128_store32_lane(o + 1, s1, 0);
        wasm_v128_store32_lane(o + 1 + ld_s, s1, 1);
        wasm_v128_store32_lane(o + 1 + 2 * ld_s, s1, 2);
        wasm_v128_store32_lane(o + 1 + 3 * ld_s, s1, 3);
      }
    }
    for (int32_t r = R4; r < R; r++)
      for (int32_t j = 0; j < nc4; j += 4) wasm_v128_store(s + r * ld_s + j, kvx_dot_1x4(q + r * dp, krow + j, off, d, dt));
    return;
  }
  for (int32_t r = 0; r < R; r += 4) kvx_pv_rows(s + r * ld_s, ld_s, vrow, off, nc, fa_min(4, R - r), d, dt, acc + r * dp, dp);
}

#endif
