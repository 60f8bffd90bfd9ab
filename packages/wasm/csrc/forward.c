/*
 * The forward pass. One unit is one (batch, kv head, query tile), as in the TypeScript engine
 * (packages/core/src/cpu/forward.ts): for each query head of the kv head's group,
 *
 *   m = -inf, l = 0, acc = 0
 *   for each key tile some row of the tile sees (tiles outside the mask are never visited):
 *     S   = Q K^T                       f32_mm_nn_set (Q rows in place, scaled by the engine; K^T packed once)
 *     S   = logits, -inf where masked   fa_score_tile
 *     m'  = max(m, rowmax S); P = e^(S - m'); l = e^(m - m') l + rowsum P; acc *= e^(m - m')
 *     acc += P V                        f32_mm_nn_acc (V tile packed once)
 *   out = acc / l (0 when l = 0), lse = m + log l (-inf when l = 0)
 *
 * out goes to p->o, rows of dv = p->dv_dim (V's head dim; q and k rows have d). When dv == d
 * the engine passes o = q: each query row of a head is read by one unit only, and written after
 * its last read, so the forward needs no output buffer of its own.
 */
#include "fa.h"
#include "philox.h"
#include "vmath.h"
#include "scores.h"
#include "tileio.h"
#include "softmax.h"
#include "gemm.h"

typedef struct {
  float *s;   /* scores, then probabilities: [br][bc8] */
  float *acc; /* output accumulator: [br][dvp] (dvp: V's head dim rounded up to 8) */
  float *m, *l;
  float *mk; /* dropout's multipliers of the tile [br][bc8] */
  float *qp; /* the unit's q rows of one head, contiguous: [br][dp] */
} fwd_scratch;

static int32_t align4(int32_t n) { return (n + 3) & ~3; }

static fwd_scratch fwd_layout(const fa_problem *p, float *base) {
  const int32_t br = p->br, bc8 = fa_bc8(p->bc), dvp = fa_dp(p->dv_dim);
  fwd_scratch w;
  w.s = base;
  w.acc = w.s + br * bc8;
  w.m = w.acc + br * dvp;
  w.l = w.m + align4(br);
  w.mk = w.l + align4(br);
  w.qp = w.mk + br * bc8;
  return w;
}

/* Bytes of per-thread scratch the forward needs (16-byte aligned regions). */
FA_EXPORT(fa_forward_scratch_bytes) int32_t fa_forward_scratch_bytes(const fa_problem *p) {
  const int32_t br = p->br, bc8 = fa_bc8(p->bc), dvp = fa_dp(p->dv_dim);
  return (2 * br * bc8 + br * dvp + 2 * align4(br) + br * fa_dp(p->d)) * 4;
}

/* x[0..n) *= s: the engine scales q once as it copies it in, so that S = Q K^T is already scaled. */
FA_EXPORT(fa_scale) void fa_scale(float *x, int32_t n, float s) {
  const v128_t vs = VSPLAT(s);
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) wasm_v128_store(x + i, wasm_f32x4_mul(wasm_v128_load(x + i), vs));
  for (; i < n; i++) x[i] *= s;
}

/*
 * Packs the key tiles of (batch b, kv head kvh) once per call: K^T into p->kt, V into p->vp
 * (contiguous [bc][dvp] rows: read in place, V's rows lie H_kv Dv floats apart, and 64 of them
 * fall into a couple of L1 sets).
 */
FA_EXPORT(fa_pack_kv) void fa_pack_kv(const fa_problem *p, int32_t b, int32_t kvh) {
  const int32_t k0 = p->cu_k[b], tk = p->cu_k[b + 1] - k0;
  const int32_t d = p->d, dv = p->dv_dim, dvp = fa_dp(dv), bc = p->bc, bc8 = fa_bc8(bc);
  const int32_t ks = p->hkv * d, vs = p->hkv * dv;
  const int32_t ntiles = p->kt_first[p->batch];
  for (int32_t t = 0, j0 = 0; j0 < tk; t++, j0 += bc) {
    const int32_t tile = kvh * ntiles + p->kt_first[b] + t, nc = fa_min(bc, tk - j0);
    fa_transpose_rows(p->k + (int64_t)(k0 + j0) * ks + kvh * d, ks, nc, d, (float *)p->kt + (int64_t)tile * d * bc8, bc8, bc8);
    float *vt = (float *)p->vp + (int64_t)tile * bc8 * dvp;
    fa_copy_rows(p->v + (int64_t)(k0 + j0) * vs + kvh * dv, vs, nc, dv, vt, dvp);
    fa_zero(vt + nc * dvp, (bc8 - nc) * dvp);
  }
}

FA_EXPORT(fa_forward_unit) void fa_forward_unit(const fa_problem *p, float *scratch, int32_t b, int32_t kvh, int32_t qt) {
  const int32_t q0 = p->cu_q[b], tq = p->cu_q[b + 1] - q0;
  const int32_t tk = p->cu_k[b + 1] - p->cu_k[b];
  const int32_t br = p->br, bc = p->bc, bc8 = fa_bc8(bc), d = p->d, dp = fa_dp(d), dv = p->dv_dim, dvp = fa_dp(dv);
  const int32_t i0 = qt * br, nr = fa_min(br, tq - i0);
  if (nr <= 0) return;
  const int32_t g = p->h / p->hkv, qs = p->h * d, os = p->h * dv;
  const int32_t ntiles = p->kt_first[p->batch];
  fwd_scratch w = fwd_layout(p, scratch);
  /* key tiles some row of this tile sees (mask.ts tileKeyRange) */
  int32_t lo, hi, lo2, hi2;
  fa_key_range(p, i0, tq, tk, &lo, &hi2);
  fa_key_range(p, i0 + nr - 1, tq, tk, &lo2, &hi);
  const int32_t kt0 = lo / bc, kt1 = lo <= hi ? hi / bc : -1;
  for (int32_t hh = 0; hh < g; hh++) {
    const int32_t h = kvh * g + hh;
    const float slope = p->alibi ? p->alibi[b * p->h + h] : 0.0f;
    /* the q rows, H D floats apart in the caller's layout, fall into a few L1 sets (rows 2 KiB
     * apart at H D = 512): copied once into a contiguous tile, read by every key tile */
    fa_copy_rows(p->q + (int64_t)(q0 + i0) * qs + h * d, qs, nr, d, w.qp, dp);
    const float *qrow = w.qp;
    /* a sink is read first, as a key with a zero value row: m = sink, l = 1 */
    const float m0 = p->sinks ? p->sinks[h] : -FA_INF, l0 = p->sinks ? 1.0f : 0.0f;
    for (int32_t r = 0; r < nr; r++) {
      w.m[r] = m0;
      w.l[r] = l0;
    }
    fa_zero(w.acc, nr * dvp);
    for (int32_t kt = kt0; kt <= kt1; kt++) {
      const int32_t j0 = kt * bc, nc = fa_min(bc, tk - j0);
      const int64_t tile = kvh * ntiles + p->kt_first[b] + kt;
      f32_mm_nn_set(nr, bc8, d, qrow, dp, p->kt + tile * d * bc8, bc8, w.s, bc8);
      fa_score_tile(p, w.s, bc8, nr, nc, bc8, i0, j0, tq, tk, slope, 0);
      fa_softmax_update(w.s, bc8, nr, bc8, w.m, w.l, w.acc, dvp);
      if (p->dropout_threshold) {
        /* after l has the undropped weights: only P V sees the mask, kept entries scaled 1/(1 - p) */
        fa_dropout_tile(p, b * p->h + h, i0, nr, j0, nc, w.mk, bc8);
        for (int32_t x = 0; x < nr * bc8; x++) w.s[x] *= w.mk[x];
      }
      f32_mm_nn_acc(nr, dvp, nc, w.s, bc8, p->vp + tile * bc8 * dvp, dvp, w.acc, dvp);
    }
    for (int32_t r = 0; r < nr; r++) p->lse[fa_lse_index(p, b, h, i0 + r)] = fa_finalize_row(w.m[r], w.l[r], w.acc + r * dvp, dvp);
    fa_store_rows(w.acc, dvp, nr, dv, p->o + (int64_t)(q0 + i0) * os + h * dv, os);
  }
}
