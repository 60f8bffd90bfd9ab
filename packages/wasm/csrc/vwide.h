/*
 * Sixteen-lane float vectors in clang's generic vector extension, for the element-wise model ops
 * (layer_ops.c): the compiler lowers them to one zmm register on x86-64-v4, two ymm on v3, and
 * four v128 in WebAssembly, so one source runs each build at its full width without intrinsics.
 * exp and tanh follow vmath.h's algorithms and constants (same accuracy: exp 3 ulp, tanh 4 ulp).
 * Multiply-adds fuse in the native build (FMA3) and are a multiply and an add in WebAssembly.
 */
#ifndef FA_VWIDE_H
#define FA_VWIDE_H

#include <stdint.h>
#include "fa.h"

/* Every function here is inlined: the psABI of a 64-byte vector argument (AVX2 builds) never applies. */
#pragma clang diagnostic ignored "-Wpsabi"

typedef float vf16 __attribute__((ext_vector_type(16)));
typedef int32_t vi16 __attribute__((ext_vector_type(16)));

#define W16 16

FA_INLINE vf16 vf16_splat(float x) { return (vf16)x; }
FA_INLINE vf16 vf16_load(const float *p) {
  vf16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
FA_INLINE void vf16_store(float *p, vf16 v) { __builtin_memcpy(p, &v, sizeof v); }
/* the first k (< 16) values, the rest 0 / only the first k stored */
FA_INLINE vf16 vf16_load_part(const float *p, int32_t k) {
  float b[W16] = {0};
  for (int32_t i = 0; i < k; i++) b[i] = p[i];
  return vf16_load(b);
}
FA_INLINE void vf16_store_part(float *p, vf16 v, int32_t k) {
  float b[W16];
  vf16_store(b, v);
  for (int32_t i = 0; i < k; i++) p[i] = b[i];
}

#ifdef FA_NATIVE
#define VF16_FMA(a, b, c) __builtin_elementwise_fma((a), (b), (c))
#else
#define VF16_FMA(a, b, c) ((a) * (b) + (c))
#endif

FA_INLINE vf16 vf16_select(vi16 mask, vf16 a, vf16 b) { return (vf16)(((vi16)a & mask) | ((vi16)b & ~mask)); }
FA_INLINE vf16 vf16_abs(vf16 x) { return (vf16)((vi16)x & (vi16)0x7fffffff); }

/* vmath.h's fa_vexp_le0 (x <= 0; also right up to 88): 2^n by the magic constant, degree-5 polynomial. */
FA_INLINE vf16 vf16_exp_le0(vf16 x) {
  const vf16 magic = (vf16)0x1.8000FEp23f;
  const vf16 z = VF16_FMA(x, (vf16)0x1.715476p+0f, magic);
  const vf16 s = (vf16)((vi16)z << 23);
  const vf16 n = z - magic;
  vf16 t = VF16_FMA(n, (vf16)-0x1.62E400p-1f, x);
  t = VF16_FMA(n, (vf16)-0x1.7F7D1Cp-20f, t);
  vf16 p = VF16_FMA((vf16)0x1.0F9F9Cp-7f, t, (vf16)0x1.573A1Ap-5f);
  p = VF16_FMA(p, t, (vf16)0x1.555A80p-3f);
  p = VF16_FMA(p, t, (vf16)0x1.FFFDC6p-2f);
  p = VF16_FMA(p, t, (vf16)0x1.FFFFF6p-1f);
  t = t * s;
  const vf16 f = VF16_FMA(t, p, s);
  return vf16_select(x < (vf16)-0x1.5D589Ep6f, (vf16)0.0f, f); /* NaN compares false and stays */
}

FA_INLINE vf16 vf16_exp(vf16 x) { return vf16_exp_le0(vf16_select(x > (vf16)88.0f, (vf16)88.0f, x)); }

/* vmath.h's fa_vtanh: odd polynomial below 0.625, 1 - 2/(e^2|x| + 1) with the sign above. */
FA_INLINE vf16 vf16_tanh(vf16 x) {
  const vf16 ax = vf16_abs(x), z = x * x;
  vf16 p = VF16_FMA((vf16)-0x1.75da38p-8f, z, (vf16)0x1.5224b4p-6f);
  p = VF16_FMA(p, z, (vf16)-0x1.b83c04p-5f);
  p = VF16_FMA(p, z, (vf16)0x1.110724p-3f);
  p = VF16_FMA(p, z, (vf16)-0x1.555532p-2f);
  const vf16 small = VF16_FMA(x * z, p, x);
  const vf16 e = vf16_exp(ax + ax);
  vf16 big = (vf16)1.0f - (vf16)2.0f / (e + (vf16)1.0f);
  big = (vf16)((vi16)big | ((vi16)x & (vi16)(int32_t)0x80000000));
  return vf16_select(ax < (vf16)0.625f, small, big);
}

#endif
