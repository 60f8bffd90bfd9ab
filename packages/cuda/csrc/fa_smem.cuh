// Dynamic shared memory of every kernel, from its tile traits: one formula per kernel, used by
// the launchers (cudaFuncSetAttribute) and by smem_needs() (fa_api.cu), which lets supports()
// decline a head dim whose kernels need more shared memory per block than the GPU offers
// (e.g. the D = 256 backward's 209 KB on an sm_86 card with 99 KB).
#pragma once
#include <stddef.h>

#include "fa_bwd_wgmma.cuh"

namespace fa {

// Elements are 2 bytes for both f16 and bf16.
template <typename Tr>
constexpr size_t fwd_smem_bytes() { return static_cast<size_t>(Tr::BM * Tr::D + 4 * Tr::BN * Tr::D) * 2; }
template <typename Tr>
constexpr size_t fwd_wg_smem_bytes() { return static_cast<size_t>(Tr::BM * Tr::D + 2 * Tr::STAGES * Tr::BN * Tr::D) * 2; }
template <typename Tr, int D = Tr::D>
constexpr size_t bwd_smem_bytes() {
  return static_cast<size_t>(2 * Tr::BN * D + 4 * Tr::BM * D + 2 * Tr::BN * Tr::BM) * 2 + 4 * Tr::BM * sizeof(float);
}
template <typename Tr, int D = Tr::D>
constexpr size_t bwd_wg_smem_bytes() {
  return static_cast<size_t>(2 * Tr::BN * D + 4 * Tr::BM * D + Tr::BN * Tr::BM) * 2 + 4 * Tr::BM * sizeof(float);
}
template <int D>
constexpr size_t dq_smem_bytes() { return static_cast<size_t>(2 * DqTraits<D>::BM * D + 4 * DqTraits<D>::BN * D) * 2; }

}  // namespace fa
