/*
 * Cache rows in their own dtype, loaded as float32 vectors: f32 as they are; bf16 by a 16-bit
 * shift into the high half; f16 exactly through shifts, a multiply by 2^112 and the inf/NaN
 * exponent. In registers, as the KV-cache products load them (kvcache.c): no decode pass.
 */
#ifndef FA_WIDEN_H
#define FA_WIDEN_H

#include "vmath.h"

enum { FA_F32 = 0, FA_F16 = 1, FA_BF16 = 2 };

/* f16 bits (zero-extended in each 32-bit lane) -> float32, exactly: normals and subnormals by
 * placing the 15 magnitude bits under a float32 exponent and multiplying by 2^112, infinities
 * and NaNs by forcing the exponent to all ones, then the sign. */
FA_INLINE v128_t fa_f16_widen(v128_t h) {
  const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
  const v128_t mag = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7fff)), 13);
  v128_t f = wasm_f32x4_mul(mag, VSPLAT(0x1p112f));
  const v128_t infnan = wasm_i32x4_gt(mag, wasm_i32x4_splat(0x0f7fffff));
  f = wasm_v128_or(f, wasm_v128_and(infnan, wasm_i32x4_splat(0x7f800000)));
  return wasm_v128_or(f, sign);
}

/* Elements [e, e + 8) of a cache row as two f32x4 (dt is a constant at every call site). */
FA_INLINE void kv_load8(const void *row, int32_t e, const int dt, v128_t *lo, v128_t *hi) {
  if (dt == FA_F32) {
    const float *f = (const float *)row + e;
    *lo = wasm_v128_load(f);
    *hi = wasm_v128_load(f + 4);
    return;
  }
  const v128_t x = wasm_v128_load((const uint16_t *)row + e);
  const v128_t a = wasm_u32x4_extend_low_u16x8(x), b = wasm_u32x4_extend_high_u16x8(x);
  if (dt == FA_BF16) {
    *lo = wasm_i32x4_shl(a, 16);
    *hi = wasm_i32x4_shl(b, 16);
  } else {
    *lo = fa_f16_widen(a);
    *hi = fa_f16_widen(b);
  }
}

/* Element e of a cache row as a float (the tails of head dims that are not a multiple of 8). */
FA_INLINE float kv_load1(const void *row, int32_t e, const int dt) {
  if (dt == FA_F32) return ((const float *)row)[e];
  const v128_t h = wasm_i32x4_splat(((const uint16_t *)row)[e]);
  return wasm_f32x4_extract_lane(dt == FA_BF16 ? wasm_i32x4_shl(h, 16) : fa_f16_widen(h), 0);
}

#endif
