/*
 * The matrix product of the model ops (@fa/core's GemmCall, src/gemm.ts): C (M x N) = op(A) op(B),
 * or C += op(A) op(B), row-major, op(A) M x K (stored K x M when trans_a), op(B) K x N (stored
 * N x K when trans_b), on the macro-kernels of gemm.h (4x8 SIMD128 in WebAssembly, 8x32 AVX-512 or
 * 6x16 AVX2 natively). Blocked for the caches the way BLIS's loops are, with the macro-kernel's
 * own order (rows outer, columns inner) at the bottom:
 *
 *   for each k block of GEMM_KC                        (C: set on the first block, unless
 *     for each row block of GEMM_MC                     accumulate; += on the others)
 *       when trans_a: pack op(A)[rows][k block] as rows of kc (transposed; once per block);
 *       otherwise A's rows are read in place (packing them measured 4-5 % slower)
 *       for each column panel of GEMM_NC
 *         pack op(B)[k block][panel] as kc rows of nc  (transposed when trans_b; zero-padded to a
 *                                                       multiple of 8 columns)
 *         macro-kernel over the row block: a row tile of A (MR x kc) stays in L1 while it sweeps
 *         the panel (kc x nc, 256 KiB at 256 x 256) from L2
 *
 * A panel's last columns that do not fill 8 go through a small padded buffer (MC x 8). Any
 * M, N, K >= 0 (K = 0: C = 0, or C unchanged with accumulate). Single-threaded: the caller runs
 * it on one thread. ws: fa_gemm_ws_bytes(...) bytes, 16-byte aligned (64 is better: the panel rows
 * then start on cache lines, which AVX2 measured ~10 % faster).
 */
#include <stddef.h>
#include "fa.h"
#include "vmath.h"
#include "gemm.h"

#ifndef GEMM_KC
#define GEMM_KC 256
#endif
#ifndef GEMM_NC
#define GEMM_NC 256
#endif
#ifndef GEMM_MC
#define GEMM_MC 512
#endif

static inline int32_t round8(int32_t x) { return (x + 7) & ~7; }

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (4 x 4 blocks in registers). */
static void transpose(const float *src, int32_t lds, int32_t rows, int32_t cols, float *dst, int32_t ldd) {
  int32_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float *s = src + (size_t)r * lds;
    int32_t c = 0;
    for (; c + 4 <= cols; c += 4) {
      const v128_t r0 = wasm_v128_load(s + c), r1 = wasm_v128_load(s + lds + c);
      const v128_t r2 = wasm_v128_load(s + 2 * (size_t)lds + c), r3 = wasm_v128_load(s + 3 * (size_t)lds + c);
      const v128_t t0 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5), t1 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7);
      const v128_t t2 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5), t3 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);
      float *d = dst + (size_t)c * ldd + r;
      wasm_v128_store(d, wasm_i64x2_shuffle(t0, t2, 0, 2));
      wasm_v128_store(d + ldd, wasm_i64x2_shuffle(t0, t2, 1, 3));
      wasm_v128_store(d + 2 * (size_t)ldd, wasm_i64x2_shuffle(t1, t3, 0, 2));
      wasm_v128_store(d + 3 * (size_t)ldd, wasm_i64x2_shuffle(t1, t3, 1, 3));
    }
    for (; c < cols; c++)
      for (int32_t i = 0; i < 4; i++) dst[(size_t)c * ldd + r + i] = s[(size_t)i * lds + c];
  }
  for (; r < rows; r++)
    for (int32_t c = 0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}

/* rows x cols of src (row stride lds) into dst (row stride ldd). */
static void copy_rows(const float *src, int32_t lds, int32_t rows, int32_t cols, float *dst, int32_t ldd) {
  for (int32_t r = 0; r < rows; r++) __builtin_memcpy(dst + (size_t)r * ldd, src + (size_t)r * lds, (size_t)cols * sizeof(float));
}

FA_EXPORT(fa_gemm_ws_bytes)
int32_t fa_gemm_ws_bytes(int32_t trans_a, int32_t trans_b, int32_t m, int32_t n, int32_t k) {
  (void)trans_b;
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const int32_t kc = fa_min(k, GEMM_KC), mc = fa_min(m, GEMM_MC), ncp = round8(fa_min(n, GEMM_NC));
  return (int32_t)sizeof(float) * (kc * ncp + (trans_a ? mc * kc : 0) + mc * 8);
}

/*
 * The product on strided storage: A's rows (or, with trans_a, its K rows of M) lda floats apart,
 * B's ldb apart, C's ldc apart. fa_gemm_f32 is the packed case; the native build's threaded
 * product (native/direct.c) hands each thread a block of rows or columns through it.
 */
FA_EXPORT(fa_gemm_f32_ld)
void fa_gemm_f32_ld(int32_t trans_a, int32_t trans_b, int32_t m, int32_t n, int32_t k, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc,
                    int32_t accumulate, float *ws) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int32_t r = 0; r < m; r++) __builtin_memset(c + (size_t)r * ldc, 0, (size_t)n * sizeof(float));
    return;
  }
  const int32_t kc_max = fa_min(k, GEMM_KC), mc_max = fa_min(m, GEMM_MC), ncp_max = round8(fa_min(n, GEMM_NC));
  float *bp = ws;                                   /* kc x ncp: the packed panel of op(B) */
  float *ap = bp + (size_t)kc_max * ncp_max;        /* mc x kc: the packed rows of op(A) (trans_a) */
  float *tail = ap + (trans_a ? (size_t)mc_max * kc_max : 0); /* mc x 8: a panel's last columns */
  for (int32_t p0 = 0; p0 < k; p0 += GEMM_KC) {
    const int32_t kc = fa_min(GEMM_KC, k - p0);
    const int set = p0 == 0 && !accumulate;
    for (int32_t i0 = 0; i0 < m; i0 += GEMM_MC) {
      const int32_t mc = fa_min(GEMM_MC, m - i0);
      /* op(A)'s rows: read in place (row stride lda), or packed as rows of kc when stored K x M */
      const float *ab = a + (size_t)i0 * lda + p0;
      int32_t lda_p = lda;
      if (trans_a) transpose(a + (size_t)p0 * lda + i0, lda, kc, mc, ap, kc), ab = ap, lda_p = kc;
      for (int32_t j0 = 0; j0 < n; j0 += GEMM_NC) {
        const int32_t nc = fa_min(GEMM_NC, n - j0), ncp = round8(nc), full = nc & ~7;
        if (trans_b) transpose(b + (size_t)j0 * ldb + p0, ldb, nc, kc, bp, ncp);
        else copy_rows(b + (size_t)p0 * ldb + j0, ldb, kc, nc, bp, ncp);
        if (ncp != nc)
          for (int32_t r = 0; r < kc; r++) __builtin_memset(bp + (size_t)r * ncp + nc, 0, (size_t)(ncp - nc) * sizeof(float));
        float *cb = c + (size_t)i0 * ldc + j0;
        if (full > 0) {
          if (set) f32_mm_nn_set(mc, full, kc, ab, lda_p, bp, ncp, cb, ldc);
          else f32_mm_nn_acc(mc, full, kc, ab, lda_p, bp, ncp, cb, ldc);
        }
        if (full < nc) {
          const int32_t w = nc - full;
          if (set) {
            f32_mm_nn_set(mc, 8, kc, ab, lda_p, bp + full, ncp, tail, 8);
          } else {
            copy_rows(cb + full, ldc, mc, w, tail, 8);
            f32_mm_nn_acc(mc, 8, kc, ab, lda_p, bp + full, ncp, tail, 8);
          }
          copy_rows(tail, 8, mc, w, cb + full, ldc);
        }
      }
    }
  }
}

FA_EXPORT(fa_gemm_f32)
void fa_gemm_f32(int32_t trans_a, int32_t trans_b, int32_t m, int32_t n, int32_t k, const float *a, const float *b, float *c, int32_t accumulate, float *ws) {
  fa_gemm_f32_ld(trans_a, trans_b, m, n, k, a, trans_a ? m : k, b, trans_b ? k : n, c, n, accumulate, ws);
}
