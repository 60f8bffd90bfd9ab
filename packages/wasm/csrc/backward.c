/*
 * The backward pass, by recomputation (FlashAttention-2's schedule, as the TypeScript engine's
 * packages/core/src/cpu/backward.ts): one unit is one (batch, kv head) and a contiguous range of
 * its key tiles.
 *
 *   for each key tile:  K^T, V^T packed once;  dK, dV = 0
 *     for each query head of the group, each query tile that sees a key of the tile:
 *       S  = Q K^T -> logits, -inf where masked     f32_mm_nn_set, fa_score_tile
 *       P  = e^(S - lse)                             (0 for a row that sees nothing)
 *       dV += P^T dO                                 f32_mm_tn_acc
 *       dP = dO V^T                                  f32_mm_nn_set
 *       dS = P (dP - Dvec) [(1 - tanh^2) with softcap]  (scale: in Q, and in dQ at the end)
 *       dK += dS^T Q                                 f32_mm_tn_acc
 *       dQ += dS K                                   f32_mm_nn_set, then added into the accumulator
 *     store dK, dV (over the tile's own rows of k and v when they alias: read for the last time)
 *
 * A unit owns its key tiles, so dK and dV have one writer. dQ goes either into the shared float32
 * accumulator (a group's only unit) or into the unit's private one; the engine sums those in a
 * fixed order afterwards (core's reducePrivate), so results never depend on scheduling.
 */
#include "fa.h"
#include "philox.h"
#include "vmath.h"
#include "scores.h"
#include "tileio.h"
#include "gemm.h"

typedef struct {
  float *kt, *vt;   /* [d][bc8], [dv][bc8] */
  float *dk, *dv;   /* [bc8][dp], [bc8][dvp] */
  float *s, *dp, *dcap; /* [br][bc8] */
  float *dq;        /* [br][dp] */
  float *mk, *pd;   /* dropout: the tile's multipliers and P (mask) / (1 - p), [br][bc8] */
} bwd_scratch;

static bwd_scratch bwd_layout(const fa_problem *p, float *base) {
  const int32_t br = p->br, bc8 = fa_bc8(p->bc), d = p->d, dp = fa_dp(d), dv = p->dv_dim, dvp = fa_dp(dv);
  bwd_scratch w;
  w.kt = base;
  w.vt = w.kt + d * bc8;
  w.dk = w.vt + dv * bc8;
  w.dv = w.dk + bc8 * dp;
  w.s = w.dv + bc8 * dvp;
  w.dp = w.s + br * bc8;
  w.dcap = w.dp + br * bc8;
  w.dq = w.dcap + br * bc8;
  w.mk = w.dq + br * dp;
  w.pd = w.mk + br * bc8;
  return w;
}

FA_EXPORT(fa_backward_scratch_bytes) int32_t fa_backward_scratch_bytes(const fa_problem *p) {
  const int32_t br = p->br, bc8 = fa_bc8(p->bc), d = p->d, dp = fa_dp(d), dv = p->dv_dim, dvp = fa_dp(dv);
  return ((d + dv) * bc8 + bc8 * (dp + dvp) + 5 * br * bc8 + br * dp) * 4;
}

/*
 * Dvec[row] = sum_c dO[row, c] * O[row, c] for every query row and head, into p->dvec (laid out
 * like lse), accumulated in float64. `out` and dO are [rows, h, dv].
 */
FA_EXPORT(fa_dvec) void fa_dvec(const fa_problem *p, const float *out) {
  const int32_t d = p->dv_dim, qs = p->h * d;
  float *dvec = (float *)p->dvec;
  for (int32_t b = 0; b < p->batch; b++) {
    const int32_t q0 = p->cu_q[b], tq = p->cu_q[b + 1] - q0;
    for (int32_t i = 0; i < tq; i++) {
      for (int32_t h = 0; h < p->h; h++) {
        const float *o = out + (int64_t)(q0 + i) * qs + h * d;
        const float *g = p->dout + (int64_t)(q0 + i) * qs + h * d;
        v128_t acc = wasm_f64x2_const_splat(0.0);
        int32_t c = 0;
        for (; c + 2 <= d; c += 2) {
          v128_t x = wasm_f64x2_promote_low_f32x4(wasm_v128_load64_zero(o + c));
          v128_t y = wasm_f64x2_promote_low_f32x4(wasm_v128_load64_zero(g + c));
          acc = wasm_f64x2_add(acc, wasm_f64x2_mul(x, y));
        }
        double sum = wasm_f64x2_extract_lane(acc, 0) + wasm_f64x2_extract_lane(acc, 1);
        for (; c < d; c++) sum += (double)o[c] * (double)g[c];
        dvec[fa_lse_index(p, b, h, i)] = (float)sum;
      }
    }
  }
}

#if defined(FA_NATIVE) && defined(__AVX512F__)
#include "native/backward-x86.h"
#else
/* P = e^(S - lse) on rows [0, nr) (-inf logits give 0; a row whose lse is -inf sees nothing). */
static void probabilities(float *s, int32_t ld, int32_t nr, int32_t ncols, const float *lse) {
  for (int32_t r = 0; r < nr; r++) {
    float *row = s + r * ld;
    if (lse[r] == -FA_INF) {
      fa_zero(row, ncols);
      continue;
    }
    const v128_t vl = VSPLAT(lse[r]);
    for (int32_t c = 0; c < ncols; c += 4) wasm_v128_store(row + c, fa_vexp(wasm_f32x4_sub(wasm_v128_load(row + c), vl)));
  }
}

/*
 * dS' = P (dP - Dvec) [dcap], in place in dp (0 where P is 0 and dP finite). The scale of
 * dS = dS' scale is in Q (dK += dS'^T (scale Q)) and applied to dQ once at the end.
 */
static void dscores(const float *s, float *dp, const float *dcap, int32_t ld, int32_t nr, int32_t ncols, const float *dvec) {
  for (int32_t r = 0; r < nr; r++) {
    const float *pr = s + r * ld;
    float *dr = dp + r * ld;
    const v128_t dv = VSPLAT(dvec[r]);
    if (dcap) {
      const float *cr = dcap + r * ld;
      for (int32_t c = 0; c < ncols; c += 4) {
        v128_t x = wasm_f32x4_mul(wasm_v128_load(pr + c), wasm_f32x4_sub(wasm_v128_load(dr + c), dv));
        wasm_v128_store(dr + c, wasm_f32x4_mul(x, wasm_v128_load(cr + c)));
      }
    } else {
      for (int32_t c = 0; c < ncols; c += 4) {
        wasm_v128_store(dr + c, wasm_f32x4_mul(wasm_v128_load(pr + c), wasm_f32x4_sub(wasm_v128_load(dr + c), dv)));
      }
    }
  }
}
#endif

/*
 * Key tiles [kt_start, kt_end) of (batch b, kv head kvh). dQ goes into p->dq, or, when
 * dq_private is not 0, into that private accumulator: [tq][g][d] for this sequence's rows and the
 * group's g query heads (the layout of core's planBackward / reducePrivate).
 */
FA_EXPORT(fa_backward_unit)
void fa_backward_unit(const fa_problem *p, float *scratch, int32_t b, int32_t kvh, int32_t kt_start, int32_t kt_end, float *dq_private) {
  const int32_t q0 = p->cu_q[b], tq = p->cu_q[b + 1] - q0;
  const int32_t k0 = p->cu_k[b], tk = p->cu_k[b + 1] - k0;
  if (tq == 0 || tk == 0) return;
  const int32_t br = p->br, bc = p->bc, bc8 = fa_bc8(bc), d = p->d, dp = fa_dp(d), dv = p->dv_dim, dvp = fa_dp(dv);
  const int32_t g = p->h / p->hkv, qs = p->h * d, ks = p->hkv * d, os = p->h * dv, vs = p->hkv * dv;
  float *dq = dq_private ? dq_private : p->dq + (int64_t)q0 * qs + kvh * g * d;
  const int32_t dq_stride = dq_private ? g * d : qs;
  bwd_scratch w = bwd_layout(p, scratch);
  float *dcap = p->softcap > 0 ? w.dcap : 0;
  float lse[br], dvec[br];
  for (int32_t kt = kt_start; kt < kt_end; kt++) {
    const int32_t j0 = kt * bc, nc = fa_min(bc, tk - j0);
    if (nc <= 0) break;
    const float *krow = p->k + (int64_t)(k0 + j0) * ks + kvh * d;
    const float *vrow = p->v + (int64_t)(k0 + j0) * vs + kvh * dv;
    fa_transpose_rows(krow, ks, nc, d, w.kt, bc8, bc8);
    fa_transpose_rows(vrow, vs, nc, dv, w.vt, bc8, bc8);
    fa_zero(w.dk, bc8 * dp);
    fa_zero(w.dv, bc8 * dvp);
    /* queries that see some key of the tile (mask.ts queryRange, monotone in j) */
    int32_t qlo, qhi, x0, x1;
    fa_query_range(p, j0, tq, tk, &qlo, &x1);
    fa_query_range(p, j0 + nc - 1, tq, tk, &x0, &qhi);
    if (qlo <= qhi) {
      for (int32_t hh = 0; hh < g; hh++) {
        const int32_t h = kvh * g + hh;
        const float slope = p->alibi ? p->alibi[b * p->h + h] : 0.0f;
        for (int32_t qt = qlo / br; qt <= qhi / br; qt++) {
          const int32_t i0 = qt * br, nr = fa_min(br, tq - i0);
          const float *qrow = p->q + (int64_t)(q0 + i0) * qs + h * d;
          const float *dorow = p->dout + (int64_t)(q0 + i0) * os + h * dv;
          for (int32_t r = 0; r < nr; r++) {
            const int32_t li = fa_lse_index(p, b, h, i0 + r);
            lse[r] = p->lse[li];
            dvec[r] = p->dvec[li];
          }
          f32_mm_nn_set(nr, bc8, d, qrow, qs, w.kt, bc8, w.s, bc8);
          fa_score_tile(p, w.s, bc8, nr, nc, bc8, i0, j0, tq, tk, slope, dcap);
          probabilities(w.s, bc8, nr, bc8, lse);
          if (p->dropout_threshold) {
            /* out was (P M / (1 - p)) V: dV takes that P, and dS masks dP the same way (philox.h) */
            fa_dropout_tile(p, b * p->h + h, i0, nr, j0, nc, w.mk, bc8);
            for (int32_t x = 0; x < nr * bc8; x++) w.pd[x] = w.s[x] * w.mk[x];
            f32_mm_tn_acc(bc8, dvp, nr, w.pd, bc8, dorow, os, w.dv, dvp);
            f32_mm_nn_set(nr, bc8, dv, dorow, os, w.vt, bc8, w.dp, bc8);
            for (int32_t x = 0; x < nr * bc8; x++) w.dp[x] *= w.mk[x];
          } else {
            f32_mm_tn_acc(bc8, dvp, nr, w.s, bc8, dorow, os, w.dv, dvp);
            f32_mm_nn_set(nr, bc8, dv, dorow, os, w.vt, bc8, w.dp, bc8);
          }
          dscores(w.s, w.dp, dcap, bc8, nr, bc8, dvec);
          f32_mm_tn_acc(bc8, dp, nr, w.dp, bc8, qrow, qs, w.dk, dp);
          f32_mm_nn_set(nr, dp, nc, w.dp, bc8, krow, ks, w.dq, dp);
          fa_add_rows(w.dq, dp, nr, d, dq + (int64_t)i0 * dq_stride + hh * d, dq_stride);
        }
      }
    }
    fa_store_rows(w.dk, dp, nc, d, p->dk + (int64_t)(k0 + j0) * ks + kvh * d, ks);
    fa_store_rows(w.dv, dvp, nc, dv, p->dv + (int64_t)(k0 + j0) * vs + kvh * dv, vs);
  }
}
