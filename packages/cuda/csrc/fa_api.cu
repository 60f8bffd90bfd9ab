// Host entry points: the plan of a call (fa_api.h), head-dim buckets, the split-KV heuristic,
// workspaces, operand preparation and dtype dispatch.
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "fa_host.h"
#include "fa_launch.cuh"

namespace fa {

cudaError_t set_smem_limit(const void* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> set;  // the limit each (kernel, device) has
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lk(mu);
  size_t& have = set[{kernel, dev}];
  if (have >= bytes) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess) have = bytes;
  return e;
}

int head_dim_bucket(int d) {
  if (d <= 0 || d > 256) return 0;
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

namespace {

size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }

// Shared memory of the tensor-core kernels one direction runs, for head-dim bucket D and policy.
template <int D, bool SPLIT>
SmemNeeds tc_needs(int arch, int no_wgmma_bwd) {
  constexpr int NP = SPLIT ? 2 : 1;
  SmemNeeds n{};
  n.fwd = fwd_smem_bytes<FwdTraits<D, SPLIT>, NP>();
  n.bwd = bwd_smem_bytes<BwdTraits<D, SPLIT>, NP>();
  if constexpr (has_wgmma_fwd(D)) {
    if (runs_wgmma_fwd(arch, D)) n.fwd = fwd_wg_smem_bytes<FwdWgTraits<D, SPLIT>, NP>();
  }
  if (runs_tma_fwd(arch, SPLIT)) n.fwd = std::max(fwd_tma_smem_bytes<FwdTmaTraits<D>>(), D == 64 ? fwd_tma_smem_bytes<FwdTmaWide64>() : 0);
  if constexpr (has_wgmma_bwd(D)) {
    if (runs_wgmma_bwd(arch, D, no_wgmma_bwd)) n.bwd = bwd_wg_smem_bytes<BwdWgTraits<D, SPLIT>, NP>();
  }
  n.bwd_deterministic = std::max(n.bwd, dq_smem_bytes<D, SPLIT>());
  if constexpr (has_tma_bwd(D)) {
    if (runs_tma_bwd(arch, SPLIT, D, no_wgmma_bwd)) {
      n.bwd = bwd_tma_smem_bytes<BwdTmaTraits<D>>();
      n.bwd_deterministic = std::max(n.bwd, dq_smem_bytes<D, SPLIT>());  // (the dQ kernel after another backward, when the TMA one cannot run)
    }
  }
  return n;
}
SmemNeeds tc_needs(int arch, int d, bool split, int no_wgmma_bwd) {
  switch (head_dim_bucket(d)) {
    case 64: return split ? tc_needs<64, true>(arch, no_wgmma_bwd) : tc_needs<64, false>(arch, no_wgmma_bwd);
    case 128: return split ? tc_needs<128, true>(arch, no_wgmma_bwd) : tc_needs<128, false>(arch, no_wgmma_bwd);
    case 256: return split ? tc_needs<256, true>(arch, no_wgmma_bwd) : tc_needs<256, false>(arch, no_wgmma_bwd);
    default: return SmemNeeds{0, 0, 0};
  }
}

// What one direction of a call runs (see fa_api.h).
struct Plan {
  bool ffma;   // f32 on the FFMA kernels, on the caller's tensors
  bool split;  // f32 on the tensor cores: operands split into f16 (hi, lo) planes
  bool pad;    // f16/bf16 operands copied with zero columns up to kd
  int kd;      // the kernels' head dim (a multiple of 8)
};
Plan plan_of(const FaArgs& a, bool backward) {
  Plan p{};
  p.kd = (a.d + 7) / 8 * 8;
  if (a.dtype != kF32) {
    p.pad = p.kd != a.d;
    return p;
  }
  if (a.f32_path == kF32Ffma) {
    p.ffma = true;
  } else if (a.f32_path == kF32TensorCores || a.smem_limit == 0) {
    p.split = true;
  } else {
    const SmemNeeds n = tc_needs(a.arch, p.kd, true, a.no_wgmma_bwd);
    const size_t need = !backward ? n.fwd : a.deterministic ? n.bwd_deterministic : n.bwd;
    p.split = need <= a.smem_limit;
    p.ffma = !p.split;
  }
  if (p.ffma) p.kd = a.d;
  return p;
}
// The kernel view of a call: operand layout d = kd, outputs in the caller's d.
// A window at least as wide as both sequences together bounds nothing: it becomes -1, so the
// kernels' 32-bit key and query ranges (key_block_range, visible) never see windows near INT_MAX.
static int effective_window(int w, const FaArgs& a) { return w > static_cast<int64_t>(a.max_tq) + a.max_tk ? -1 : w; }
FaArgs kernel_args(const FaArgs& a, const Plan& p) {
  FaArgs k = a;
  k.d = p.kd;
  k.d_out = a.d;
  k.win_left = effective_window(a.win_left, a);
  k.win_right = effective_window(a.win_right, a);
  return k;
}
size_t prep_size(const FaArgs& a, const Plan& p, bool backward) { return p.split || p.pad ? prep_bytes(a, p.kd, p.split, backward) : 0; }

// The forward's tile (query rows x keys per CTA) for head-dim bucket D, as launch_fwd picks it.
template <int D, bool SPLIT>
void fwd_tile(const FaArgs& a, int* BM, int* BN) {
  const int arch = a.arch;
  if (runs_tma_fwd(arch, SPLIT)) {
    const bool wide = tma_fwd_wide(D, effective_window(a.win_left, a), effective_window(a.win_right, a), a.max_tq);
    *BM = wide ? FwdTmaWide64::BM : FwdTmaTraits<D>::BM;
    *BN = wide ? FwdTmaWide64::BN : FwdTmaTraits<D>::BN;
    return;
  }
  if constexpr (has_wgmma_fwd(D)) {
    if (runs_wgmma_fwd(arch, D)) {
      *BM = FwdWgTraits<D, SPLIT>::BM;
      *BN = FwdWgTraits<D, SPLIT>::BN;
      return;
    }
  }
  *BM = FwdTraits<D, SPLIT>::BM;
  *BN = FwdTraits<D, SPLIT>::BN;
}
template <bool SPLIT>
void fwd_tile(const FaArgs& a, int D, int* BM, int* BN) {
  if (D == 64) fwd_tile<64, SPLIT>(a, BM, BN);
  else if (D == 128) fwd_tile<128, SPLIT>(a, BM, BN);
  else fwd_tile<256, SPLIT>(a, BM, BN);
}

size_t split_kv_bytes(const FaArgs& a, int kd) {
  if (a.num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(a.total_q) * a.H * a.num_splits;
  return align256(rows * kd * sizeof(float)) + align256(rows * sizeof(float));
}

}  // namespace

// The persistent TMA forward's tile counter, after the prepared operands and the split partials.
static size_t tile_counter_bytes(const FaArgs& a, const Plan& p) { return !p.ffma && runs_tma_fwd(a.arch, p.split) ? 256 : 0; }

size_t fwd_workspace_bytes_splits(FaArgs* a, int splits) {
  const Plan p = plan_of(*a, false);
  a->num_splits = p.ffma ? 1 : std::max(1, splits);
  return prep_size(*a, p, false) + split_kv_bytes(*a, p.kd) + tile_counter_bytes(*a, p);
}

size_t fwd_workspace_bytes(FaArgs* a) {
  const Plan p = plan_of(*a, false);
  int splits = 1;
  if (!p.ffma) {
    int BM, BN;
    const int D = head_dim_bucket(p.kd);
    if (p.split) fwd_tile<true>(*a, D, &BM, &BN);
    else fwd_tile<false>(*a, D, &BM, &BN);
    const int64_t mblocks = (a->max_tq + BM - 1) / BM;
    const int64_t ctas = mblocks * a->H * a->B;
    const int64_t nblocks = (a->max_tk + BN - 1) / BN;
    const int sms = a->num_sms > 0 ? a->num_sms : 132;
    if (ctas > 0 && ctas < sms && nblocks >= 8) {
      int64_t want = (2 * sms + ctas - 1) / ctas;
      want = std::min<int64_t>(want, nblocks / 4);
      want = std::min<int64_t>(want, 64);
      want = std::min<int64_t>(want, 65535 / std::max(1, a->B));
      splits = static_cast<int>(std::max<int64_t>(1, want));
    }
  }
  return fwd_workspace_bytes_splits(a, splits);
}

cudaError_t fwd(FaArgs* a, const FaTensors& t, void* ws, cudaStream_t st) {
  const Plan p = plan_of(*a, false);
  FaArgs k = kernel_args(*a, p);
  if (p.ffma) {
    a->num_splits = k.num_splits = 1;
    k.oaccum = k.lseaccum = nullptr;
    if (a->total_q == 0) return cudaSuccess;
    return ffma_fwd(&k, t, st);
  }
  char* w = static_cast<char*>(ws);
  const size_t prep = prep_size(*a, p, false);
  if (k.num_splits > 1) {
    const size_t rows = static_cast<size_t>(a->total_q) * a->H * a->num_splits;
    k.oaccum = reinterpret_cast<float*>(w + prep);
    k.lseaccum = reinterpret_cast<float*>(w + prep + align256(rows * p.kd * sizeof(float)));
  } else {
    k.oaccum = nullptr;
    k.lseaccum = nullptr;
  }
  k.tile_counter = tile_counter_bytes(*a, p) ? reinterpret_cast<int*>(w + prep + split_kv_bytes(*a, p.kd)) : nullptr;
  if (a->total_q == 0) return cudaSuccess;
  FaTensors kt = t;
  if (prep > 0) {
    cudaError_t e = prepare_operands(&k, &kt, t, p.split, false, w, st);
    if (e != cudaSuccess) return e;
  }
  switch (a->dtype) {
    case kBF16: return fwd_bf16(&k, kt, st);
    case kF16: return fwd_f16(&k, kt, st);
    default: return fwd_f32(&k, kt, st);
  }
}

// The backward's float32 dQ accumulator: whether there is one, its size, and whether it holds the
// TMA kernel's tiles (bwd_setup sets FaArgs::dq_tiled; the launchers run the TMA backward only
// then; deterministic calls then also get a counter per tile and head after it). One plan for
// bwd_workspace_bytes and bwd_setup.
struct DqAccumPlan {
  bool has, tiles;
  size_t floats;
};
static DqAccumPlan dq_accum_plan(const FaArgs& a, const Plan& p) {
  const int D = head_dim_bucket(p.kd);
  const bool tiles = !p.ffma && runs_tma_bwd(a.arch, p.split, D, a.no_wgmma_bwd) && DqTiles::fits(a.total_q, a.B, a.H, p.kd, D);
  if (p.ffma || (a.deterministic && !tiles)) return {false, false, 0};
  const size_t rows = static_cast<size_t>(a.total_q) * a.H * p.kd;
  // the tiles: whole 64-row tiles per sequence, bucket columns
  return {true, tiles, tiles ? std::max<size_t>(rows, DqTiles::floats(a.total_q, a.B, a.H, D)) : rows};
}

// The persistent TMA backward's tile counter (its launcher zeroes it), last in the workspace.
static size_t bwd_tile_counter_bytes(const FaArgs& a, const Plan& p) {
  return !p.ffma && runs_tma_bwd(a.arch, p.split, head_dim_bucket(p.kd), a.no_wgmma_bwd) ? 256 : 0;
}

size_t bwd_workspace_bytes(const FaArgs* a) {
  const Plan p = plan_of(*a, true);
  const size_t rows = static_cast<size_t>(a->total_q) * a->H;
  size_t n = prep_size(*a, p, true) + 2 * align256(rows * sizeof(float));
  const DqAccumPlan acc = dq_accum_plan(*a, p);
  if (acc.has) n += align256(acc.floats * sizeof(float));
  if (a->deterministic && acc.tiles) n += align256(DqTiles::tiles(a->total_q, a->B) * a->H * sizeof(int));
  return n + bwd_tile_counter_bytes(*a, p);
}

void bwd_setup(FaArgs* a, void* ws) {
  const Plan p = plan_of(*a, true);
  const size_t rows = static_cast<size_t>(a->total_q) * a->H;
  char* w = static_cast<char*>(ws) + prep_size(*a, p, true);
  a->lse2 = reinterpret_cast<float*>(w);
  w += align256(rows * sizeof(float));
  a->dsum = reinterpret_cast<float*>(w);
  w += align256(rows * sizeof(float));
  const DqAccumPlan acc = dq_accum_plan(*a, p);
  a->dq_accum = acc.has ? reinterpret_cast<float*>(w) : nullptr;
  if (acc.has) w += align256(acc.floats * sizeof(float));
  a->dq_sem = a->deterministic && acc.tiles ? reinterpret_cast<int*>(w) : nullptr;
  if (a->dq_sem) w += align256(DqTiles::tiles(a->total_q, a->B) * a->H * sizeof(int));
  a->tile_counter = bwd_tile_counter_bytes(*a, p) ? reinterpret_cast<int*>(w) : nullptr;
  a->dq_tiled = acc.tiles;  // (the launchers clear it when they run another backward)
}

SmemNeeds smem_needs(const FaArgs& a) {
  const Plan f = plan_of(a, false);
  SmemNeeds n{};
  if (f.ffma) n.fwd = ffma_fwd_smem_bytes(a.d);
  else n.fwd = tc_needs(a.arch, f.kd, f.split, a.no_wgmma_bwd).fwd;
  // plan_of decides the backward per determinism; ask for both
  FaArgs nd = a, dt = a;
  nd.deterministic = 0;
  dt.deterministic = 1;
  const Plan bn = plan_of(nd, true), bd = plan_of(dt, true);
  n.bwd = bn.ffma ? ffma_bwd_smem_bytes(a.d) : tc_needs(a.arch, bn.kd, bn.split, a.no_wgmma_bwd).bwd;
  n.bwd_deterministic = bd.ffma ? ffma_bwd_smem_bytes(a.d) : tc_needs(a.arch, bd.kd, bd.split, a.no_wgmma_bwd).bwd_deterministic;
  return n;
}

cudaError_t bwd(FaArgs* a, const FaTensors& t, void* ws, cudaStream_t st) {
  const Plan p = plan_of(*a, true);
  bwd_setup(a, ws);
  if (a->total_q == 0 && a->total_k == 0) return cudaSuccess;
  FaArgs k = kernel_args(*a, p);
  FaTensors kt = t;
  kt.dout_src = t.dout;
  if (p.ffma) {
    cudaError_t e = launch_bwd_preprocess<float>(k, kt, st);
    if (e != cudaSuccess) return e;
    return ffma_bwd(&k, kt, st);
  }
  if (prep_size(*a, p, true) > 0) {
    cudaError_t e = prepare_operands(&k, &kt, t, p.split, true, ws, st);
    if (e != cudaSuccess) return e;
  }
  switch (a->dtype) {
    case kBF16: return bwd_bf16(&k, kt, st);
    case kF16: return bwd_f16(&k, kt, st);
    default: return bwd_f32(&k, kt, st);
  }
}

}  // namespace fa
