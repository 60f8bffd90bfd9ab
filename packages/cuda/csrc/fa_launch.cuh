// Launchers for one element policy (fa_traits.cuh); included once per policy by
// fa_fwd_<dtype>.cu / fa_bwd_<dtype>.cu so that the template instantiations spread over several
// files (parallel builds). They take the kernel view of a call (fa_api.cu: operands in the
// kernel layout, d a multiple of 8, d_out the caller's head dim).
#pragma once
#include <algorithm>
#include <type_traits>

#include "fa_bwd.cuh"
#include "fa_bwd_tma.cuh"
#include "fa_bwd_wgmma.cuh"
#include "fa_fwd.cuh"
#include "fa_fwd_tma.cuh"
#include "fa_fwd_wgmma.cuh"
#include "fa_host.h"
#include "fa_smem.cuh"

namespace fa {

template <typename K>
static cudaError_t set_smem(K kernel, size_t bytes) {
  return set_smem_limit(reinterpret_cast<const void*>(kernel), bytes);
}

static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__half) == 2, "fa_smem.cuh counts 2-byte elements");

// Split-KV: merges the partial results of the splits through their LSEs.
template <typename E>
cudaError_t launch_combine(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  if (a->num_splits <= 1) return cudaSuccess;
  const int64_t items = static_cast<int64_t>(a->total_q) * a->H;
  fwd_combine_kernel<E><<<static_cast<unsigned>((items + 7) / 8), 256, 0, st>>>(*a, t);
  FA_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename E, typename Tr>
cudaError_t launch_fwd_cfg(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  const size_t smem = fwd_smem_bytes<Tr, E::NP>();
  cudaError_t e = set_smem(fwd_kernel<E, Tr>, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((a->max_tq + Tr::BM - 1) / Tr::BM, a->H, a->B * a->num_splits);
  fwd_kernel<E, Tr><<<grid, Tr::NW * 32, smem, st>>>(*a, t);
  FA_CHECK_LAUNCH();
  return launch_combine<E>(a, t, st);
}
template <typename E, typename Tr>
cudaError_t launch_fwd_wg(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  const size_t smem = fwd_wg_smem_bytes<Tr, E::NP>();
  cudaError_t e = set_smem(fwd_wgmma_kernel<E, Tr>, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((a->max_tq + Tr::BM - 1) / Tr::BM, a->H, a->B * a->num_splits);
  fwd_wgmma_kernel<E, Tr><<<grid, Tr::NWG * 128, smem, st>>>(*a, t);
  FA_CHECK_LAUNCH();
  return launch_combine<E>(a, t, st);
}
// The tensor maps of a TMA kernel's operands: q (and dO when `dout`) in Tr::BM-row boxes, k and v
// in Tr::BN-row boxes. False when there are no rows or an operand cannot be described to the copy
// engine (no encoder in the driver, a misaligned base): the caller runs another kernel then.
struct TmaMaps {
  CUtensorMap q, k, v, dout, o;
};
template <typename E, typename Tr>
bool encode_tma_maps(const FaArgs& a, const FaTensors& t, bool dout, TmaMaps* m) {
  const bool bf16 = std::is_same<typename E::T, __nv_bfloat16>::value;
  return a.total_q > 0 && a.total_k > 0 && tma::encode_operand(&m->q, t.q, bf16, a.d, a.H, a.total_q, Tr::BM) &&
         (!dout || tma::encode_operand(&m->dout, t.dout, bf16, a.d, a.H, a.total_q, Tr::BM)) &&
         tma::encode_operand(&m->k, t.k, bf16, a.d, a.Hkv, a.total_k, Tr::BN) && tma::encode_operand(&m->v, t.v, bf16, a.d, a.Hkv, a.total_k, Tr::BN);
}

// The grid of a TMA kernel over `tiles` tiles: one CTA a tile, or (persistent, with a counter in
// k->tile_counter, which is then zeroed on the stream) one CTA per SM taking tiles from the counter.
// k->tile_counter is cleared when the kernel runs one CTA a tile.
// Tile lists longer than kMaxTiles (the kernels number tiles in 32 bits, counter included) run other
// kernels (the launchers' *ran = false).
constexpr int64_t kMaxTiles = int64_t{1} << 30;
inline cudaError_t persistent_grid(FaArgs* k, bool persist, int64_t tiles, cudaStream_t st, int64_t* ctas) {
  *ctas = tiles;
  if (!persist) k->tile_counter = nullptr;
  if (!k->tile_counter) return cudaSuccess;
  int sms = k->num_sms, dev = 0;
  if (sms <= 0 && (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)) sms = 1;
  k->num_sms = sms;  // (the backward's tile order reads it)
  *ctas = std::min<int64_t>(tiles, std::max(1, sms));
  return cudaMemsetAsync(k->tile_counter, 0, sizeof(int), st);
}

// The warp-specialised TMA forward; false in *ran when encode_tma_maps fails, and the caller runs
// another kernel.
template <typename E, typename Tr>
cudaError_t launch_fwd_tma(FaArgs* a, const FaTensors& t, cudaStream_t st, bool* ran) {
  const int64_t tiles = static_cast<int64_t>(a->H) * ((a->max_tq + Tr::BM - 1) / Tr::BM) * a->B * a->num_splits;
  TmaMaps m{};
  *ran = tiles <= kMaxTiles && encode_tma_maps<E, Tr>(*a, t, false, &m);
  if (!*ran) return cudaSuccess;
  const size_t smem = fwd_tma_smem_bytes<Tr>();
  cudaError_t e = set_smem(fwd_tma_kernel<E, Tr>, smem);
  if (e != cudaSuccess) return e;
  if (tiles <= 0) return cudaSuccess;
  FaArgs k = *a;
  int64_t ctas;
  e = persistent_grid(&k, Tr::PERSIST, tiles, st, &ctas);
  if (e != cudaSuccess) return e;
  // O by TMA stores (STORE): 16-bit outputs without splits, in 64-row boxes of d_out columns (a
  // d_out that is not a multiple of 8, or a misaligned output, keeps the threads' stores)
  const bool o_by_tma = Tr::STORE && a->num_splits == 1 &&
                        tma::encode_operand(&m.o, t.o, std::is_same<typename E::T, __nv_bfloat16>::value, a->d_out, a->H, a->total_q, 64);
  fwd_tma_kernel<E, Tr><<<static_cast<unsigned>(ctas), Tr::NT, smem, st>>>(m.q, m.k, m.v, m.o, o_by_tma, k, t);
  FA_CHECK_LAUNCH();
  return launch_combine<E>(a, t, st);
}
template <typename E, typename Tr>
cudaError_t launch_fwd_tma(FaArgs* a, const FaTensors& t, cudaStream_t st) {  // the harness's variant form
  bool ran;
  cudaError_t e = launch_fwd_tma<E, Tr>(a, t, st, &ran);
  return ran ? e : cudaErrorNotSupported;
}

template <typename E, int D>
cudaError_t launch_fwd(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  if constexpr (!E::SPLIT) {
    if (runs_tma_fwd(a->arch, E::SPLIT)) {
      bool ran;
      cudaError_t e;
      if constexpr (D == 64) {
        if (tma_fwd_wide(D, a->win_left, a->win_right, a->max_tq)) e = launch_fwd_tma<E, FwdTmaWide64>(a, t, st, &ran);
        else e = launch_fwd_tma<E, FwdTmaTraits<D>>(a, t, st, &ran);
      } else {
        e = launch_fwd_tma<E, FwdTmaTraits<D>>(a, t, st, &ran);
      }
      if (ran) return e;
    }
  }
  if constexpr (has_wgmma_fwd(D)) {
    if (runs_wgmma_fwd(a->arch, D)) return launch_fwd_wg<E, FwdWgTraits<D, E::SPLIT>>(a, t, st);
  }
  return launch_fwd_cfg<E, FwdTraits<D, E::SPLIT>>(a, t, st);
}

template <typename E>
cudaError_t bwd_pre(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  return launch_bwd_preprocess<typename E::TO>(*a, t, st);
}
template <typename E, int D>
cudaError_t bwd_post(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  const int64_t items = static_cast<int64_t>(a->total_q) * a->H;
  if (a->dq_tiled) {  // (only the TMA backward tiles its accumulator: 16-bit operands)
    if constexpr (sizeof(typename E::TO) != 2) return cudaErrorNotSupported;
    else {
      dim3 grid((a->max_tq + DqTiles::BM - 1) / DqTiles::BM, a->H, a->B);
      if (a->max_tq > 0) {
        bwd_convert_dq_tiled_kernel<E, D><<<grid, 256, 0, st>>>(*a, t);
        FA_CHECK_LAUNCH();
      }
    }
  } else if (a->deterministic) {
    using Tq = DqTraits<D, E::SPLIT>;
    const size_t smem = dq_smem_bytes<D, E::SPLIT>();
    cudaError_t e = set_smem(bwd_dq_kernel<E, D>, smem);
    if (e != cudaSuccess) return e;
    dim3 grid((a->max_tq + Tq::BM - 1) / Tq::BM, a->H, a->B);
    if (a->max_tq > 0) {
      bwd_dq_kernel<E, D><<<grid, Tq::NW * 32, smem, st>>>(*a, t);
      FA_CHECK_LAUNCH();
    }
  } else if (items > 0) {
    const int64_t n = items * a->d / 2;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65536));
    bwd_convert_dq_kernel<E><<<blocks, 256, 0, st>>>(*a, t);
    FA_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

template <typename E, typename Tr>
cudaError_t launch_bwd_cfg(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  a->dq_tiled = 0;  // its dQ accumulator is [total_q, H, d] (cleared by bwd_pre)
  cudaError_t e = bwd_pre<E>(a, t, st);
  if (e != cudaSuccess) return e;
  const size_t smem = bwd_smem_bytes<Tr, E::NP>();
  e = set_smem(bwd_kernel<E, Tr>, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((a->max_tk + Tr::BN - 1) / Tr::BN, a->Hkv, a->B);
  if (a->max_tk > 0) {
    bwd_kernel<E, Tr><<<grid, Tr::NW * 32, smem, st>>>(*a, t);
    FA_CHECK_LAUNCH();
  }
  return bwd_post<E, Tr::D>(a, t, st);
}

template <typename E, typename Tr>
cudaError_t launch_bwd_wg(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  a->dq_tiled = 0;  // its dQ accumulator is [total_q, H, d] (cleared by bwd_pre)
  cudaError_t e = bwd_pre<E>(a, t, st);
  if (e != cudaSuccess) return e;
  const size_t smem = bwd_wg_smem_bytes<Tr, E::NP>();
  e = set_smem(bwd_wgmma_kernel<E, Tr>, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((a->max_tk + Tr::BN - 1) / Tr::BN, a->Hkv, a->B);
  if (a->max_tk > 0) {
    bwd_wgmma_kernel<E, Tr><<<grid, Tr::NWG * 128, smem, st>>>(*a, t);
    FA_CHECK_LAUNCH();
  }
  return bwd_post<E, Tr::D>(a, t, st);
}

// The warp-specialised TMA backward; false in *ran when encode_tma_maps fails, and the caller runs
// another kernel.
template <typename E, typename Tr>
cudaError_t launch_bwd_tma(FaArgs* a, const FaTensors& t, cudaStream_t st, bool* ran) {
  // DQ_BULK: dQ into the tiled accumulator (also when deterministic, ordered by dq_sem), which
  // bwd_setup planned (dq_tiled) or not: then another backward runs
  const bool planned = a->dq_tiled;
  a->dq_tiled = 0;
  const int64_t tiles = static_cast<int64_t>((a->max_tk + Tr::BN - 1) / Tr::BN) * a->Hkv * a->B;
  TmaMaps m{};
  *ran = (!Tr::DQ_BULK || planned) && tiles <= kMaxTiles && encode_tma_maps<E, Tr>(*a, t, true, &m);
  if (!*ran) return cudaSuccess;
  a->dq_tiled = Tr::DQ_BULK;
  if (a->dq_tiled) {
    cudaError_t e = cudaMemsetAsync(a->dq_accum, 0, DqTiles::floats(a->total_q, a->B, a->H, Tr::D) * sizeof(float), st);
    if (e == cudaSuccess && a->deterministic) e = cudaMemsetAsync(a->dq_sem, 0, DqTiles::tiles(a->total_q, a->B) * a->H * sizeof(int), st);
    if (e != cudaSuccess) return e;
  }
  cudaError_t e = bwd_pre<E>(a, t, st);
  if (e != cudaSuccess) return e;
  // a call without soft-cap and ALiBi runs the instance whose loop has only the plain element math
  const bool mods = !Tr::PLAIN_KERNEL || a->softcap > 0.f || a->alibi != nullptr;
  auto kernel = mods ? bwd_tma_kernel<E, Tr, true> : bwd_tma_kernel<E, Tr, false>;
  const size_t smem = bwd_tma_smem_bytes<Tr>();
  e = set_smem(kernel, smem);
  if (e != cudaSuccess) return e;
  if (tiles > 0) {
    FaArgs k = *a;
    int64_t ctas;
    e = persistent_grid(&k, Tr::PERSIST, tiles, st, &ctas);
    if (e != cudaSuccess) return e;
    kernel<<<static_cast<unsigned>(ctas), 384, smem, st>>>(m.q, m.k, m.v, m.dout, k, t);
  }
  FA_CHECK_LAUNCH();
  return bwd_post<E, Tr::D>(a, t, st);  // (deterministic without tiles: bwd_post's dQ kernel)
}
template <typename E, typename Tr>
cudaError_t launch_bwd_tma(FaArgs* a, const FaTensors& t, cudaStream_t st) {  // the harness's variant form
  bool ran;
  cudaError_t e = launch_bwd_tma<E, Tr>(a, t, st, &ran);
  return ran ? e : cudaErrorNotSupported;
}

template <typename E, int D>
cudaError_t launch_bwd(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  if constexpr (!E::SPLIT && has_tma_bwd(D)) {
    if (runs_tma_bwd(a->arch, E::SPLIT, D, a->no_wgmma_bwd)) {
      bool ran;
      cudaError_t e = launch_bwd_tma<E, BwdTmaTraits<D>>(a, t, st, &ran);
      if (ran) return e;
    }
  }
  if constexpr (has_wgmma_bwd(D)) {
    if (runs_wgmma_bwd(a->arch, D, a->no_wgmma_bwd)) return launch_bwd_wg<E, BwdWgTraits<D, E::SPLIT>>(a, t, st);
  }
  return launch_bwd_cfg<E, BwdTraits<D, E::SPLIT>>(a, t, st);
}

template <typename E>
cudaError_t dispatch_fwd(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  switch (head_dim_bucket(a->d)) {
    case 64: return launch_fwd<E, 64>(a, t, st);
    case 128: return launch_fwd<E, 128>(a, t, st);
    case 256: return launch_fwd<E, 256>(a, t, st);
    default: return cudaErrorInvalidValue;
  }
}
template <typename E>
cudaError_t dispatch_bwd(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  switch (head_dim_bucket(a->d)) {
    case 64: return launch_bwd<E, 64>(a, t, st);
    case 128: return launch_bwd<E, 128>(a, t, st);
    case 256: return launch_bwd<E, 256>(a, t, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fa
