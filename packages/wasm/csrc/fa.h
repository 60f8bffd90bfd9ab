/*
 * @fa/wasm: the problem description the kernels read, and the mask rules.
 *
 * The TypeScript side (src/params.ts) writes one fa_problem into linear memory per call; every
 * unit of work reads it. Tensors are float32 in the caller's layout, [rows, heads, D] row-major
 * (bshd, or packed varlen), so a row of head h starts at (row * heads + h) * D. Offsets and
 * lengths are in elements; pointers are byte addresses in the shared linear memory.
 *
 * The mask and score rules mirror packages/core/src/mask.ts (keyRange, queryRange, logit):
 * query i of a sequence with tq queries and tk keys sits at key position i + tk - tq; it sees
 * key j iff pos - left <= j <= pos + right (-1 = unbounded); the logit is scale, then softcap,
 * then ALiBi, then the mask.
 */
#ifndef FA_H
#define FA_H

#include <stdint.h>

typedef struct fa_problem {
  int32_t batch, h, hkv, d;
  int32_t tq, tk;               /* longest sequence (lse layout of the dense case) */
  int32_t total_q, total_k;
  int32_t varlen;
  int32_t window_left, window_right;
  int32_t br, bc;               /* tile rows (queries) and columns (keys) */
  float scale, softcap;
  const int32_t *cu_q, *cu_k;   /* batch + 1 offsets (synthesised when not varlen) */
  const float *alibi;           /* [batch * h] slopes, or 0 */
  /* forward */
  float *q;                     /* queries (scaled); read only, unless o == q */
  const float *k, *v;
  const float *kt;              /* K^T tiles: [hkv][tile][d][bc8], tile = kt_first[b] + kt */
  const float *vp;              /* V tiles: [hkv][tile][bc][dp], zero-padded */
  const int32_t *kt_first;      /* batch + 1: first tile of each sequence */
  float *lse;                   /* [batch, h, tq] or [h, total_q] (varlen) */
  /* backward (q, lse as above, read only) */
  const float *dout;
  const float *dvec;            /* rowsum(dO * O), laid out like lse */
  float *dk, *dv;               /* may alias k, v: a key tile's rows are written after their last read */
  float *dq;                    /* the float32 dQ accumulator, q's layout (zeroed by the engine) */
  /* attention sinks: one logit per query head, in the denominator only (core's online-softmax.ts
   * seedSinkTile: a row starts at m = sink, l = 1), or 0 */
  const float *sinks;
  /* dropout (philox.h): on when dropout_threshold > 0; kept entries scale by dropout_scale = 1/(1 - p) */
  uint32_t dropout_threshold, dropout_k0, dropout_k1, dropout_offset;
  float dropout_scale;
  /* V's head dim (v, out, dO, dV rows; q and k rows have d), and where the forward writes out:
   * [rows, h, dv] (it may be q itself when dv == d, the in-place case above) */
  int32_t dv_dim;
  float *o;
} fa_problem;

/* src/params.ts writes this struct field by field: keep the two in step. (The native build has
 * 64-bit pointers: its addon, native/addon.c, reads these same 152 bytes and rebuilds the struct.) */
#ifdef __wasm__
_Static_assert(sizeof(fa_problem) == 152, "fa_problem layout changed: update src/params.ts");
_Static_assert(__builtin_offsetof(fa_problem, scale) == 52, "fa_problem layout changed: update src/params.ts");
_Static_assert(__builtin_offsetof(fa_problem, cu_q) == 60, "fa_problem layout changed: update src/params.ts");
_Static_assert(__builtin_offsetof(fa_problem, dq) == 116, "fa_problem layout changed: update src/params.ts");
#endif

/* Columns of a score tile: bc rounded up to the 8 columns of a micro-kernel. */
static inline int32_t fa_bc8(int32_t bc) { return (bc + 7) & ~7; }
/* Row length of the tiles with D columns: D rounded up to 8. */
static inline int32_t fa_dp(int32_t d) { return (d + 7) & ~7; }

static inline int32_t fa_lse_index(const fa_problem *p, int32_t b, int32_t h, int32_t i) {
  return p->varlen ? h * p->total_q + p->cu_q[b] + i : (b * p->h + h) * p->tq + i;
}

static inline int32_t fa_max(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int32_t fa_min(int32_t a, int32_t b) { return a < b ? a : b; }

/* mask.ts keyRange: the keys query i sees, [*lo, *hi] (empty when lo > hi). */
static inline void fa_key_range(const fa_problem *p, int32_t i, int32_t tq, int32_t tk, int32_t *lo, int32_t *hi) {
  int32_t pos = i + tk - tq;
  *lo = p->window_left < 0 ? 0 : fa_max(0, pos - p->window_left);
  *hi = p->window_right < 0 ? tk - 1 : fa_min(tk - 1, pos + p->window_right);
}

/* mask.ts queryRange: the queries that see key j, [*lo, *hi]. */
static inline void fa_query_range(const fa_problem *p, int32_t j, int32_t tq, int32_t tk, int32_t *lo, int32_t *hi) {
  int32_t off = tk - tq;
  *lo = p->window_right < 0 ? 0 : fa_max(0, j - off - p->window_right);
  *hi = p->window_left < 0 ? tq - 1 : fa_min(tq - 1, j - off + p->window_left);
}

/* A function the engine calls: a WebAssembly export, or (native build) a function of the addon. */
#ifdef __wasm__
#define FA_EXPORT(name) __attribute__((export_name(#name)))
#else
#define FA_EXPORT(name)
#endif
#define FA_INLINE static inline __attribute__((always_inline))

#endif
