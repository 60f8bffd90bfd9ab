/*
 * The element-wise and per-row model ops (@fa/core ops/layer-ops.ts, src/model-ops.ts): gelu in
 * both forms and its gradient, layerNorm forward and backward, softmax cross-entropy forward and
 * backward, the AdamW update, the sum of rows (a bias's gradient) and the bias epilogue of the
 * product. gelu runs on sixteen-lane generic vectors (vwide.h: AVX-512 natively), the rest on
 * f32x4 (the native build compiles the same source through csrc/native/wasm_simd128.h); a row's reductions run in f32 lanes, the sums across rows (dweight,
 * dbias, the row sum) and the total loss in float64. Arguments are checked by the caller
 * (src/model-ops.ts); any n, rows, cols >= 0 work, the ragged ends go through a padded vector.
 *
 * gelu 'none' needs Φ(v) = erfc(-v/√2)/2: erfc(z) = t·e^(-z² + P(t)), t = 1/(1 + z/2), a
 * Chebyshev fit with relative error below 1.2e-7 for every z >= 0 (Numerical Recipes' erfcc), so
 * the left tail keeps its relative accuracy; Φ(v) = 1 - erfc(z)/2 for v >= 0.
 */
#include <stddef.h>
#include "fa.h"
#include "philox.h"
#include "vmath.h"
#include "vwide.h"

#define SQRT1_2 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f
#define TANH_C 0.79788456080286536f

/* Φ(v) on sixteen lanes (vwide.h): the erfc fit above, its sign mirrored for v >= 0. */
FA_INLINE vf16 normal_cdf(vf16 v) {
  const vf16 z = vf16_abs(v) * (vf16)SQRT1_2;
  const vf16 t = (vf16)1.0f / VF16_FMA(z, (vf16)0.5f, (vf16)1.0f);
  vf16 p = VF16_FMA(t, (vf16)0.17087277f, (vf16)-0.82215223f);
  p = VF16_FMA(p, t, (vf16)1.48851587f);
  p = VF16_FMA(p, t, (vf16)-1.13520398f);
  p = VF16_FMA(p, t, (vf16)0.27886807f);
  p = VF16_FMA(p, t, (vf16)-0.18628806f);
  p = VF16_FMA(p, t, (vf16)0.09678418f);
  p = VF16_FMA(p, t, (vf16)0.37409196f);
  p = VF16_FMA(p, t, (vf16)1.00002368f);
  p = VF16_FMA(p, t, (vf16)-1.26551223f);
  /* -z² + P: at z = 0 P is 3e-8 above 0, where e^x stays exact to an ulp */
  const vf16 half_erfc = (vf16)0.5f * (t * vf16_exp(p - z * z));
  return vf16_select(v < (vf16)0.0f, half_erfc, (vf16)1.0f - half_erfc);
}

FA_INLINE vf16 gelu16(vf16 v, int32_t tanh_form) {
  if (tanh_form) {
    const vf16 u = (vf16)TANH_C * VF16_FMA((vf16)0.044715f * v, v * v, v);
    return ((vf16)0.5f * v) * ((vf16)1.0f + vf16_tanh(u));
  }
  return v * normal_cdf(v);
}

FA_INLINE vf16 gelu_grad16(vf16 v, int32_t tanh_form) {
  const vf16 v2 = v * v;
  if (tanh_form) {
    const vf16 t = vf16_tanh((vf16)TANH_C * VF16_FMA((vf16)0.044715f * v, v2, v));
    const vf16 du = (vf16)TANH_C * VF16_FMA((vf16)(3 * 0.044715f), v2, (vf16)1.0f);
    /* 0.5 (1 + t) + 0.5 v sech²(u) u' */
    return (vf16)0.5f * VF16_FMA(v * ((vf16)1.0f - t * t), du, (vf16)1.0f + t);
  }
  const vf16 pdf = (vf16)INV_SQRT_2PI * vf16_exp_le0((vf16)-0.5f * v2);
  return VF16_FMA(v, pdf, normal_cdf(v));
}

/* The last n % 4 values through a padded vector. */
FA_INLINE v128_t load_tail(const float *p, int32_t k) {
  float b[4] = {0, 0, 0, 0};
  for (int32_t i = 0; i < k; i++) b[i] = p[i];
  return wasm_v128_load(b);
}
FA_INLINE void store_tail(float *p, v128_t v, int32_t k) {
  float b[4];
  wasm_v128_store(b, v);
  for (int32_t i = 0; i < k; i++) p[i] = b[i];
}

FA_EXPORT(fa_gelu_f32)
void fa_gelu_f32(const float *x, float *y, int32_t n, int32_t tanh_form) {
  int32_t i = 0;
  for (; i + W16 <= n; i += W16) vf16_store(y + i, gelu16(vf16_load(x + i), tanh_form));
  if (i < n) vf16_store_part(y + i, gelu16(vf16_load_part(x + i, n - i), tanh_form), n - i);
}

FA_EXPORT(fa_gelu_backward_f32)
void fa_gelu_backward_f32(const float *x, const float *dy, float *dx, int32_t n, int32_t tanh_form, int32_t accumulate) {
  int32_t i = 0;
  for (; i + W16 <= n; i += W16) {
    vf16 d = vf16_load(dy + i) * gelu_grad16(vf16_load(x + i), tanh_form);
    if (accumulate) d += vf16_load(dx + i);
    vf16_store(dx + i, d);
  }
  if (i < n) {
    const int32_t k = n - i;
    vf16 d = vf16_load_part(dy + i, k) * gelu_grad16(vf16_load_part(x + i, k), tanh_form);
    if (accumulate) d += vf16_load_part(dx + i, k);
    vf16_store_part(dx + i, d, k);
  }
}

/* Σ x[0..n) in f32 lanes. */
static float row_sum(const float *x, int32_t n) {
  v128_t s0 = VSPLAT(0), s1 = VSPLAT(0);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = wasm_f32x4_add(s0, wasm_v128_load(x + i));
    s1 = wasm_f32x4_add(s1, wasm_v128_load(x + i + 4));
  }
  if (i + 4 <= n) s0 = wasm_f32x4_add(s0, wasm_v128_load(x + i)), i += 4;
  if (i < n) s1 = wasm_f32x4_add(s1, load_tail(x + i, n - i));
  return fa_hsum(wasm_f32x4_add(s0, s1));
}

/*
 * Σ (x - mu0) and Σ (x - mu0)² in f32 lanes around a first estimate of the mean: the deviations
 * are small, so mu0 + Σ(x - mu0)/n and the variance stay exact for rows far from zero, where an
 * f32 mean alone is off by an ulp of the row's magnitude.
 */
static void row_dev(const float *x, int32_t n, float mu0, float *s1, float *s2) {
  const v128_t m = VSPLAT(mu0);
  v128_t a = VSPLAT(0), q = VSPLAT(0);
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t d = wasm_f32x4_sub(wasm_v128_load(x + i), m);
    a = wasm_f32x4_add(a, d);
    q = VFMA(d, d, q);
  }
  float ra = fa_hsum(a), rq = fa_hsum(q);
  for (; i < n; i++) ra += x[i] - mu0, rq += (x[i] - mu0) * (x[i] - mu0);
  *s1 = ra, *s2 = rq;
}

FA_EXPORT(fa_layer_norm_f32)
void fa_layer_norm_f32(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd, int32_t rows, int32_t cols, float eps) {
  for (int32_t r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * cols;
    float *yr = y + (size_t)r * cols;
    const float mu0 = row_sum(xr, cols) / (float)cols;
    float s1, s2;
    row_dev(xr, cols, mu0, &s1, &s2);
    const double dm = (double)s1 / cols, var = (double)s2 / cols - dm * dm;
    const float rs = (float)(1.0 / __builtin_elementwise_sqrt((var > 0 ? var : 0) + (double)eps));
    /* x - mean as (x - mu0) - dm: the mean itself is not a float, its two parts are */
    const float dmf = (float)dm;
    mean[r] = (float)((double)mu0 + dm);
    rstd[r] = rs;
    const v128_t vm = VSPLAT(mu0), vd = VSPLAT(dmf), vr = VSPLAT(rs);
    int32_t i = 0;
    for (; i + 4 <= cols; i += 4) {
      v128_t h = wasm_f32x4_mul(wasm_f32x4_sub(wasm_f32x4_sub(wasm_v128_load(xr + i), vm), vd), vr);
      if (w) h = wasm_f32x4_mul(h, wasm_v128_load(w + i));
      if (b) h = wasm_f32x4_add(h, wasm_v128_load(b + i));
      wasm_v128_store(yr + i, h);
    }
    for (; i < cols; i++) yr[i] = ((xr[i] - mu0) - dmf) * rs * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
  }
}

/*
 * dx = rstd (d - mean(d) - h mean(d h)), d = dy w, h = (x - mu) rstd; dweight = Σ_rows dy h,
 * dbias = Σ_rows dy. ws: 2 cols doubles (the sums across rows). Any of dx, dw, db may be 0.
 */
FA_EXPORT(fa_layer_norm_backward_f32)
void fa_layer_norm_backward_f32(const float *x, const float *mean, const float *rstd, const float *w, const float *dy, float *dx, float *dw, float *db,
                                int32_t rows, int32_t cols, double *ws) {
  double *aw = ws, *ab = ws + cols;
  for (int32_t i = 0; i < 2 * cols; i++) ws[i] = 0;
  for (int32_t r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * cols, *gr = dy + (size_t)r * cols;
    const float mu = mean[r], rs = rstd[r];
    const v128_t vm = VSPLAT(mu), vr = VSPLAT(rs);
    v128_t s1 = VSPLAT(0), s2 = VSPLAT(0);
    int32_t i = 0;
    for (; i + 4 <= cols; i += 4) {
      const v128_t h = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(xr + i), vm), vr);
      const v128_t g = wasm_v128_load(gr + i);
      const v128_t d = w ? wasm_f32x4_mul(g, wasm_v128_load(w + i)) : g;
      s1 = wasm_f32x4_add(s1, d);
      s2 = VFMA(d, h, s2);
    }
    float t1 = fa_hsum(s1), t2 = fa_hsum(s2);
    for (; i < cols; i++) {
      const float h = (xr[i] - mu) * rs, d = gr[i] * (w ? w[i] : 1.0f);
      t1 += d;
      t2 += d * h;
    }
    if (dw || db) {
      for (int32_t j = 0; j < cols; j++) {
        aw[j] += (double)gr[j] * (double)((xr[j] - mu) * rs);
        ab[j] += (double)gr[j];
      }
    }
    if (dx) {
      float *dr = dx + (size_t)r * cols;
      const float m1 = t1 / (float)cols, m2 = t2 / (float)cols;
      const v128_t vm1 = VSPLAT(m1), vm2 = VSPLAT(m2);
      for (i = 0; i + 4 <= cols; i += 4) {
        const v128_t h = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(xr + i), vm), vr);
        const v128_t g = wasm_v128_load(gr + i);
        const v128_t d = w ? wasm_f32x4_mul(g, wasm_v128_load(w + i)) : g;
        wasm_v128_store(dr + i, wasm_f32x4_mul(vr, wasm_f32x4_sub(wasm_f32x4_sub(d, vm1), wasm_f32x4_mul(h, vm2))));
      }
      for (; i < cols; i++) {
        const float h = (xr[i] - mu) * rs, d = gr[i] * (w ? w[i] : 1.0f);
        dr[i] = rs * (d - m1 - h * m2);
      }
    }
  }
  for (int32_t j = 0; j < cols; j++) {
    if (dw) dw[j] = (float)aw[j];
    if (db) db[j] = (float)ab[j];
  }
}

/* max of a row (pmax lanes; a NaN logit shows up through the sum of exponentials). */
static float row_max(const float *x, int32_t n) {
  v128_t m = VSPLAT(-FA_INF);
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) m = wasm_f32x4_pmax(m, wasm_v128_load(x + i));
  float r = fa_hmax(m);
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

/* Σ e^(x - m) over a row, x - m <= 0. */
static float row_sum_exp(const float *x, int32_t n, float m) {
  const v128_t vm = VSPLAT(m);
  v128_t s = VSPLAT(0);
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) s = wasm_f32x4_add(s, fa_vexp_le0(wasm_f32x4_sub(wasm_v128_load(x + i), vm)));
  if (i < n) {
    /* padding lanes hold -inf: e^-inf = 0 */
    float b[4] = {-FA_INF, -FA_INF, -FA_INF, -FA_INF};
    for (int32_t k = 0; i + k < n; k++) b[k] = x[i + k];
    s = wasm_f32x4_add(s, fa_vexp_le0(wasm_f32x4_sub(wasm_v128_load(b), vm)));
  }
  return fa_hsum(s);
}

/* Writes each row's logsumexp (0 on ignored rows); returns the counted rows' summed loss. */
FA_EXPORT(fa_cross_entropy_f32)
double fa_cross_entropy_f32(const float *logits, const int32_t *targets, float *lse, int32_t rows, int32_t classes, int32_t ignore) {
  double loss = 0;
  for (int32_t r = 0; r < rows; r++) {
    if (targets[r] == ignore) {
      lse[r] = 0;
      continue;
    }
    const float *xr = logits + (size_t)r * classes;
    const float m = row_max(xr, classes);
    const double l = (double)m + fa_log((double)row_sum_exp(xr, classes, m));
    lse[r] = (float)l;
    loss += l - (double)xr[targets[r]];
  }
  return loss;
}

FA_EXPORT(fa_cross_entropy_backward_f32)
void fa_cross_entropy_backward_f32(const float *logits, const float *lse, const int32_t *targets, float *dlogits, int32_t rows, int32_t classes, int32_t ignore, float scale) {
  const v128_t vs = VSPLAT(scale);
  for (int32_t r = 0; r < rows; r++) {
    const float *xr = logits + (size_t)r * classes;
    float *gr = dlogits + (size_t)r * classes;
    if (targets[r] == ignore) {
      for (int32_t i = 0; i < classes; i++) gr[i] = 0;
      continue;
    }
    const v128_t vl = VSPLAT(lse[r]);
    int32_t i = 0;
    for (; i + 4 <= classes; i += 4) wasm_v128_store(gr + i, wasm_f32x4_mul(vs, fa_vexp_le0(wasm_f32x4_sub(wasm_v128_load(xr + i), vl))));
    if (i < classes) store_tail(gr + i, wasm_f32x4_mul(vs, fa_vexp_le0(wasm_f32x4_sub(load_tail(xr + i, classes - i), vl))), classes - i);
    const int32_t t = targets[r];
    gr[t] = scale * (fa_exp1(xr[t] - lse[r]) - 1.0f);
  }
}

/*
 * AdamW in place: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g², p = p decay - step_size m /
 * (√v inv_sqrt_bc2 + eps), with decay = 1 - lr wd, step_size = lr / (1 - b1^t) and inv_sqrt_bc2
 * = 1/√(1 - b2^t) formed by the caller in float64.
 */
FA_EXPORT(fa_adamw_f32)
void fa_adamw_f32(float *p, const float *g, float *m, float *v, int32_t n, float b1, float b2, float eps, float decay, float step_size, float inv_sqrt_bc2) {
  const v128_t vb1 = VSPLAT(b1), vc1 = VSPLAT(1.0f - b1), vb2 = VSPLAT(b2), vc2 = VSPLAT(1.0f - b2);
  const v128_t ve = VSPLAT(eps), vd = VSPLAT(decay), vss = VSPLAT(step_size), vib = VSPLAT(inv_sqrt_bc2);
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const v128_t gi = wasm_v128_load(g + i);
    const v128_t mi = VFMA(vb1, wasm_v128_load(m + i), wasm_f32x4_mul(vc1, gi));
    const v128_t vi = VFMA(vb2, wasm_v128_load(v + i), wasm_f32x4_mul(vc2, wasm_f32x4_mul(gi, gi)));
    wasm_v128_store(m + i, mi);
    wasm_v128_store(v + i, vi);
    const v128_t den = VFMA(wasm_f32x4_sqrt(vi), vib, ve);
    wasm_v128_store(p + i, wasm_f32x4_sub(wasm_f32x4_mul(wasm_v128_load(p + i), vd), wasm_f32x4_div(wasm_f32x4_mul(vss, mi), den)));
  }
  for (; i < n; i++) {
    const float mi = b1 * m[i] + (1.0f - b1) * g[i], vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (__builtin_elementwise_sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

/*
 * out[c] = Σ_r x[r cols + c] (+= out with accumulate). Rows are summed in f32 lanes in blocks of
 * 64, each block's sums added into float64 (ws: cols floats then cols doubles, 8-byte aligned
 * after the floats: the caller passes 12 cols + 8 bytes).
 */
#define SUM_BLOCK 64
FA_EXPORT(fa_sum_rows_f32)
void fa_sum_rows_f32(const float *x, float *out, int32_t rows, int32_t cols, int32_t accumulate, float *ws) {
  float *part = ws;
  double *acc = (double *)(((uintptr_t)(ws + cols) + 7) & ~(uintptr_t)7);
  for (int32_t j = 0; j < cols; j++) acc[j] = accumulate ? (double)out[j] : 0.0;
  for (int32_t r0 = 0; r0 < rows; r0 += SUM_BLOCK) {
    const int32_t r1 = fa_min(rows, r0 + SUM_BLOCK);
    for (int32_t j = 0; j < cols; j++) part[j] = 0;
    for (int32_t r = r0; r < r1; r++) {
      const float *xr = x + (size_t)r * cols;
      int32_t j = 0;
      for (; j + 4 <= cols; j += 4) wasm_v128_store(part + j, wasm_f32x4_add(wasm_v128_load(part + j), wasm_v128_load(xr + j)));
      for (; j < cols; j++) part[j] += xr[j];
    }
    for (int32_t j = 0; j < cols; j++) acc[j] += (double)part[j];
  }
  for (int32_t j = 0; j < cols; j++) out[j] = (float)acc[j];
}

/* c[r][j] += bias[j]: the product's bias epilogue. */
FA_EXPORT(fa_add_bias_f32)
void fa_add_bias_f32(float *c, const float *bias, int32_t m, int32_t n) {
  for (int32_t r = 0; r < m; r++) {
    float *cr = c + (size_t)r * n;
    int32_t j = 0;
    for (; j + 4 <= n; j += 4) wasm_v128_store(cr + j, wasm_f32x4_add(wasm_v128_load(cr + j), wasm_v128_load(bias + j)));
    for (; j < n; j++) cr[j] += bias[j];
  }
}

/* RMSNorm: y = x rstd w, rstd = 1/sqrt(mean(x^2) + eps) (LLaMA's). */
FA_EXPORT(fa_rms_norm_f32)
void fa_rms_norm_f32(const float *x, const float *w, float *y, float *rstd, int32_t rows, int32_t cols, float eps) {
  for (int32_t r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * cols;
    float *yr = y + (size_t)r * cols;
    v128_t q = VSPLAT(0);
    int32_t i = 0;
    for (; i + 4 <= cols; i += 4) {
      const v128_t v = wasm_v128_load(xr + i);
      q = VFMA(v, v, q);
    }
    float s = fa_hsum(q);
    for (; i < cols; i++) s += xr[i] * xr[i];
    const float rs = (float)(1.0 / __builtin_elementwise_sqrt((double)s / cols + (double)eps));
    rstd[r] = rs;
    const v128_t vr = VSPLAT(rs);
    for (i = 0; i + 4 <= cols; i += 4) {
      v128_t h = wasm_f32x4_mul(wasm_v128_load(xr + i), vr);
      if (w) h = wasm_f32x4_mul(h, wasm_v128_load(w + i));
      wasm_v128_store(yr + i, h);
    }
    for (; i < cols; i++) yr[i] = xr[i] * rs * (w ? w[i] : 1.0f);
  }
}

/* dx = rstd (d - h mean(d h)), d = dy w, h = x rstd; dweight = sum over rows of dy h (ws: cols doubles). */
FA_EXPORT(fa_rms_norm_backward_f32)
void fa_rms_norm_backward_f32(const float *x, const float *rstd, const float *w, const float *dy, float *dx, float *dw, int32_t rows, int32_t cols, double *ws) {
  for (int32_t j = 0; j < cols; j++) ws[j] = 0;
  for (int32_t r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * cols, *gr = dy + (size_t)r * cols;
    const float rs = rstd[r];
    const v128_t vr = VSPLAT(rs);
    v128_t s = VSPLAT(0);
    int32_t i = 0;
    for (; i + 4 <= cols; i += 4) {
      const v128_t g = wasm_v128_load(gr + i);
      const v128_t d = w ? wasm_f32x4_mul(g, wasm_v128_load(w + i)) : g;
      s = VFMA(d, wasm_f32x4_mul(wasm_v128_load(xr + i), vr), s);
    }
    float t = fa_hsum(s);
    for (; i < cols; i++) t += gr[i] * (w ? w[i] : 1.0f) * xr[i] * rs;
    if (dw)
      for (int32_t j = 0; j < cols; j++) ws[j] += (double)gr[j] * (double)(xr[j] * rs);
    if (dx) {
      float *dr = dx + (size_t)r * cols;
      const float m = t / (float)cols;
      const v128_t vk = VSPLAT(rs * m);
      for (i = 0; i + 4 <= cols; i += 4) {
        const v128_t g = wasm_v128_load(gr + i);
        const v128_t d = w ? wasm_f32x4_mul(g, wasm_v128_load(w + i)) : g;
        /* rstd (d - x rstd m) */
        wasm_v128_store(dr + i, wasm_f32x4_mul(vr, wasm_f32x4_sub(d, wasm_f32x4_mul(wasm_v128_load(xr + i), vk))));
      }
      for (; i < cols; i++) dr[i] = rs * (gr[i] * (w ? w[i] : 1.0f) - xr[i] * rs * m);
    }
  }
  if (dw)
    for (int32_t j = 0; j < cols; j++) dw[j] = (float)ws[j];
}

/* sigma(v) = 1/(1 + e^-v) on sixteen lanes; e^-v saturates at e^88 (sigma ~ 6e-39 there). */
FA_INLINE vf16 sigmoid16(vf16 v) { return (vf16)1.0f / ((vf16)1.0f + vf16_exp(-v)); }

/* y = silu(x) (times gate): SiLU, or SwiGLU's product. y may be x or gate. */
FA_EXPORT(fa_silu_f32)
void fa_silu_f32(const float *x, const float *gate, float *y, int32_t n) {
  int32_t i = 0;
  for (; i + W16 <= n; i += W16) {
    const vf16 v = vf16_load(x + i);
    vf16 r = v * sigmoid16(v);
    if (gate) r *= vf16_load(gate + i);
    vf16_store(y + i, r);
  }
  if (i < n) {
    const int32_t k = n - i;
    const vf16 v = vf16_load_part(x + i, k);
    vf16 r = v * sigmoid16(v);
    if (gate) r *= vf16_load_part(gate + i, k);
    vf16_store_part(y + i, r, k);
  }
}

/* dx (+)= dy gate silu'(x), silu'(v) = s (1 + v (1 - s)); dgate = dy silu(x) when asked. */
FA_EXPORT(fa_silu_backward_f32)
void fa_silu_backward_f32(const float *x, const float *gate, const float *dy, float *dx, float *dgate, int32_t n, int32_t accumulate) {
  for (int32_t i = 0; i < n; i += W16) {
    const int32_t k = n - i < W16 ? n - i : W16;
    const int full = k == W16;
    const vf16 v = full ? vf16_load(x + i) : vf16_load_part(x + i, k);
    const vf16 g = full ? vf16_load(dy + i) : vf16_load_part(dy + i, k);
    const vf16 s = sigmoid16(v);
    vf16 d = g * s * ((vf16)1.0f + v * ((vf16)1.0f - s));
    if (gate) d *= full ? vf16_load(gate + i) : vf16_load_part(gate + i, k);
    if (accumulate) d += full ? vf16_load(dx + i) : vf16_load_part(dx + i, k);
    if (dgate) {
      if (full) vf16_store(dgate + i, g * v * s);
      else vf16_store_part(dgate + i, g * v * s, k);
    }
    if (full) vf16_store(dx + i, d);
    else vf16_store_part(dx + i, d, k);
  }
}

/*
 * Rotary position embedding of x [batch, seq, heads, dim] into y (y may be x): the first
 * rotary_dim dims of each head at position offset + t, pairs (m, m + rd/2) or (2m, 2m + 1)
 * (interleaved); inverse rotates by -theta (the backward). The rest of each head is copied.
 */
FA_EXPORT(fa_rotary_f32)
void fa_rotary_f32(const float *x, float *y, const float *cos_t, const float *sin_t, int32_t batch, int32_t seq, int32_t heads, int32_t dim, int32_t rotary_dim,
                   int32_t offset, int32_t interleaved, int32_t inverse) {
  const int32_t half = rotary_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for (int32_t b = 0; b < batch; b++) {
    for (int32_t t = 0; t < seq; t++) {
      const float *co = cos_t + (size_t)(offset + t) * half, *si = sin_t + (size_t)(offset + t) * half;
      for (int32_t h = 0; h < heads; h++) {
        const size_t o = (((size_t)b * seq + t) * heads + h) * dim;
        const float *xr = x + o;
        float *yr = y + o;
        if (interleaved) {
          for (int32_t m = 0; m < half; m++) {
            const float xa = xr[2 * m], xb = xr[2 * m + 1], c = co[m], s = sign * si[m];
            yr[2 * m] = xa * c - xb * s;
            yr[2 * m + 1] = xb * c + xa * s;
          }
        } else {
          int32_t m = 0;
          const v128_t vs = VSPLAT(sign);
          for (; m + 4 <= half; m += 4) {
            const v128_t xa = wasm_v128_load(xr + m), xb = wasm_v128_load(xr + half + m);
            const v128_t c = wasm_v128_load(co + m), s = wasm_f32x4_mul(vs, wasm_v128_load(si + m));
            wasm_v128_store(yr + m, wasm_f32x4_sub(wasm_f32x4_mul(xa, c), wasm_f32x4_mul(xb, s)));
            wasm_v128_store(yr + half + m, wasm_f32x4_add(wasm_f32x4_mul(xb, c), wasm_f32x4_mul(xa, s)));
          }
          for (; m < half; m++) {
            const float xa = xr[m], xb = xr[half + m], c = co[m], s = sign * si[m];
            yr[m] = xa * c - xb * s;
            yr[half + m] = xb * c + xa * s;
          }
        }
        if (yr != xr)
          for (int32_t j = rotary_dim; j < dim; j++) yr[j] = xr[j];
      }
    }
  }
}

/*
 * dropout (core's layer-ops.ts, philox.ts dropoutKeepElements): y (+)= x * scale where element e
 * is kept, 0 where dropped; e's word is word e % 4 of Philox(counter (e / 4, 0, 0xffffffff,
 * offset), key (k0, k1)), dropped iff below the threshold. n < 2^31, so counter word 1 is 0.
 */
FA_EXPORT(fa_dropout_f32)
void fa_dropout_f32(const float *x, float *y, int32_t n, uint32_t threshold, uint32_t k0, uint32_t k1, uint32_t offset, float scale, int32_t accumulate) {
  for (int32_t q = 0; q * 4 < n; q++) {
    uint32_t w[4] = {(uint32_t)q, 0u, 0xffffffffu, offset};
    fa_philox4x32(w, k0, k1);
    const int32_t e0 = q * 4, e1 = e0 + 4 < n ? e0 + 4 : n;
    for (int32_t e = e0; e < e1; e++) {
      const float v = w[e - e0] >= threshold ? x[e] * scale : 0.0f;
      y[e] = accumulate ? y[e] + v : v;
    }
  }
}
