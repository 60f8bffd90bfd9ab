/*
 * The WebAssembly SIMD128 intrinsics the kernels use, for the native x86-64 build (build-native.sh
 * puts this folder first on the include path, in place of clang's own wasm_simd128.h). Each one
 * has the WebAssembly instruction's meaning, lane for lane, NaN and signed zero included, so the
 * kernels in csrc/ are one source for both targets; the compiler lowers the generic vector code to
 * SSE/AVX. Only what csrc/ calls is here: a new intrinsic in a kernel fails the native build until
 * it is added.
 *
 * Where WebAssembly leaves a choice the way V8 lowers it on x86 is taken: pmin/pmax are one
 * minps/maxps, and relaxed_madd fuses (vfmadd).
 */
#ifndef FA_NATIVE_WASM_SIMD128_H
#define FA_NATIVE_WASM_SIMD128_H

#include <stdint.h>
#include <immintrin.h>

typedef int32_t v128_t __attribute__((__vector_size__(16), __aligned__(16)));

typedef float fa_f32x4 __attribute__((__vector_size__(16), __aligned__(16)));
typedef double fa_f64x2 __attribute__((__vector_size__(16), __aligned__(16)));
typedef int32_t fa_i32x4 __attribute__((__vector_size__(16), __aligned__(16)));
typedef uint32_t fa_u32x4 __attribute__((__vector_size__(16), __aligned__(16)));
typedef int16_t fa_i16x8 __attribute__((__vector_size__(16), __aligned__(16)));
typedef uint16_t fa_u16x8 __attribute__((__vector_size__(16), __aligned__(16)));
typedef int64_t fa_i64x2 __attribute__((__vector_size__(16), __aligned__(16)));
typedef int16_t fa_i16x4 __attribute__((__vector_size__(8)));
typedef uint16_t fa_u16x4 __attribute__((__vector_size__(8)));

#define FA_SIMD static inline __attribute__((always_inline, nodebug))

/* Unaligned, may-alias memory access (what v128.load / v128.store allow). */
struct fa_v128_mem { v128_t v; } __attribute__((__packed__, __may_alias__));
struct fa_u32_mem { uint32_t v; } __attribute__((__packed__, __may_alias__));
struct fa_u64_mem { uint64_t v; } __attribute__((__packed__, __may_alias__));
struct fa_i16x4_mem { fa_i16x4 v; } __attribute__((__packed__, __may_alias__));
struct fa_u16x4_mem { fa_u16x4 v; } __attribute__((__packed__, __may_alias__));

FA_SIMD v128_t wasm_v128_load(const void *p) { return ((const struct fa_v128_mem *)p)->v; }
FA_SIMD void wasm_v128_store(void *p, v128_t a) { ((struct fa_v128_mem *)p)->v = a; }
FA_SIMD v128_t wasm_v128_load32_splat(const void *p) {
  const uint32_t x = ((const struct fa_u32_mem *)p)->v;
  return (v128_t)(fa_u32x4){x, x, x, x};
}
FA_SIMD v128_t wasm_v128_load32_zero(const void *p) { return (v128_t)(fa_u32x4){((const struct fa_u32_mem *)p)->v, 0, 0, 0}; }
FA_SIMD v128_t wasm_v128_load64_zero(const void *p) { return (v128_t)(fa_i64x2){(int64_t)((const struct fa_u64_mem *)p)->v, 0}; }
FA_SIMD v128_t wasm_i32x4_load16x4(const void *p) { return (v128_t)__builtin_convertvector(((const struct fa_i16x4_mem *)p)->v, fa_i32x4); }
FA_SIMD v128_t wasm_u32x4_load16x4(const void *p) { return (v128_t)__builtin_convertvector(((const struct fa_u16x4_mem *)p)->v, fa_u32x4); }
#define wasm_v128_store32_lane(p, a, i) (((struct fa_u32_mem *)(p))->v = (uint32_t)((fa_i32x4)(a))[(i)])

/* constants and lanes */
FA_SIMD v128_t wasm_f32x4_splat(float x) { return (v128_t)(fa_f32x4){x, x, x, x}; }
FA_SIMD v128_t wasm_i32x4_splat(int32_t x) { return (v128_t)(fa_i32x4){x, x, x, x}; }
FA_SIMD v128_t wasm_i16x8_splat(int16_t x) { return (v128_t)(fa_i16x8){x, x, x, x, x, x, x, x}; }
#define wasm_f32x4_const_splat(x) ((v128_t)(fa_f32x4){(x), (x), (x), (x)})
#define wasm_f64x2_const_splat(x) ((v128_t)(fa_f64x2){(x), (x)})
FA_SIMD v128_t wasm_f32x4_make(float a, float b, float c, float d) { return (v128_t)(fa_f32x4){a, b, c, d}; }
FA_SIMD v128_t wasm_i32x4_make(int32_t a, int32_t b, int32_t c, int32_t d) { return (v128_t)(fa_i32x4){a, b, c, d}; }
#define wasm_f32x4_extract_lane(a, i) (((fa_f32x4)(a))[(i)])
#define wasm_f64x2_extract_lane(a, i) (((fa_f64x2)(a))[(i)])
#define wasm_i32x4_extract_lane(a, i) (((fa_i32x4)(a))[(i)])
#define wasm_i32x4_shuffle(a, b, c0, c1, c2, c3) ((v128_t)__builtin_shufflevector((fa_i32x4)(a), (fa_i32x4)(b), c0, c1, c2, c3))
#define wasm_i64x2_shuffle(a, b, c0, c1) ((v128_t)__builtin_shufflevector((fa_i64x2)(a), (fa_i64x2)(b), c0, c1))

/* bitwise */
FA_SIMD v128_t wasm_v128_and(v128_t a, v128_t b) { return a & b; }
FA_SIMD v128_t wasm_v128_or(v128_t a, v128_t b) { return a | b; }
FA_SIMD v128_t wasm_v128_xor(v128_t a, v128_t b) { return a ^ b; }
FA_SIMD v128_t wasm_v128_andnot(v128_t a, v128_t b) { return a & ~b; }
FA_SIMD v128_t wasm_v128_bitselect(v128_t a, v128_t b, v128_t m) { return (a & m) | (b & ~m); }
FA_SIMD int wasm_v128_any_true(v128_t a) { return !_mm_testz_si128((__m128i)a, (__m128i)a); }

/* float32 */
FA_SIMD v128_t wasm_f32x4_add(v128_t a, v128_t b) { return (v128_t)((fa_f32x4)a + (fa_f32x4)b); }
FA_SIMD v128_t wasm_f32x4_sub(v128_t a, v128_t b) { return (v128_t)((fa_f32x4)a - (fa_f32x4)b); }
FA_SIMD v128_t wasm_f32x4_mul(v128_t a, v128_t b) { return (v128_t)((fa_f32x4)a * (fa_f32x4)b); }
FA_SIMD v128_t wasm_f32x4_div(v128_t a, v128_t b) { return (v128_t)((fa_f32x4)a / (fa_f32x4)b); }
FA_SIMD v128_t wasm_f32x4_sqrt(v128_t a) { return (v128_t)_mm_sqrt_ps((__m128)a); }
FA_SIMD v128_t wasm_f32x4_abs(v128_t a) { return a & (v128_t)(fa_u32x4){0x7fffffffu, 0x7fffffffu, 0x7fffffffu, 0x7fffffffu}; }
FA_SIMD v128_t wasm_f32x4_lt(v128_t a, v128_t b) { return (v128_t)((fa_f32x4)a < (fa_f32x4)b); }
FA_SIMD v128_t wasm_f32x4_ne(v128_t a, v128_t b) { return (v128_t)((fa_f32x4)a != (fa_f32x4)b); }
/* pmax(a, b) = a < b ? b : a, pmin(a, b) = b < a ? b : a: maxps/minps return their second operand
 * unless the first compares greater (less). */
FA_SIMD v128_t wasm_f32x4_pmax(v128_t a, v128_t b) { return (v128_t)_mm_max_ps((__m128)b, (__m128)a); }
FA_SIMD v128_t wasm_f32x4_pmin(v128_t a, v128_t b) { return (v128_t)_mm_min_ps((__m128)b, (__m128)a); }
/* f32x4.max: NaN if either lane is NaN, and -0 < +0. */
FA_SIMD v128_t wasm_f32x4_max(v128_t a, v128_t b) {
  const fa_f32x4 x = (fa_f32x4)a, y = (fa_f32x4)b;
  v128_t r = wasm_v128_bitselect(a, b, (v128_t)(x > y));
  r = wasm_v128_bitselect(a & b, r, (v128_t)(x == y)); /* equal: +0 wins over -0 */
  return wasm_v128_bitselect((v128_t)(x + y), r, (v128_t)((x != x) | (y != y)));
}
FA_SIMD v128_t wasm_f32x4_convert_i32x4(v128_t a) { return (v128_t)__builtin_convertvector((fa_i32x4)a, fa_f32x4); }
FA_SIMD v128_t wasm_f32x4_relaxed_madd(v128_t a, v128_t b, v128_t c) { return (v128_t)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c); }

/* float64 */
FA_SIMD v128_t wasm_f64x2_add(v128_t a, v128_t b) { return (v128_t)((fa_f64x2)a + (fa_f64x2)b); }
FA_SIMD v128_t wasm_f64x2_mul(v128_t a, v128_t b) { return (v128_t)((fa_f64x2)a * (fa_f64x2)b); }
FA_SIMD v128_t wasm_f64x2_promote_low_f32x4(v128_t a) {
  return (v128_t)__builtin_convertvector(__builtin_shufflevector((fa_f32x4)a, (fa_f32x4)a, 0, 1), fa_f64x2);
}

/* int32 (shift counts are taken modulo 32, as WebAssembly does) */
FA_SIMD v128_t wasm_i32x4_add(v128_t a, v128_t b) { return (v128_t)((fa_u32x4)a + (fa_u32x4)b); }
FA_SIMD v128_t wasm_i32x4_sub(v128_t a, v128_t b) { return (v128_t)((fa_u32x4)a - (fa_u32x4)b); }
FA_SIMD v128_t wasm_i32x4_shl(v128_t a, uint32_t n) { return (v128_t)((fa_u32x4)a << (n & 31)); }
FA_SIMD v128_t wasm_i32x4_shr(v128_t a, uint32_t n) { return a >> (int32_t)(n & 31); }
FA_SIMD v128_t wasm_u32x4_shr(v128_t a, uint32_t n) { return (v128_t)((fa_u32x4)a >> (n & 31)); }
FA_SIMD v128_t wasm_i32x4_abs(v128_t a) { return (v128_t)_mm_abs_epi32((__m128i)a); }
FA_SIMD v128_t wasm_i32x4_eq(v128_t a, v128_t b) { return (v128_t)(a == b); }
FA_SIMD v128_t wasm_i32x4_lt(v128_t a, v128_t b) { return (v128_t)(a < b); }
FA_SIMD v128_t wasm_i32x4_le(v128_t a, v128_t b) { return (v128_t)(a <= b); }
FA_SIMD v128_t wasm_i32x4_gt(v128_t a, v128_t b) { return (v128_t)(a > b); }
FA_SIMD v128_t wasm_i32x4_ge(v128_t a, v128_t b) { return (v128_t)(a >= b); }

/* int16 */
FA_SIMD v128_t wasm_i16x8_shl(v128_t a, uint32_t n) { return (v128_t)((fa_u16x8)a << (uint16_t)(n & 15)); }
FA_SIMD v128_t wasm_u16x8_max(v128_t a, v128_t b) { return (v128_t)_mm_max_epu16((__m128i)a, (__m128i)b); }
FA_SIMD v128_t wasm_u16x8_ge(v128_t a, v128_t b) { return (v128_t)((fa_u16x8)a >= (fa_u16x8)b); }
/* signed int32 lanes to uint16 with saturation (packusdw) */
FA_SIMD v128_t wasm_u16x8_narrow_i32x4(v128_t a, v128_t b) { return (v128_t)_mm_packus_epi32((__m128i)a, (__m128i)b); }

#endif
