/*
 * Cache rows in their own dtype, loaded as float32 vectors in registers, as the KV-cache products
 * load them (kvcache.c): no decode pass. f32 as it is. A 16-bit row is loaded 8 elements at a
 * time and split into its even elements (a 16-bit shift puts each lane's low half on top) and
 * its odd ones (a mask keeps the high half): one operation per 4 elements for bf16, whose bits
 * are a float32's top half. f16 goes on from there exactly: an arithmetic shift and a mask place
 * sign, exponent and mantissa under a float32 exponent, a multiply by 2^112 rebiases normals and
 * subnormals, and infinities and NaNs get the all-ones exponent. FA_F16F is f16 known to hold
 * no infinity or NaN (kvcache.c scans each tile's rows first): the same widening without the
 * all-ones fix, 3 operations per 4 elements instead of 7 (KERNEL_NOTES.md, "KV-cache decode").
 *
 * So 16-bit chunks arrive as (even, odd) = elements (0, 2, 4, 6), (1, 3, 5, 7): the kernels keep
 * the output accumulator (and, for f16's q.k, q) in that order within each chunk of 8 (fa_perm8 /
 * fa_unperm8), and the dot products and P V sums come out the same as in natural order.
 * kv_load4 (the q.k products of f32 and bf16) loads 4 elements in natural order instead.
 */
#ifndef FA_WIDEN_H
#define FA_WIDEN_H

#include "vmath.h"

enum { FA_F32 = 0, FA_F16 = 1, FA_BF16 = 2, FA_F16F = 3 };

/* Finite f16 bits in the top half of each 32-bit lane (below it: anything) -> float32, exactly. */
FA_INLINE v128_t fa_f16_widen_finite_hi(v128_t v) {
  return wasm_f32x4_mul(wasm_v128_and(wasm_i32x4_shr(v, 3), wasm_i32x4_splat((int32_t)0x8fffe000u)), VSPLAT(0x1p112f));
}

/* f16 bits in the top half of each 32-bit lane (the low half zero) -> float32, exactly. */
FA_INLINE v128_t fa_f16_widen_hi(v128_t v) {
  const v128_t w = wasm_v128_and(wasm_i32x4_shr(v, 3), wasm_i32x4_splat((int32_t)0x8fffe000u));
  v128_t f = wasm_f32x4_mul(w, VSPLAT(0x1p112f));
  const v128_t infnan = wasm_i32x4_eq(wasm_v128_and(v, wasm_i32x4_splat(0x7c000000)), wasm_i32x4_splat(0x7c000000));
  return wasm_v128_or(f, wasm_v128_and(infnan, wasm_i32x4_splat(0x7f800000)));
}

/*
 * Elements [e, e + 8) of a cache row as two f32x4 (dt is a constant at every call site): f32 in
 * order, 16-bit types as (even, odd) elements.
 */
FA_INLINE void kv_load8(const void *row, int32_t e, const int dt, v128_t *lo, v128_t *hi) {
  if (dt == FA_F32) {
    const float *f = (const float *)row + e;
    *lo = wasm_v128_load(f);
    *hi = wasm_v128_load(f + 4);
    return;
  }
  const v128_t x = wasm_v128_load((const uint16_t *)row + e);
  if (dt == FA_F16F) {
    /* the odd elements are already on top: the mask under the shift drops the even ones */
    *lo = fa_f16_widen_finite_hi(wasm_i32x4_shl(x, 16));
    *hi = fa_f16_widen_finite_hi(x);
    return;
  }
  const v128_t even = wasm_i32x4_shl(x, 16), odd = wasm_v128_and(x, wasm_i32x4_splat((int32_t)0xffff0000u));
  if (dt == FA_BF16) {
    *lo = even;
    *hi = odd;
  } else {
    *lo = fa_f16_widen_hi(even);
    *hi = fa_f16_widen_hi(odd);
  }
}

/*
 * Elements [e, e + 4) of a cache row as one f32x4 in natural order (16-bit types: four lanes
 * zero-extended from 16 bits, shifted to the top), for the q.k products: one vector a key keeps
 * their 4 rows x 2 keys block within the registers V8 allocates (KERNEL_NOTES.md).
 */
FA_INLINE v128_t kv_load4(const void *row, int32_t e, const int dt) {
  if (dt == FA_F32) return wasm_v128_load((const float *)row + e);
  if (dt == FA_F16F) {
    /* sign-extended, shifted by 13: exponent and mantissa in place, copies of the sign above
     * the float32 exponent's low 5 bits, which the mask clears (but for the sign bit itself) */
    const v128_t w = wasm_i32x4_shl(wasm_i32x4_load16x4((const int16_t *)row + e), 13);
    return wasm_f32x4_mul(wasm_v128_and(w, wasm_i32x4_splat((int32_t)0x8fffe000u)), VSPLAT(0x1p112f));
  }
  const v128_t v = wasm_i32x4_shl(wasm_u32x4_load16x4((const uint16_t *)row + e), 16);
  return dt == FA_BF16 ? v : fa_f16_widen_hi(v);
}

/* (x0..x3, x4..x7) in natural order -> (even, odd) order, in place, for rows of 16-bit caches. */
FA_INLINE void fa_perm8(float *x) {
  const v128_t a = wasm_v128_load(x), b = wasm_v128_load(x + 4);
  wasm_v128_store(x, wasm_i32x4_shuffle(a, b, 0, 2, 4, 6));
  wasm_v128_store(x + 4, wasm_i32x4_shuffle(a, b, 1, 3, 5, 7));
}

/* The inverse of fa_perm8. */
FA_INLINE void fa_unperm8(float *x) {
  const v128_t ev = wasm_v128_load(x), od = wasm_v128_load(x + 4);
  wasm_v128_store(x, wasm_i32x4_shuffle(ev, od, 0, 4, 1, 5));
  wasm_v128_store(x + 4, wasm_i32x4_shuffle(ev, od, 2, 6, 3, 7));
}

/* Element e of a cache row as a float (the tails of head dims that are not a multiple of 8). */
FA_INLINE float kv_load1(const void *row, int32_t e, const int dt) {
  if (dt == FA_F32) return ((const float *)row)[e];
  const v128_t h = wasm_i32x4_splat(((const uint16_t *)row)[e]);
  const v128_t v = wasm_i32x4_shl(h, 16);
  return wasm_f32x4_extract_lane(dt == FA_BF16 ? v : fa_f16_widen_hi(v), 0); /* FA_F16F: the same */
}

#endif
