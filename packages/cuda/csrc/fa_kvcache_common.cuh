// What both KV-cache attention kernels share (the tensor-core one in fa_kvcache.cuh, the FFMA one
// in fa_kvcache_ffma.cuh): the device-index range checks, the in-place append, the keys a query
// row may see, and the split-KV heuristic.
#pragma once
#include <algorithm>
#include <cmath>

#include "fa_common.cuh"
#include "fa_kvcache.h"

namespace fa {

// The widest copy (16, 8, 4 or 2 bytes) that divides a row of d elements of es bytes: rows of the
// caller's [.., Hkv, d] tensors start at multiples of d·es bytes, so chunks of this size stay
// aligned for every head dim (16 for f16/bf16 with d % 8 == 0 and f32 with d % 4 == 0).
__host__ __device__ __forceinline__ int kv_vec_bytes(int d, int es) {
  int vb = 16;
  while ((d * es) % vb != 0) vb >>= 1;
  return vb;
}

__device__ __forceinline__ void kv_report_bad(const KvArgs& a) {
  if (a.bad_index) *reinterpret_cast<volatile int*>(a.bad_index) = 1;
}

// The sequence's key count len + tnew from the device copy of the lengths; a length out of range
// is reported and the sequence attended as empty (nothing is read).
__device__ __forceinline__ int kv_keys(const KvArgs& a, int b) {
  const int cap = a.block_size * a.max_blocks;
  const int len = a.seqlens[b];
  if (len < 0 || len > cap - a.tnew) {
    kv_report_bad(a);
    return 0;
  }
  return len + a.tnew;
}

template <int VB>
struct KvChunk;
template <>
struct KvChunk<16> { using type = uint4; };
template <>
struct KvChunk<8> { using type = uint2; };
template <>
struct KvChunk<4> { using type = uint32_t; };
template <>
struct KvChunk<2> { using type = uint16_t; };

// Writes kNew/vNew at positions len[b] .. len[b] + tnew - 1 of each sequence: one thread per
// VB-byte chunk (kv_vec_bytes). Runs as its own launch before the attention kernel, so every
// sequence's rows are written before any sequence attends.
template <typename T, int VB>
__global__ void kv_append_kernel(KvArgs a, KvTensors t) {
  using V = typename KvChunk<VB>::type;
  constexpr int EPC = VB / static_cast<int>(sizeof(T));  // elements per chunk
  static_assert(EPC >= 1, "a chunk holds whole elements");
  const int cpr = a.d / EPC;  // chunks per (token, kv head)
  const int64_t n = static_cast<int64_t>(a.B) * a.tnew * a.Hkv * cpr;
  const int cap = a.block_size * a.max_blocks;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < n; x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(x % cpr);
    int64_t rest = x / cpr;
    const int g = static_cast<int>(rest % a.Hkv);
    rest /= a.Hkv;
    const int tt = static_cast<int>(rest % a.tnew);
    const int b = static_cast<int>(rest / a.tnew);
    const int len = a.seqlens[b];
    if (len < 0 || len > cap - a.tnew) {
      kv_report_bad(a);
      continue;
    }
    const int pos = len + tt;
    const int blk = a.block_table ? a.block_table[static_cast<int64_t>(b) * a.max_blocks + pos / a.block_size] : b;
    if (blk < 0 || blk >= a.num_blocks) {
      kv_report_bad(a);
      continue;
    }
    const int row = a.block_table ? pos % a.block_size : pos;
    const int64_t dst = ((static_cast<int64_t>(blk) * a.block_size + row) * a.Hkv + g) * a.d + c * EPC;
    const int64_t src = ((static_cast<int64_t>(b) * a.tnew + tt) * a.Hkv + g) * a.d + c * EPC;
    *reinterpret_cast<V*>(static_cast<T*>(t.k_cache) + dst) = *reinterpret_cast<const V*>(static_cast<const T*>(t.k_new) + src);
    *reinterpret_cast<V*>(static_cast<T*>(t.v_cache) + dst) = *reinterpret_cast<const V*>(static_cast<const T*>(t.v_new) + src);
  }
}

// Keys [lo, hi] that query i of a sequence with tk keys may see (hi < lo: none).
__device__ __forceinline__ int kv_key_lo(const KvArgs& a, int i, int off, int tk) {
  if (a.win_left < 0) return 0;
  const long long v = static_cast<long long>(i) + off - a.win_left;
  return static_cast<int>(v < 0 ? 0 : v > tk ? tk : v);
}
__device__ __forceinline__ int kv_key_hi(const KvArgs& a, int i, int off, int tk) {
  long long v = tk - 1;
  if (a.win_right >= 0) v = min(v, static_cast<long long>(i) + off + a.win_right);
  return static_cast<int>(v < -1 ? -1 : v);
}

// ---- host side: the split heuristic (shared by kv_workspace_bytes and the harness variants) ----

// CTAs of NW warps with `smem` bytes of shared memory one SM holds (registers are set by
// __launch_bounds__; min_blocks is the answer when the device cannot be asked).
inline int kv_ctas_per_sm(size_t smem, int nw, int min_blocks) {
  int dev = 0, smem_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess) {
    cudaGetLastError();
    return min_blocks;
  }
  const int by_smem = smem_sm / static_cast<int>(smem + 1024);
  return std::max(1, std::min(by_smem, 2048 / (nw * 32)));
}

// Splits of the key range (FlashAttention's rule: the fewest splits whose last wave is nearly
// full), only when B·Hkv·(M tiles) CTAs leave SMs idle, and only while each warp keeps >= 4
// tiles of keys per split. Tr: a configuration with ROWS (query rows per CTA), NW and BNW.
template <typename Tr>
inline int kv_choose_splits(const KvArgs& a, int ctas_per_sm) {
  const int64_t mtiles = (static_cast<int64_t>(a.H / a.Hkv) * a.tq + Tr::ROWS - 1) / Tr::ROWS;
  const int64_t ctas = mtiles * a.Hkv * a.B;
  const int64_t n_tiles = (static_cast<int64_t>(a.max_tk) + Tr::BNW - 1) / Tr::BNW;
  int64_t max_s = std::min<int64_t>(128, n_tiles / (4 * Tr::NW));
  max_s = std::min<int64_t>(max_s, 2147483647 / std::max<int64_t>(1, mtiles));
  if (ctas <= 0 || max_s <= 1) return 1;
  const double slots = static_cast<double>(std::max(1, a.num_sms) * ctas_per_sm);
  auto eff = [&](int64_t s) {
    const double waves = static_cast<double>(ctas * s) / slots;
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int64_t s = 1; s <= max_s; ++s) best = std::max(best, eff(s));
  for (int64_t s = 1; s <= max_s; ++s)
    if (eff(s) >= 0.95 * best) return static_cast<int>(s);
  return 1;
}

}  // namespace fa
