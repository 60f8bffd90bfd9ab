/*
 * fa_kv: a KV-cache call's description (kvcache.c), an fa_problem followed by the cache fields.
 * src/params.ts writeKVProblem writes it; the native build's addon (native/addon.c) reads the same
 * bytes and rebuilds it with 64-bit pointers.
 */
#ifndef FA_KVCACHE_H
#define FA_KVCACHE_H

#include "fa.h"

typedef struct fa_kv {
  /* batch, h, hkv, d, tq, tk (longest), window, scale, softcap, alibi; q: the scaled queries
   * [batch, tq, h, d], which the output overwrites; lse: [batch, h, tq] */
  fa_problem base;
  int32_t dtype;                  /* of the caches: FA_F32, FA_F16, FA_BF16 */
  int32_t block_size, max_blocks; /* a contiguous cache: block_size = capacity, max_blocks = 1 */
  int32_t tnew;                   /* tokens appended per sequence (already written) */
  int32_t qt, rows, chunk;        /* the plan: queries per tile, rows per kv head, keys per chunk */
  int32_t heads;                  /* kv heads per unit (fa_kv_unit's kvh1 - kvh0 at most) */
  const int32_t *lens;            /* [batch]: cached tokens before the append */
  const int32_t *table;           /* [batch * max_blocks] */
  const void *k_cache, *v_cache;  /* [num_blocks, block_size, hkv, d] in dtype */
  float *pm, *pl, *pacc;          /* partial states: [slots][rows], [slots][rows], [slots][rows][dp] */
  const int32_t *leftpad;         /* [batch] cacheLeftpad (keys start at that row), or 0 */
} fa_kv;

/* src/params.ts writeKVProblem writes this struct field by field: keep the two in step. */
#ifdef __wasm__
_Static_assert(sizeof(fa_kv) == 216, "fa_kv layout changed: update src/params.ts");
_Static_assert(__builtin_offsetof(fa_kv, lens) == 184, "fa_kv layout changed: update src/params.ts");
#endif


int32_t fa_kv_scratch_bytes(const fa_kv *kv);
void fa_kv_unit(const fa_kv *kv, float *scratch, int32_t b, int32_t kvh0, int32_t kvh1, int32_t t, int32_t c, int32_t slot0);
void fa_kv_combine(const fa_kv *kv, float *scratch, int32_t b, int32_t kvh, int32_t t, int32_t slot0, int32_t chunks);

#endif
