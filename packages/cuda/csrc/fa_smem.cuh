// Dynamic shared memory of every kernel, from its tile traits (fa_traits.cuh): one formula per
// kernel, used by the launchers (cudaFuncSetAttribute) and by smem_needs() (fa_api.cu), which
// lets supports() decline a head dim whose kernels need more shared memory per block than the
// GPU offers (e.g. the D = 256 backward's 209 KB on an sm_86 card with 99 KB) and lets the f32
// plan fall back to the FFMA kernels where the split kernels do not fit.
#pragma once
#include <stddef.h>

#include "fa_tma.cuh"  // tma::TileRing
#include "fa_traits.cuh"

namespace fa {

// Tensor-core operands are 2-byte elements (f16 or bf16); a split f32 operand has NP = 2 planes.
template <typename Tr, int NP>
constexpr size_t fwd_smem_bytes() { return static_cast<size_t>(Tr::BM * Tr::D + 4 * Tr::BN * Tr::D) * 2 * NP; }
template <typename Tr, int NP>
constexpr size_t fwd_wg_smem_bytes() { return static_cast<size_t>(Tr::BM * Tr::D + 2 * Tr::STAGES * Tr::BN * Tr::D) * 2 * NP; }
// the TMA forward adds its mbarriers (8 bytes each) and the tile ring's slots after the tiles
template <typename Tr>
constexpr size_t fwd_tma_smem_bytes() {  // tiles, the mbarriers (Q full/empty, 4 per stage, the tile ring's), the ring's slots
  return static_cast<size_t>((Tr::STORE ? 2 : 1) * Tr::BM * Tr::D + 2 * Tr::STAGES * Tr::BN * Tr::D) * 2 +
         (2 + 4 * Tr::STAGES + tma::TileRing::kBars) * 8 + tma::TileRing::kSlots * sizeof(int);  // (STORE: the O tile)
}
template <typename Tr, int NP>
constexpr size_t bwd_smem_bytes() {
  return static_cast<size_t>(2 * Tr::BN * Tr::D + 4 * Tr::BM * Tr::D + 2 * Tr::BN * Tr::BM) * 2 * NP + 4 * Tr::BM * sizeof(float);
}
template <typename Tr, int NP>
constexpr size_t bwd_wg_smem_bytes() {
  return static_cast<size_t>(2 * Tr::BN * Tr::D + 4 * Tr::BM * Tr::D + Tr::BN * Tr::BM) * 2 * NP + 4 * Tr::BM * sizeof(float);
}
// the TMA backward: K, V, the Q and dO rings, two dS^T buffers, the dQ blocks (DQ_BULK: BM x 64
// floats per warpgroup with dQ columns), the rings' LSE and Dsum rows, then its mbarriers and the
// tile ring's slots
template <typename Tr>
constexpr size_t bwd_tma_smem_bytes() {
  return static_cast<size_t>(2 * Tr::BN * Tr::D + 2 * Tr::STAGES * Tr::BM * Tr::D + 2 * Tr::BN * Tr::BM) * 2 +
         (Tr::DQ_BULK ? Tr::DQ_WRITERS * Tr::D / 64 * Tr::BM * 64 * sizeof(float) : 0) + 2 * Tr::STAGES * Tr::BM * sizeof(float) + (2 + 4 * Tr::STAGES + tma::TileRing::kBars) * 8 +
         tma::TileRing::kSlots * sizeof(int);  // mbarriers: K/V full/empty, 4 per stage, the tile ring's; its slots
}
template <int D, bool SPLIT>
constexpr size_t dq_smem_bytes() {
  using Tr = DqTraits<D, SPLIT>;
  return static_cast<size_t>(2 * Tr::BM * D + 4 * Tr::BN * D) * 2 * (SPLIT ? 2 : 1);
}

// FFMA kernels (fa_ffma.cuh), float32, for head dim d: rows of q (and dO) [BM][d], key tiles with
// rows padded to an odd stride (d | 1) so that one-lane-per-key reads are conflict-free.
inline size_t ffma_fwd_smem_bytes(int d) {
  using F = FfmaTraits;
  return static_cast<size_t>(F::BM * d + F::BN * (d | 1) + F::BN * d) * sizeof(float);
}
inline size_t ffma_bwd_smem_bytes(int d) {  // the larger of the dQ and the dK/dV kernels
  using F = FfmaTraits;
  const size_t dq = static_cast<size_t>(2 * F::BM * d + 2 * F::BN * (d | 1)) * sizeof(float);
  const size_t dkv = static_cast<size_t>(2 * F::BM * d + 2 * F::BN * (d | 1) + 2 * F::BN) * sizeof(float);
  return dq > dkv ? dq : dkv;
}

}  // namespace fa
