/*
 * Philox 4x32-10 and the dropout mask (core's philox.ts, DESIGN.md): key (seed mod 2^32,
 * seed / 2^32), counter (j / 4, i, b*H + h, offset); entry (i, j) is dropped iff output word
 * j % 4 is below floor(p * 2^32). Every engine draws the same mask.
 */
#ifndef FA_PHILOX_H
#define FA_PHILOX_H

#include "fa.h"

static inline void fa_philox4x32(uint32_t x[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * x[0], p1 = (uint64_t)0xCD9E8D57u * x[2];
    const uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k1;
    x[0] = y0;
    x[1] = (uint32_t)p1;
    x[2] = y2;
    x[3] = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/*
 * Dropout's multipliers of a tile into mk (row stride ld): keep_scale where the mask keeps entry
 * (i0 + r, j0 + c) of stream bh, 0 where it drops it; columns nc .. ld stay 0.
 */
static inline void fa_dropout_tile(const fa_problem *p, int32_t bh, int32_t i0, int32_t nr, int32_t j0, int32_t nc, float *mk, int32_t ld) {
  for (int32_t r = 0; r < nr; r++) {
    float *row = mk + r * ld;
    uint32_t w[4] = {0, 0, 0, 0};
    int32_t cached = -1;
    for (int32_t c = 0; c < nc; c++) {
      const int32_t j = j0 + c;
      if ((j >> 2) != cached) {
        cached = j >> 2;
        w[0] = (uint32_t)cached, w[1] = (uint32_t)(i0 + r), w[2] = (uint32_t)bh, w[3] = p->dropout_offset;
        fa_philox4x32(w, p->dropout_k0, p->dropout_k1);
      }
      row[c] = w[j & 3] < p->dropout_threshold ? 0.0f : p->dropout_scale;
    }
    for (int32_t c = nc; c < ld; c++) row[c] = 0.0f;
  }
}

#endif
