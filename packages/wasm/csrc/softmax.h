/*
 * The online softmax on float32 tiles (packages/core/src/online-softmax.ts, the tile layer):
 * the update of a tile of logits and the finalization of a row. The forward (forward.c) and the
 * KV-cache kernel (kvcache.c) share them.
 */
#ifndef FA_SOFTMAX_H
#define FA_SOFTMAX_H

#include "vmath.h"
#include "tileio.h"

/*
 * Every update's rare path, once its row max `*mnew` is known: a max of -inf means the row has
 * seen nothing so far (its weights are 0, and (-inf) - (-inf) is never formed): the row is zeroed
 * and 1 returned (skip it); or that its only scores are NaN, which the max skipped: *mnew becomes
 * NaN so that it reaches the row's sum. ncols is a multiple of 4.
 */
static inline int fa_row_unseen(float *row, int32_t ncols, float *mnew) {
  if (*mnew != -FA_INF) return 0;
  v128_t nan = wasm_f32x4_const_splat(0.0f);
  for (int32_t x = 0; x < ncols; x += 4) {
    const v128_t v = wasm_v128_load(row + x);
    nan = wasm_v128_or(nan, wasm_f32x4_ne(v, v));
  }
  if (!wasm_v128_any_true(nan)) {
    fa_zero(row, ncols);
    return 1;
  }
  *mnew = __builtin_nanf("");
  return 0;
}

#if defined(FA_NATIVE)
#include "native/softmax-x86.h"
#else
/* The online-softmax update of rows [0, nr) of a logit tile (online-softmax.ts softmaxTileUpdate). */
static inline void fa_softmax_update(float *s, int32_t ld, int32_t nr, int32_t ncols, float *m, float *l, float *acc, int32_t dp) {
  for (int32_t r = 0; r < nr; r++) {
    float *row = s + r * ld;
    /* pmax(acc, x) keeps acc when x is NaN; a NaN score then reaches l through e^(NaN - m) */
    v128_t vmax0 = VSPLAT(m[r]), vmax1 = vmax0;
    int32_t c = 0;
    for (; c + 8 <= ncols; c += 8) {
      vmax0 = wasm_f32x4_pmax(vmax0, wasm_v128_load(row + c));
      vmax1 = wasm_f32x4_pmax(vmax1, wasm_v128_load(row + c + 4));
    }
    for (; c < ncols; c += 4) vmax0 = wasm_f32x4_pmax(vmax0, wasm_v128_load(row + c));
    float mnew = fa_hmax(wasm_f32x4_max(vmax0, vmax1));
    if (fa_row_unseen(row, ncols, &mnew)) continue;
    const float alpha = m[r] == mnew ? 1.0f : fa_exp1(m[r] - mnew);
    const v128_t vm = VSPLAT(mnew);
    v128_t sum0 = VSPLAT(0.0f), sum1 = VSPLAT(0.0f);
    for (c = 0; c + 8 <= ncols; c += 8) {
      v128_t p0 = fa_vexp_le0(wasm_f32x4_sub(wasm_v128_load(row + c), vm));
      v128_t p1 = fa_vexp_le0(wasm_f32x4_sub(wasm_v128_load(row + c + 4), vm));
      wasm_v128_store(row + c, p0);
      wasm_v128_store(row + c + 4, p1);
      sum0 = wasm_f32x4_add(sum0, p0);
      sum1 = wasm_f32x4_add(sum1, p1);
    }
    for (; c < ncols; c += 4) {
      v128_t p0 = fa_vexp_le0(wasm_f32x4_sub(wasm_v128_load(row + c), vm));
      wasm_v128_store(row + c, p0);
      sum0 = wasm_f32x4_add(sum0, p0);
    }
    l[r] = l[r] * alpha + fa_hsum(wasm_f32x4_add(sum0, sum1));
    m[r] = mnew;
    if (alpha != 1.0f) {
      const v128_t va = VSPLAT(alpha);
      float *a = acc + r * dp;
      for (int32_t x = 0; x < dp; x += 4) wasm_v128_store(a + x, wasm_f32x4_mul(wasm_v128_load(a + x), va));
    }
  }
}
#endif

/*
 * finalizeTile for one row: acc[0..dp) = acc / l (0 when l = 0: the row saw no key); returns the
 * row's lse = m + log l in float64 before rounding (-inf when l = 0).
 */
static inline float fa_finalize_row(float m, float l, float *acc, int32_t dp) {
  if (l == 0.0f) {
    fa_zero(acc, dp);
    return -FA_INF;
  }
  const v128_t inv = VSPLAT(1.0f / l);
  for (int32_t x = 0; x < dp; x += 4) wasm_v128_store(acc + x, wasm_f32x4_mul(wasm_v128_load(acc + x), inv));
  return (float)((double)m + fa_log((double)l));
}

#endif
