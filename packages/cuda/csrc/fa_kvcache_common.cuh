// What both KV-cache attention kernels share (the tensor-core one in fa_kvcache.cuh, the FFMA one
// in fa_kvcache_ffma.cuh): the device-index range checks, the in-place append, the keys a query
// row may see, a warp's key tiles and their rows in the cache, and the split-KV heuristic.
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

// One warp's keys in a KV-cache kernel, and where their rows lie in the cache (both kernels read
// the cache this way). The CTA's key range [klo, khi] is cut into BNW-key warp tiles from t_base;
// split `split` of num_splits takes a run of them, warp w of NW takes tiles s_lo + w, + NW, ...
// (cnt of them); lane k resolves key k of a tile (lanes >= BNW none).
template <int NW, int BNW>
struct KvWarpKeys {
  const KvArgs& a;
  int b, g, warp, lane, klo, khi;
  int t_base = 0, s_lo = 0, cnt = 0;
  const int* tbl;  // the sequence's block-table row; nullptr: contiguous cache, block b

  __device__ __forceinline__ KvWarpKeys(const KvArgs& a_, int split, int b_, int g_, int warp_, int lane_, int klo_, int khi_)
      : a(a_), b(b_), g(g_), warp(warp_), lane(lane_), klo(klo_), khi(khi_) {
    int n_tiles = 0;
    if (khi >= klo) {
      t_base = (klo / BNW) * BNW;
      n_tiles = (khi - t_base) / BNW + 1;
    }
    const int per = (n_tiles + a.num_splits - 1) / a.num_splits;
    s_lo = min(n_tiles, split * per);
    const int s_hi = min(n_tiles, s_lo + per);
    cnt = s_hi > s_lo + warp ? (s_hi - s_lo - warp + NW - 1) / NW : 0;
    tbl = a.block_table ? a.block_table + static_cast<int64_t>(b) * a.max_blocks : nullptr;
  }
  // The first key of this warp's tile n.
  __device__ __forceinline__ int key0(int n) const { return t_base + (s_lo + warp + n * NW) * BNW; }
  // The raw block of lane's key in tile n (-1: none), loaded a tile or two ahead of its use.
  __device__ __forceinline__ int fetch(int n) const {
    const int tt = key0(n) + lane;
    if (n >= cnt || lane >= BNW || tt < klo || tt > khi) return -1;
    return tbl ? __ldg(tbl + tt / a.block_size) : b;
  }
  // The element offset of lane's key row (kv head g) in tile n < cnt, from fetch(n); -1: the row
  // is zero-filled (a key outside [klo, khi], or a block out of range, which is reported). d is
  // a.d or the kernel's copy of it, taken by reference so that it is read only where it is used
  // (each kernel's machine code is the same as with this code written inline).
  __device__ __forceinline__ long long row_offset(int n, int blk, const int& d) const {
    const int tt = key0(n) + lane;
    long long ro = -1;
    if (lane < BNW && tt >= klo && tt <= khi) {
      if (blk < 0 || blk >= a.num_blocks) {
        kv_report_bad(a);
      } else {
        const int row = tbl ? tt % a.block_size : tt;
        ro = ((static_cast<long long>(blk) * a.block_size + row) * a.Hkv + g) * d;
      }
    }
    return ro;
  }
};

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
