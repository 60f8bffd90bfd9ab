/*
 * Exports for test/kernels.test.ts: the macro-kernels over the generated micro-kernels, the
 * vector exp and tanh, and the size of fa_problem. A few hundred bytes of the binary; nothing
 * else calls them.
 */
#include "fa.h"
#include "vmath.h"
#include "gemm.h"
#include "widen.h"

FA_EXPORT(fa_problem_bytes) int32_t fa_problem_bytes(void) { return (int32_t)sizeof(fa_problem); }

/* form 0: nn set, 1: nn acc, 2: tn acc (see gen/f32-gemm.h) */
FA_EXPORT(fa_test_mm)
void fa_test_mm(int32_t form, int32_t m, int32_t n, int32_t k, const float *a, int32_t lda, const float *b, int32_t ldb, float *c, int32_t ldc) {
  if (form == 0) f32_mm_nn_set(m, n, k, a, lda, b, ldb, c, ldc);
  else if (form == 1) f32_mm_nn_acc(m, n, k, a, lda, b, ldb, c, ldc);
  else f32_mm_tn_acc(m, n, k, a, lda, b, ldb, c, ldc);
}

/* y = f(x) for n floats (n % 4 == 0); fn 0: exp, 1: exp for x <= 0, 2: tanh */
FA_EXPORT(fa_test_vmath) void fa_test_vmath(int32_t fn, const float *x, float *y, int32_t n) {
  for (int32_t i = 0; i < n; i += 4) {
    v128_t v = wasm_v128_load(x + i);
    wasm_v128_store(y + i, fn == 0 ? fa_vexp(v) : fn == 1 ? fa_vexp_le0(v) : fa_vtanh(v));
  }
}

/* dst[0..n) = the cache elements src[0..n) of dtype dt as float32 (n % 8 == 0), the widening the
 * products use (put back in natural order): kv_load8 (P V), or kv_load4 (q.k) when dt has bit 8 set.
 * For test/kernels.test.ts, which checks it against core's decode on every f16 and bf16 bit pattern. */
FA_EXPORT(fa_test_widen) void fa_test_widen(int32_t dt, const void *src, float *dst, int32_t n) {
  const int four = dt & 8;
  dt &= 7;
  for (int32_t e = 0; e < n; e += 8) {
    v128_t lo, hi;
    if (four) {
      if (dt == FA_BF16) lo = kv_load4(src, e, FA_BF16), hi = kv_load4(src, e + 4, FA_BF16);
      else if (dt == FA_F16) lo = kv_load4(src, e, FA_F16), hi = kv_load4(src, e + 4, FA_F16);
      else if (dt == FA_F16F) lo = kv_load4(src, e, FA_F16F), hi = kv_load4(src, e + 4, FA_F16F);
      else lo = kv_load4(src, e, FA_F32), hi = kv_load4(src, e + 4, FA_F32);
      wasm_v128_store(dst + e, lo);
      wasm_v128_store(dst + e + 4, hi);
      continue;
    }
    if (dt == FA_BF16) kv_load8(src, e, FA_BF16, &lo, &hi);
    else if (dt == FA_F16) kv_load8(src, e, FA_F16, &lo, &hi);
    else if (dt == FA_F16F) kv_load8(src, e, FA_F16F, &lo, &hi);
    else kv_load8(src, e, FA_F32, &lo, &hi);
    wasm_v128_store(dst + e, lo);
    wasm_v128_store(dst + e + 4, hi);
    if (dt != FA_F32) fa_unperm8(dst + e);
  }
}
