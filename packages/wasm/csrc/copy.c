/*
 * The yardstick of a decode step: reading the same cache bytes with nothing else to do. A decode
 * step reads every cached K and V row once and does little arithmetic per byte, so its speed is
 * best judged against a copy of those bytes on the same threads: the engine's copyLoop() walks
 * the rows a KV-cache call reads (through its block table) in ranges, and each thread copies its
 * ranges into its own small buffer (KV_COPY_BYTES, which stays in L1/L2: what is measured is the
 * cost of reading the bytes, as in packages/core/bench/decode.mjs).
 *
 *   method 0: a SIMD128 loop, four v128 loads and four stores per 64 bytes;
 *   method 1: memory.copy (bulk memory; V8 calls its memmove).
 */
#include "fa.h"
#include <wasm_simd128.h>

/* Copies n bytes from src into the ring buffer dst of ring bytes (a multiple of 64). */
FA_EXPORT(fa_copy_range) void fa_copy_range(const uint8_t *src, int32_t n, uint8_t *dst, int32_t ring, int32_t method) {
  int32_t o = 0;
  if (method == 1) {
    while (n > 0) {
      const int32_t k = n < ring ? n : ring;
      __builtin_memcpy(dst, src, (unsigned long)k);
      src += k;
      n -= k;
    }
    return;
  }
  int32_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const v128_t a = wasm_v128_load(src + i), b = wasm_v128_load(src + i + 16);
    const v128_t c = wasm_v128_load(src + i + 32), d = wasm_v128_load(src + i + 48);
    wasm_v128_store(dst + o, a);
    wasm_v128_store(dst + o + 16, b);
    wasm_v128_store(dst + o + 32, c);
    wasm_v128_store(dst + o + 48, d);
    o += 64;
    if (o == ring) o = 0;
  }
  for (; i < n; i++) dst[o + (i & 63)] = src[i];
}
