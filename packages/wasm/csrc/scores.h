/*
 * Raw dot products q.k -> logits, tile by tile: scale, then softcap, then ALiBi, then the mask
 * (packages/core/src/mask.ts `logit` and `keyRange`, in that order), in float32 on f32x4.
 */
#ifndef FA_SCORES_H
#define FA_SCORES_H

#include "vmath.h"

/*
 * In place on rows [0, nr) and columns [0, ncols) of s (row stride ld, ncols a multiple of 4):
 * query row r is query i0 + r of a sequence with tq queries and tk keys, column c is key j0 + c;
 * columns at or past nc are padding. The scores arrive already scaled (the engine multiplies q
 * by the scale once, as it copies it in); each becomes its logit, or -inf where the key is
 * masked or padding. With dcap (backward with softcap), also stores the softcap's derivative
 * 1 - tanh^2 there (0 where masked). `slope` is the (batch, head)'s ALiBi slope or 0.
 * A tile without softcap, ALiBi, masked keys or padding is left as it is (no pass at all).
 * Returns 1 when no key of [0, nc) was masked for any row.
 */
static inline int fa_score_tile(const fa_problem *p, float *s, int32_t ld, int32_t nr, int32_t nc, int32_t ncols, int32_t i0, int32_t j0, int32_t tq, int32_t tk, float slope, float *dcap) {
  const v128_t iota = wasm_i32x4_make(0, 1, 2, 3);
  const v128_t ninf = VSPLAT(-FA_INF);
  const int capped = p->softcap > 0;
  const v128_t vcap = VSPLAT(p->softcap);
  const v128_t vinvcap = VSPLAT(capped ? 1.0f / p->softcap : 0.0f);
  const v128_t vslope = VSPLAT(-slope);
  int full = 1;
  for (int32_t r = 0; r < nr && full; r++) {
    int32_t lo, hi;
    fa_key_range(p, i0 + r, tq, tk, &lo, &hi);
    full = lo <= j0 && hi >= j0 + nc - 1;
  }
  if (full && !capped && slope == 0.0f && nc == ncols) return 1;
  for (int32_t r = 0; r < nr; r++) {
    float *row = s + r * ld;
    float *drow = dcap ? dcap + r * ld : 0;
    int32_t lo, hi;
    fa_key_range(p, i0 + r, tq, tk, &lo, &hi);
    lo -= j0;
    hi -= j0;
    if (hi > nc - 1) hi = nc - 1;
    const int rowfull = lo <= 0 && hi == nc - 1 && nc == ncols;
    const v128_t vlo = wasm_i32x4_splat(lo), vhi = wasm_i32x4_splat(hi);
    const int32_t pos = i0 + r + tk - tq - j0; /* query position relative to column 0 */
    const v128_t vpos = wasm_i32x4_splat(pos);
    for (int32_t c = 0; c < ncols; c += 4) {
      v128_t x = wasm_v128_load(row + c);
      v128_t col = wasm_i32x4_add(iota, wasm_i32x4_splat(c));
      if (capped) {
        v128_t t = fa_vtanh(wasm_f32x4_mul(x, vinvcap));
        x = wasm_f32x4_mul(vcap, t);
        if (drow) wasm_v128_store(drow + c, wasm_f32x4_sub(VSPLAT(1.0f), wasm_f32x4_mul(t, t)));
      }
      if (slope != 0.0f) {
        v128_t dist = wasm_f32x4_convert_i32x4(wasm_i32x4_abs(wasm_i32x4_sub(vpos, col)));
        x = VFMA(vslope, dist, x);
      }
      if (!rowfull) {
        v128_t vis = wasm_v128_and(wasm_i32x4_ge(col, vlo), wasm_i32x4_le(col, vhi));
        x = wasm_v128_bitselect(x, ninf, vis);
        if (drow) wasm_v128_store(drow + c, wasm_v128_and(wasm_v128_load(drow + c), vis));
      }
      wasm_v128_store(row + c, x);
    }
  }
  return full;
}

#endif
