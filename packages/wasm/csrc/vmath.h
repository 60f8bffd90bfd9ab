/*
 * Vector math on f32x4: multiply-add, exp, tanh, horizontal max/sum, and a float64 log for the
 * per-row LSE. Accuracy (test/kernels.test.ts): exp within 3 ulp on [-87.3, 88], 0 below, e^88
 * above (NaN stays NaN); tanh within 4 ulp (odd polynomial below 0.625, 1 - 2/(e^2x + 1) above,
 * where the subtraction loses at most one bit). The kit's float32 rule (1e-5 of the norm) leaves
 * two orders of magnitude to spare.
 */
#ifndef FA_VMATH_H
#define FA_VMATH_H

#include <wasm_simd128.h>
#include "fa.h"

/* a*b + c: one rounding where the runtime fuses relaxed_madd (x86 FMA3, ARM), two otherwise. */
#ifdef FA_RELAXED
#define VFMA(a, b, c) wasm_f32x4_relaxed_madd((a), (b), (c))
#else
#define VFMA(a, b, c) wasm_f32x4_add(wasm_f32x4_mul((a), (b)), (c))
#endif

#define VSPLAT(x) wasm_f32x4_splat(x)
#define FA_INF __builtin_inff()

/*
 * e^x = 2^n * e^t with n = round(x * log2 e), t = x - n ln2, e^t by a degree-5 polynomial on
 * [-ln2/2, ln2/2]. The magic constant 1.5*2^23 + 127 rounds x log2 e to an integer in the low
 * mantissa bits with the exponent bias already added, so shifting them into the exponent field
 * gives 2^n. ln2 is split in two (Cody-Waite): n ln2_hi is exact, so t is exact to an ulp whether
 * or not the multiply-add is fused (one constant costs up to 4e-6 relative without fusion:
 * test/kernels.test.ts). Below -87.34 (2^n subnormal) the result is flushed to 0, which also
 * catches x = -inf; NaN fails every comparison and stays NaN.
 * For x <= 0 (or -inf, NaN): the online softmax's e^(s - max).
 */
FA_INLINE v128_t fa_vexp_le0(v128_t x) {
  const v128_t log2e = VSPLAT(0x1.715476p+0f);
  const v128_t magic = VSPLAT(0x1.8000FEp23f);
  const v128_t mln2hi = VSPLAT(-0x1.62E400p-1f);
  const v128_t mln2lo = VSPLAT(-0x1.7F7D1Cp-20f);
  const v128_t c5 = VSPLAT(0x1.0F9F9Cp-7f);
  const v128_t c4 = VSPLAT(0x1.573A1Ap-5f);
  const v128_t c3 = VSPLAT(0x1.555A80p-3f);
  const v128_t c2 = VSPLAT(0x1.FFFDC6p-2f);
  const v128_t c1 = VSPLAT(0x1.FFFFF6p-1f);
  const v128_t lo = VSPLAT(-0x1.5D589Ep6f);
  v128_t z = VFMA(x, log2e, magic);
  v128_t s = wasm_i32x4_shl(z, 23);
  v128_t n = wasm_f32x4_sub(z, magic);
  v128_t t = VFMA(n, mln2hi, x);
  t = VFMA(n, mln2lo, t);
  v128_t p = VFMA(c5, t, c4);
  p = VFMA(p, t, c3);
  p = VFMA(p, t, c2);
  p = VFMA(p, t, c1);
  t = wasm_f32x4_mul(t, s);
  v128_t f = VFMA(t, p, s);
  return wasm_v128_andnot(f, wasm_f32x4_lt(x, lo));
}

/* e^x for any x: above 88, e^88 (2^127: n + 127 must stay below 255). pmin keeps a NaN x. */
FA_INLINE v128_t fa_vexp(v128_t x) {
  return fa_vexp_le0(wasm_f32x4_pmin(x, VSPLAT(88.0f)));
}

/*
 * tanh: |x| < 0.625: x + x^3 P(x^2) (P fitted for relative error, 1.8 ulp in float32);
 * otherwise sign(x) (1 - 2 / (e^(2|x|) + 1)), which rounds to exactly 1 past |x| = 9. NaN in,
 * NaN out.
 */
FA_INLINE v128_t fa_vtanh(v128_t x) {
  const v128_t p0 = VSPLAT(-0x1.555532p-2f), p1 = VSPLAT(0x1.110724p-3f), p2 = VSPLAT(-0x1.b83c04p-5f);
  const v128_t p3 = VSPLAT(0x1.5224b4p-6f), p4 = VSPLAT(-0x1.75da38p-8f);
  const v128_t sign = VSPLAT(-0.0f);
  v128_t ax = wasm_f32x4_abs(x);
  v128_t z = wasm_f32x4_mul(x, x);
  v128_t p = VFMA(p4, z, p3);
  p = VFMA(p, z, p2);
  p = VFMA(p, z, p1);
  p = VFMA(p, z, p0);
  v128_t small = VFMA(wasm_f32x4_mul(x, z), p, x);
  v128_t e = fa_vexp(wasm_f32x4_add(ax, ax));
  v128_t big = wasm_f32x4_sub(VSPLAT(1.0f), wasm_f32x4_div(VSPLAT(2.0f), wasm_f32x4_add(e, VSPLAT(1.0f))));
  big = wasm_v128_or(big, wasm_v128_and(x, sign));
  return wasm_v128_bitselect(small, big, wasm_f32x4_lt(ax, VSPLAT(0.625f)));
}

/*
 * Largest lane; NaN if any lane is NaN (f32x4.max propagates NaN). Inside loops the kernels use
 * f32x4.pmax instead (one maxps on x86; f32x4.max, which must propagate NaN, costs seven times
 * as much in V8: KERNEL_NOTES.md), and find a NaN it skipped through the exponentials.
 */
FA_INLINE float fa_hmax(v128_t v) {
  v = wasm_f32x4_max(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_f32x4_max(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_f32x4_extract_lane(v, 0);
}

FA_INLINE float fa_hsum(v128_t v) {
  v = wasm_f32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_f32x4_add(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_f32x4_extract_lane(v, 0);
}

/* e^x for one float (the online softmax's rescale factor). */
FA_INLINE float fa_exp1(float x) { return wasm_f32x4_extract_lane(fa_vexp(VSPLAT(x)), 0); }

/*
 * Natural log in float64 for x > 0 (the row sum l >= 1 of a row that saw a key): x = 2^e m with
 * m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1)/(m + 1), |s| <= 0.172, ten odd
 * terms (the next is below 1e-17 of the result). NaN and +inf are returned as they are.
 */
static inline double fa_log(double x) {
  if (!(x < __builtin_inf()) || x <= 0) return x <= 0 ? -__builtin_inf() : x;
  union { double d; uint64_t u; } b = {x};
  int32_t e = (int32_t)((b.u >> 52) & 0x7ff) - 1023;
  b.u = (b.u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL; /* m in [1, 2) */
  double m = b.d;
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e += 1;
  }
  double s = (m - 1) / (m + 1), s2 = s * s, term = s, sum = 0;
  for (int k = 1; k <= 19; k += 2) {
    sum += term / k;
    term *= s2;
  }
  return 2 * sum + e * 0.6931471805599453;
}

#endif
