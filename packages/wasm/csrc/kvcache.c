/*
 * Attention over a KV cache (packages/core/src/kvcache.ts; FlashAttention's
 * flash_attn_with_kvcache): a few query rows against cache rows read where they lie, through
 * the block table, in the cache's own dtype. The work is core's units (batch b, kv head, query
 * tile, key chunk) (packages/core/src/cpu/kvcache.ts planKVCache), a unit of this kernel taking
 * consecutive kv heads [kvh0, kvh1) of one (b, tile, chunk) together. Each kv head's R rows are
 * every query of the tile for every query head that reads it (row r = hh * nq + ii: query
 * i0 + ii of head kvh * g + hh), so each cached K and V row is read once for the GQA group:
 *
 *   Q rows of each kv head (R x dp, float32, already scaled)
 *   for each tile of KV_TILE keys in the chunk:
 *     token addresses through the block table            kv_rows
 *     one load a line of the tile's rows, token by token  kv_touch (the prefetchers follow it;
 *                                                          f16: kv_f16_finite reads every element)
 *     for each kv head:
 *       S   = Q K^T    K rows in place, 16-bit widened    kv_dot_4x2 / kv_dot_1x4
 *       S   = logits, -inf where masked                   fa_score_tile (scores.h)
 *       S   = e^(S - m'), rescale l and acc               fa_softmax_update (softmax.h)
 *       acc += S V     V rows in place, 16-bit widened    kv_pv_4x8 / kv_pv_1x8
 *   one chunk: out = acc / l, lse = m + log l             fa_finalize_row
 *   several:   (m, l, acc) into each head's partial slot; fa_kv_combine merges chunks in order
 *
 * A kv head's arithmetic is the same whichever heads share its unit: results do not depend on
 * the grouping (which the engine chooses from the thread count).
 *
 * bf16 and f16 rows are widened to float32 in registers as they are loaded (widen.h: bf16 by a
 * shift or a mask, f16 exactly with a few more operations, fewer for a tile kv_f16_finite found
 * free of infinities and NaNs), never decoded into a tile first. q.k reads 4 elements of a row a
 * step in natural order (kv_load4; f16: 8 in widen.h's (even, odd) order, q permuted to match);
 * P V reads 8 in (even, odd) order, so the accumulators of a 16-bit cache are kept in that order.
 * The append of kNew/vNew is done by the engine before the units run.
 */
#include "fa.h"
#include "vmath.h"
#include "scores.h"
#include "softmax.h"
#include "widen.h"
#include "kvcache.h"

/* Keys per tile: S is R x KV_TILE floats. */
#define KV_TILE 64

/*
 * The native build runs the products on 512-bit (x86-64-v4) or 256-bit (v3) registers
 * (native/kv-x86.h), which widen 16-bit rows in natural order: no (even, odd) permutation of q
 * and the accumulators there.
 */
#if defined(FA_NATIVE)
#define FA_KV_X86 1
#define FA_KV_PERMUTED 0
#else
#define FA_KV_PERMUTED 1
#endif

/*
 * The scalar ends of the products, for a head dim that is not a multiple of the vector step (the
 * WebAssembly kernels here and the AVX2 ones in native/kv-x86.h): elements [e, d) of q . k for
 * 4 query rows and 2 keys, added to r0 and r1; of q . k_0..k_3 for one row, as a vector; and
 * columns [e0, d) of acc += P V for rows [0, rows).
 */
FA_INLINE void kv_dot_tail_4x2(const float *q0, const float *q1, const float *q2, const float *q3, const void *k0, const void *k1, int32_t e, int32_t d, const int dt, v128_t *r0, v128_t *r1) {
  float t0 = 0, t1 = 0, t2 = 0, t3 = 0, u0 = 0, u1 = 0, u2 = 0, u3 = 0;
  for (; e < d; e++) {
    const float x = kv_load1(k0, e, dt), y = kv_load1(k1, e, dt);
    t0 += q0[e] * x;
    t1 += q1[e] * x;
    t2 += q2[e] * x;
    t3 += q3[e] * x;
    u0 += q0[e] * y;
    u1 += q1[e] * y;
    u2 += q2[e] * y;
    u3 += q3[e] * y;
  }
  *r0 = wasm_f32x4_add(*r0, wasm_f32x4_make(t0, t1, t2, t3));
  *r1 = wasm_f32x4_add(*r1, wasm_f32x4_make(u0, u1, u2, u3));
}

FA_INLINE v128_t kv_dot_tail_1x4(const float *q, const uint8_t *k0, const uint8_t *k1, const uint8_t *k2, const uint8_t *k3, int32_t e, int32_t d, const int dt) {
  float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  for (; e < d; e++) {
    t0 += q[e] * kv_load1(k0, e, dt);
    t1 += q[e] * kv_load1(k1, e, dt);
    t2 += q[e] * kv_load1(k2, e, dt);
    t3 += q[e] * kv_load1(k3, e, dt);
  }
  return wasm_f32x4_make(t0, t1, t2, t3);
}

FA_INLINE void kv_pv_tail(const float *s, int32_t ld_s, const void *const *vrow, int32_t off, int32_t nc, int32_t rows, int32_t e0, int32_t d, const int dt, float *acc, int32_t dp) {
  for (int32_t e = e0; e < d; e++) {
    for (int32_t r = 0; r < rows; r++) {
      float t = 0;
      for (int32_t j = 0; j < nc; j++) t += s[r * ld_s + j] * kv_load1((const uint8_t *)vrow[j] + off, e, dt);
      acc[r * dp + e] += t;
    }
  }
}

/* The four lane sums of a0..a3, as one vector [sum a0, sum a1, sum a2, sum a3]. */
FA_INLINE v128_t fa_hsum4(v128_t a0, v128_t a1, v128_t a2, v128_t a3) {
  const v128_t s01 = wasm_f32x4_add(wasm_i32x4_shuffle(a0, a1, 0, 4, 1, 5), wasm_i32x4_shuffle(a0, a1, 2, 6, 3, 7));
  const v128_t s23 = wasm_f32x4_add(wasm_i32x4_shuffle(a2, a3, 0, 4, 1, 5), wasm_i32x4_shuffle(a2, a3, 2, 6, 3, 7));
  return wasm_f32x4_add(wasm_i64x2_shuffle(s01, s23, 0, 2), wasm_i64x2_shuffle(s01, s23, 1, 3));
}

/*
 * [q_r . k0] into *s0 and [q_r . k1] into *s1 for 4 query rows q_0..q_3 (stride ldq) and two
 * cache rows, 4 elements a step (kv_load4): each Q vector is loaded once for both keys; 8
 * accumulators, and at most 4 q vectors and 2 keys besides, which fit V8's 15 free registers
 * (8 elements a step, with 16-bit rows split into (even, odd) halves, spilled 4-6 of them).
 */
/* a_r += q_r[o, o + 4) x and c_r += q_r[o, o + 4) y for the 4 rows of kv_dot_4x2 (a macro: the
 * order of the loads and multiply-adds is the kernel's, and so is V8's register allocation) */
#define KV_FMA_4X2(o, x, y)             \
  do {                                  \
    v128_t u_ = wasm_v128_load(q0 + (o)); \
    a0 = VFMA(u_, x, a0);               \
    c0 = VFMA(u_, y, c0);               \
    u_ = wasm_v128_load(q1 + (o));      \
    a1 = VFMA(u_, x, a1);               \
    c1 = VFMA(u_, y, c1);               \
    u_ = wasm_v128_load(q2 + (o));      \
    a2 = VFMA(u_, x, a2);               \
    c2 = VFMA(u_, y, c2);               \
    u_ = wasm_v128_load(q3 + (o));      \
    a3 = VFMA(u_, x, a3);               \
    c3 = VFMA(u_, y, c3);               \
  } while (0)

FA_INLINE void kv_dot_4x2(const float *q, int32_t ldq, const void *k0, const void *k1, int32_t d, const int dt, v128_t *s0, v128_t *s1) {
  const float *q0 = q, *q1 = q0 + ldq, *q2 = q1 + ldq, *q3 = q2 + ldq;
  v128_t a0 = VSPLAT(0.0f), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
  int32_t e = 0;
  if (dt == FA_F16 || dt == FA_F16F) {
    /* f16 (q in (even, odd) order): 8 elements a step widen in fewer operations, which here
     * matter more than the spills (KERNEL_NOTES.md, "KV-cache decode") */
    for (; e + 8 <= d; e += 8) {
      v128_t x0, y0, x1, y1;
      kv_load8(k0, e, dt, &x0, &y0);
      kv_load8(k1, e, dt, &x1, &y1);
      KV_FMA_4X2(e, x0, x1);
      KV_FMA_4X2(e + 4, y0, y1);
    }
  }
  for (; e + 4 <= d; e += 4) {
    const v128_t x = kv_load4(k0, e, dt), y = kv_load4(k1, e, dt);
    KV_FMA_4X2(e, x, y);
  }
  v128_t r0 = fa_hsum4(a0, a1, a2, a3), r1 = fa_hsum4(c0, c1, c2, c3);
  if (e < d) kv_dot_tail_4x2(q0, q1, q2, q3, k0, k1, e, d, dt, &r0, &r1);
  *s0 = r0;
  *s1 = r1;
}

/* [q . k_0, q . k_1, q . k_2, q . k_3] for one query row and 4 cache rows (at byte offset off). */
FA_INLINE v128_t kv_dot_1x4(const float *q, const void *const *k, int32_t off, int32_t d, const int dt) {
  const uint8_t *k0 = (const uint8_t *)k[0] + off, *k1 = (const uint8_t *)k[1] + off, *k2 = (const uint8_t *)k[2] + off, *k3 = (const uint8_t *)k[3] + off;
  v128_t a0 = VSPLAT(0.0f), a1 = a0, a2 = a0, a3 = a0;
  int32_t e = 0;
  if (dt == FA_F16 || dt == FA_F16F) {
    for (; e + 8 <= d; e += 8) {
      const v128_t ql = wasm_v128_load(q + e), qh = wasm_v128_load(q + e + 4);
      v128_t lo, hi;
      kv_load8(k0, e, dt, &lo, &hi);
      a0 = VFMA(qh, hi, VFMA(ql, lo, a0));
      kv_load8(k1, e, dt, &lo, &hi);
      a1 = VFMA(qh, hi, VFMA(ql, lo, a1));
      kv_load8(k2, e, dt, &lo, &hi);
      a2 = VFMA(qh, hi, VFMA(ql, lo, a2));
      kv_load8(k3, e, dt, &lo, &hi);
      a3 = VFMA(qh, hi, VFMA(ql, lo, a3));
    }
  }
  for (; e + 4 <= d; e += 4) {
    const v128_t u = wasm_v128_load(q + e);
    a0 = VFMA(u, kv_load4(k0, e, dt), a0);
    a1 = VFMA(u, kv_load4(k1, e, dt), a1);
    a2 = VFMA(u, kv_load4(k2, e, dt), a2);
    a3 = VFMA(u, kv_load4(k3, e, dt), a3);
  }
  v128_t s = fa_hsum4(a0, a1, a2, a3);
  if (e < d) s = wasm_f32x4_add(s, kv_dot_tail_1x4(q, k0, k1, k2, k3, e, d, dt));
  return s;
}

/* acc[r][e..e+8) += sum_{j < nk} P[r][j] v_j[e..e+8) for 4 rows (8 accumulators in registers). */
FA_INLINE void kv_pv_4x8(const float *P, int32_t ldp, const void *const *v, int32_t off, int32_t nk, int32_t e, const int dt, float *acc, int32_t lda) {
  float *c0 = acc + e, *c1 = c0 + lda, *c2 = c1 + lda, *c3 = c2 + lda;
  const float *p0 = P, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
  v128_t a0 = wasm_v128_load(c0), b0 = wasm_v128_load(c0 + 4), a1 = wasm_v128_load(c1), b1 = wasm_v128_load(c1 + 4);
  v128_t a2 = wasm_v128_load(c2), b2 = wasm_v128_load(c2 + 4), a3 = wasm_v128_load(c3), b3 = wasm_v128_load(c3 + 4);
  for (int32_t j = 0; j < nk; j++) {
    v128_t lo, hi;
    kv_load8((const uint8_t *)v[j] + off, e, dt, &lo, &hi);
    v128_t x = wasm_v128_load32_splat(p0 + j);
    a0 = VFMA(x, lo, a0);
    b0 = VFMA(x, hi, b0);
    x = wasm_v128_load32_splat(p1 + j);
    a1 = VFMA(x, lo, a1);
    b1 = VFMA(x, hi, b1);
    x = wasm_v128_load32_splat(p2 + j);
    a2 = VFMA(x, lo, a2);
    b2 = VFMA(x, hi, b2);
    x = wasm_v128_load32_splat(p3 + j);
    a3 = VFMA(x, lo, a3);
    b3 = VFMA(x, hi, b3);
  }
  wasm_v128_store(c0, a0);
  wasm_v128_store(c0 + 4, b0);
  wasm_v128_store(c1, a1);
  wasm_v128_store(c1 + 4, b1);
  wasm_v128_store(c2, a2);
  wasm_v128_store(c2 + 4, b2);
  wasm_v128_store(c3, a3);
  wasm_v128_store(c3 + 4, b3);
}

/* kv_pv_4x8 for one row. */
FA_INLINE void kv_pv_1x8(const float *P, const void *const *v, int32_t off, int32_t nk, int32_t e, const int dt, float *acc) {
  v128_t a = wasm_v128_load(acc + e), b = wasm_v128_load(acc + e + 4);
  for (int32_t j = 0; j < nk; j++) {
    v128_t lo, hi;
    kv_load8((const uint8_t *)v[j] + off, e, dt, &lo, &hi);
    const v128_t x = wasm_v128_load32_splat(P + j);
    a = VFMA(x, lo, a);
    b = VFMA(x, hi, b);
  }
  wasm_v128_store(acc + e, a);
  wasm_v128_store(acc + e + 4, b);
}

/*
 * Per-thread scratch of a unit over kv heads [kvh0, kvh1): each head's online-softmax state
 * (rows = the plan's rows per kv head; head i of the unit at rows [i * rows, (i + 1) * rows)),
 * one score tile reused head by head, and the tile's token addresses.
 */
typedef struct {
  float *q;   /* [heads * rows][dp] */
  float *acc; /* [heads * rows][dp] */
  float *m, *l; /* [heads * rows] */
  float *s;   /* [rows][KV_TILE] */
  const void **krow, **vrow; /* [KV_TILE]: token rows (all kv heads) */
  uint32_t *sink;
} kv_scratch;

static int32_t align4(int32_t n) { return (n + 3) & ~3; }

static kv_scratch kv_layout(const fa_kv *kv, float *base) {
  const int32_t rows = kv->rows, all = kv->heads * rows, dp = fa_dp(kv->base.d);
  kv_scratch w;
  w.q = base;
  w.acc = w.q + all * dp;
  w.m = w.acc + all * dp;
  w.l = w.m + align4(all);
  w.s = w.l + align4(all);
  w.krow = (const void **)(w.s + rows * KV_TILE);
  w.vrow = w.krow + KV_TILE;
  w.sink = (uint32_t *)(w.vrow + KV_TILE);
  return w;
}

/* Bytes of per-thread scratch a unit (or the combine) needs. */
FA_EXPORT(fa_kv_scratch_bytes) int32_t fa_kv_scratch_bytes(const fa_kv *kv) {
  const int32_t rows = kv->rows, all = kv->heads * rows, dp = fa_dp(kv->base.d);
  return (2 * all * dp + 2 * align4(all) + rows * KV_TILE) * 4 + 2 * KV_TILE * (int32_t)sizeof(void *) + 16;
}

/*
 * Addresses of the token rows (every kv head) of keys [j0, j0 + nc) of sequence b in both caches
 * (kvcache.ts kvCacheRow: token t lives in block table[b][t / block_size], row t % block_size);
 * keys nc..nc4 repeat the last one (their scores are masked as padding).
 */
static void kv_rows(const fa_kv *kv, int32_t b, int32_t j0, int32_t nc, int32_t nc4, const void **krow, const void **vrow) {
  const int32_t bs = kv->block_size, w = kv->base.hkv * kv->base.d;
  const int32_t es = kv->dtype == FA_F32 ? 4 : 2;
  const int32_t *tb = kv->table + b * kv->max_blocks;
  const int32_t lp = kv->leftpad ? kv->leftpad[b] : 0; /* key j is row j + leftpad (core's kvFirstKey) */
  for (int32_t r = 0; r < nc4; r++) {
    const int32_t t = lp + j0 + (r < nc ? r : nc - 1);
    const int32_t blk = t / bs;
    const int64_t off = ((int64_t)tb[blk] * bs + (t - blk * bs)) * w;
    krow[r] = (const uint8_t *)kv->k_cache + off * es;
    vrow[r] = (const uint8_t *)kv->v_cache + off * es;
  }
}

/*
 * Reads one byte of every 64-byte line of bytes [from, from + bytes) of the tile's token rows,
 * token after token: a sequential walk through each block, which the hardware prefetchers
 * follow. The products then read the tile head by head (rows H_kv D apart, a new page at every
 * key, which defeats the prefetchers) and find it in L1/L2. WebAssembly has no prefetch
 * instruction; the walk costs a load per line.
 */
static uint32_t kv_touch(const void *const *rows, int32_t nc, int32_t from, int32_t bytes) {
  uint32_t x = 0;
  for (int32_t j = 0; j < nc; j++) {
    const uint8_t *r = (const uint8_t *)rows[j] + from;
    for (int32_t o = 0; o < bytes; o += 64) x |= r[o];
  }
  return x;
}

/*
 * kv_touch for f16 rows, reading every element: whether none of bytes [from, from + bytes) of the
 * tile's rows holds an infinity or NaN (exponent 31: the 16-bit lane shifted left by one, which
 * drops the sign, is 0xf800 or more). Then the products widen with FA_F16F.
 */
static int kv_f16_finite(const void *const *rows, int32_t nc, int32_t from, int32_t bytes) {
  v128_t mx = wasm_i16x8_splat(0);
  uint32_t tail = 0;
  const int32_t b16 = bytes & ~15;
  for (int32_t j = 0; j < nc; j++) {
    const uint8_t *r = (const uint8_t *)rows[j] + from;
    int32_t o = 0;
    for (; o + 64 <= b16; o += 64) {
      const v128_t a = wasm_u16x8_max(wasm_i16x8_shl(wasm_v128_load(r + o), 1), wasm_i16x8_shl(wasm_v128_load(r + o + 16), 1));
      const v128_t b = wasm_u16x8_max(wasm_i16x8_shl(wasm_v128_load(r + o + 32), 1), wasm_i16x8_shl(wasm_v128_load(r + o + 48), 1));
      mx = wasm_u16x8_max(mx, wasm_u16x8_max(a, b));
    }
    for (; o < b16; o += 16) mx = wasm_u16x8_max(mx, wasm_i16x8_shl(wasm_v128_load(r + o), 1));
    for (; o < bytes; o += 2) {
      const uint32_t h = (uint32_t)(*(const uint16_t *)(r + o) << 1) & 0xffffu;
      tail = h > tail ? h : tail;
    }
  }
  return !wasm_v128_any_true(wasm_u16x8_ge(mx, wasm_i16x8_splat((int16_t)0xf800))) && tail < 0xf800u;
}

/* One kv head's slice of a unit's state, and its byte offset in a token row. */
typedef struct {
  float *q, *acc, *m, *l;
  int32_t off;
} kv_head;

#ifdef FA_KV_X86
#include "native/kv-x86.h"
#endif

/* S = Q K^T (R rows x nc4 keys) and acc += P V (nc keys) for one kv head, for the cache's dtype. */
FA_INLINE void kv_tile_products(const fa_kv *kv, const kv_scratch *w, const kv_head *hd, int32_t R, int32_t nc, int32_t nc4, int pass, const int dt) {
#ifdef FA_KV_X86
  kvx_tile_products(hd->q, hd->acc, w->s, KV_TILE, w->krow, w->vrow, hd->off, kv->base.d, fa_dp(kv->base.d), R, nc, nc4, pass, dt);
  return;
#endif
  const int32_t d = kv->base.d, dp = fa_dp(d), R4 = R & ~3, d8 = d & ~7, off = hd->off;
  if (pass == 0) {
    for (int32_t r = 0; r < R4; r += 4) {
      for (int32_t j = 0; j < nc4; j += 2) {
        v128_t s0, s1;
        kv_dot_4x2(hd->q + r * dp, dp, (const uint8_t *)w->krow[j] + off, (const uint8_t *)w->krow[j + 1] + off, d, dt, &s0, &s1);
        float *o = w->s + r * KV_TILE + j;
        wasm_v128_store32_lane(o, s0, 0);
        wasm_v128_store32_lane(o + KV_TILE, s0, 1);
        wasm_v128_store32_lane(o + 2 * KV_TILE, s0, 2);
        wasm_v128_store32_lane(o + 3 * KV_TILE, s0, 3);
        wasm_v128_store32_lane(o + 1, s1, 0);
        wasm_v128_store32_lane(o + 1 + KV_TILE, s1, 1);
        wasm_v128_store32_lane(o + 1 + 2 * KV_TILE, s1, 2);
        wasm_v128_store32_lane(o + 1 + 3 * KV_TILE, s1, 3);
      }
    }
    for (int32_t r = R4; r < R; r++)
      for (int32_t j = 0; j < nc4; j += 4) wasm_v128_store(w->s + r * KV_TILE + j, kv_dot_1x4(hd->q + r * dp, w->krow + j, off, d, dt));
    return;
  }
  for (int32_t r = 0; r < R4; r += 4)
    for (int32_t e = 0; e < d8; e += 8) kv_pv_4x8(w->s + r * KV_TILE, KV_TILE, w->vrow, off, nc, e, dt, hd->acc + r * dp, dp);
  for (int32_t r = R4; r < R; r++)
    for (int32_t e = 0; e < d8; e += 8) kv_pv_1x8(w->s + r * KV_TILE, w->vrow, off, nc, e, dt, hd->acc + r * dp);
  kv_pv_tail(w->s, KV_TILE, w->vrow, off, nc, R, d8, d, dt, hd->acc, dp);
}

/*
 * One specialisation per dtype: dt is a constant inside each (the widening is chosen at compile
 * time). finite: the tile's f16 rows hold no infinity or NaN (kv_f16_finite).
 */
static void kv_products(const fa_kv *kv, const kv_scratch *w, const kv_head *hd, int32_t R, int32_t nc, int32_t nc4, int pass, int finite) {
  if (kv->dtype == FA_BF16) kv_tile_products(kv, w, hd, R, nc, nc4, pass, FA_BF16);
  else if (kv->dtype == FA_F16 && finite) kv_tile_products(kv, w, hd, R, nc, nc4, pass, FA_F16F);
  else if (kv->dtype == FA_F16) kv_tile_products(kv, w, hd, R, nc, nc4, pass, FA_F16);
  else kv_tile_products(kv, w, hd, R, nc, nc4, pass, FA_F32);
}

/* f(x) on every full chunk of 8 of rows [0, nr) (row stride dp): 16-bit caches' (even, odd) order in and out. */
static void kv_perm_rows(float *x, int32_t nr, int32_t d, int32_t dp, void (*f)(float *)) {
  for (int32_t r = 0; r < nr; r++)
    for (int32_t e = 0; e + 8 <= d; e += 8) f(x + r * dp + e);
}

/* Writes one kv head's finalized rows: out over the rows' q (each row belongs to one unit or combine), lse [b, h, i]. */
static void kv_store(const fa_kv *kv, const kv_head *hd, int32_t b, int32_t kvh, int32_t i0, int32_t nq) {
  const fa_problem *p = &kv->base;
  const int32_t g = p->h / p->hkv, d = p->d, dp = fa_dp(d);
  if (FA_KV_PERMUTED && kv->dtype != FA_F32) kv_perm_rows(hd->acc, g * nq, d, dp, fa_unperm8);
  for (int32_t hh = 0; hh < g; hh++) {
    const int32_t h = kvh * g + hh;
    for (int32_t ii = 0; ii < nq; ii++) {
      const int32_t r = hh * nq + ii;
      p->lse[fa_lse_index(p, b, h, i0 + ii)] = fa_finalize_row(hd->m[r], hd->l[r], hd->acc + r * dp, dp);
    }
    fa_store_rows(hd->acc + hh * nq * dp, dp, nq, d, p->q + ((int64_t)(b * p->tq + i0) * p->h + h) * d, p->h * d);
  }
}

static kv_head kv_head_at(const fa_kv *kv, const kv_scratch *w, int32_t i, int32_t kvh) {
  const int32_t at = i * kv->rows, dp = fa_dp(kv->base.d);
  kv_head hd = {w->q + at * dp, w->acc + at * dp, w->m + at, w->l + at, kvh * kv->base.d * (kv->dtype == FA_F32 ? 4 : 2)};
  return hd;
}

/*
 * One unit: core's units (batch b, kv head, query tile t, key chunk c) of kv heads
 * [kvh0, kvh1) together, so that the tile's token rows are walked once, in order, for all of
 * them (kv_touch). slot0 >= 0: head kvh0's partial-state slot (head kvh's is slot0 + kvh - kvh0,
 * as core's plan numbers them).
 */
FA_EXPORT(fa_kv_unit) void fa_kv_unit(const fa_kv *kv, float *scratch, int32_t b, int32_t kvh0, int32_t kvh1, int32_t t, int32_t c, int32_t slot0) {
  const fa_problem *p = &kv->base;
  const int32_t g = p->h / p->hkv, d = p->d, dp = fa_dp(d), tq = p->tq;
  const int32_t tk = kv->lens[b] + kv->tnew - (kv->leftpad ? kv->leftpad[b] : 0); /* keys attended (core's kvAttended) */
  const int32_t i0 = t * kv->qt, nq = fa_min(kv->qt, tq - i0), R = g * nq;
  const int32_t es = kv->dtype == FA_F32 ? 4 : 2;
  kv_scratch w = kv_layout(kv, scratch);
  for (int32_t kvh = kvh0; kvh < kvh1; kvh++) {
    const kv_head hd = kv_head_at(kv, &w, kvh - kvh0, kvh);
    for (int32_t hh = 0; hh < g; hh++)
      fa_copy_rows(p->q + ((int64_t)(b * tq + i0) * p->h + kvh * g + hh) * d, p->h * d, nq, d, hd.q + hh * nq * dp, dp);
    for (int32_t r = 0; r < R; r++) {
      hd.m[r] = -FA_INF;
      hd.l[r] = 0.0f;
    }
    /* sinks join the first chunk's state only (the combine then counts each once): m = sink, l = 1 */
    if (p->sinks && c == 0)
      for (int32_t r = 0; r < R; r++) {
        hd.m[r] = p->sinks[kvh * g + r / nq];
        hd.l[r] = 1.0f;
      }
    if (FA_KV_PERMUTED && kv->dtype == FA_F16) kv_perm_rows(hd.q, R, d, dp, fa_perm8);
    fa_zero(hd.acc, R * dp);
  }
  /* keys some row of the tile sees (mask.ts tileKeyRange), then this unit's chunk of them */
  int32_t lo, hi, lo2, hi2;
  fa_key_range(p, i0, tq, tk, &lo, &hi2);
  fa_key_range(p, i0 + nq - 1, tq, tk, &lo2, &hi);
  const int64_t c0l = (int64_t)lo + (int64_t)c * kv->chunk; /* chunk is 2^31 - 1 when the range is not split */
  const int32_t c0 = (int32_t)c0l, c1 = (int32_t)(c0l + kv->chunk < hi + 1 ? c0l + kv->chunk : hi + 1);
  uint32_t sink = 0;
  for (int32_t j0 = c0; j0 < c1; j0 += KV_TILE) {
    const int32_t nc = fa_min(KV_TILE, c1 - j0), nc4 = align4(nc);
    kv_rows(kv, b, j0, nc, nc4, w.krow, w.vrow);
    int finite = 0;
    if (kv->dtype == FA_F16) finite = kv_f16_finite(w.krow, nc, kvh0 * d * es, (kvh1 - kvh0) * d * es) && kv_f16_finite(w.vrow, nc, kvh0 * d * es, (kvh1 - kvh0) * d * es);
    else sink |= kv_touch(w.krow, nc, kvh0 * d * es, (kvh1 - kvh0) * d * es) | kv_touch(w.vrow, nc, kvh0 * d * es, (kvh1 - kvh0) * d * es);
    for (int32_t kvh = kvh0; kvh < kvh1; kvh++) {
      const kv_head hd = kv_head_at(kv, &w, kvh - kvh0, kvh);
      kv_products(kv, &w, &hd, R, nc, nc4, 0, finite);
      for (int32_t hh = 0; hh < g; hh++) {
        const float slope = p->alibi ? p->alibi[b * p->h + kvh * g + hh] : 0.0f;
        fa_score_tile(p, w.s + hh * nq * KV_TILE, KV_TILE, nq, nc, nc4, i0, j0, tq, tk, slope, 0);
      }
      fa_softmax_update(w.s, KV_TILE, R, nc4, hd.m, hd.l, hd.acc, dp);
      kv_products(kv, &w, &hd, R, nc, nc4, 1, finite);
    }
  }
  *w.sink = sink;
  for (int32_t kvh = kvh0; kvh < kvh1; kvh++) {
    const kv_head hd = kv_head_at(kv, &w, kvh - kvh0, kvh);
    if (slot0 < 0) {
      kv_store(kv, &hd, b, kvh, i0, nq);
      continue;
    }
    const int64_t at = (int64_t)(slot0 + kvh - kvh0) * kv->rows;
    for (int32_t r = 0; r < R; r++) {
      kv->pm[at + r] = hd.m[r];
      kv->pl[at + r] = hd.l[r];
    }
    fa_store_rows(hd.acc, dp, R, dp, kv->pacc + at * dp, dp);
  }
}

/* max that propagates NaN (Math.max), for the merge. */
static float nan_max(float a, float b) { return a != a || b != b ? a + b : a > b ? a : b; }

/*
 * The combine of flash-decoding for one split group (batch b, kv head kvh, query tile t): the
 * partial states of its chunks (slots slot0 + c * hkv) merged in chunk order (online-softmax.ts
 * mergeTileStates), then finalized and stored. Runs on the calling thread after every unit.
 */
FA_EXPORT(fa_kv_combine) void fa_kv_combine(const fa_kv *kv, float *scratch, int32_t b, int32_t kvh, int32_t t, int32_t slot0, int32_t chunks) {
  const fa_problem *p = &kv->base;
  const int32_t g = p->h / p->hkv, dp = fa_dp(p->d);
  const int32_t i0 = t * kv->qt, nq = fa_min(kv->qt, p->tq - i0), R = g * nq;
  kv_scratch w = kv_layout(kv, scratch);
  const kv_head hd = kv_head_at(kv, &w, 0, kvh);
  const int64_t a0 = (int64_t)slot0 * kv->rows;
  for (int32_t r = 0; r < R; r++) {
    hd.m[r] = kv->pm[a0 + r];
    hd.l[r] = kv->pl[a0 + r];
  }
  fa_store_rows(kv->pacc + a0 * dp, dp, R, dp, hd.acc, dp);
  for (int32_t c = 1; c < chunks; c++) {
    const int64_t at = (int64_t)(slot0 + c * p->hkv) * kv->rows;
    for (int32_t r = 0; r < R; r++) {
      const float mb = kv->pm[at + r], m = nan_max(hd.m[r], mb);
      if (m == -FA_INF) continue; /* both empty */
      const float fa = hd.m[r] == m ? 1.0f : fa_exp1(hd.m[r] - m), fb = mb == m ? 1.0f : fa_exp1(mb - m);
      hd.l[r] = hd.l[r] * fa + kv->pl[at + r] * fb;
      float *x = hd.acc + r * dp;
      const float *y = kv->pacc + (at + r) * dp;
      const v128_t va = VSPLAT(fa), vb = VSPLAT(fb);
      for (int32_t e = 0; e < dp; e += 4) wasm_v128_store(x + e, wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(x + e), va), wasm_f32x4_mul(wasm_v128_load(y + e), vb)));
      hd.m[r] = m;
    }
  }
  kv_store(kv, &hd, b, kvh, i0, nq);
}
