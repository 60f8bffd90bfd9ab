// Host entry points: head-dim buckets, the split-KV heuristic, workspaces, dtype dispatch.
#include <algorithm>

#include "fa_smem.cuh"

namespace fa {

cudaError_t fwd_bf16(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t fwd_f16(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t bwd_bf16(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t bwd_f16(FaArgs* a, const FaTensors& t, cudaStream_t st);

int head_dim_bucket(int d) {
  if (d <= 0 || d % 8 != 0 || d > 256) return 0;
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

static size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }

size_t fwd_workspace_bytes_splits(FaArgs* a, int splits) {
  a->num_splits = std::max(1, splits);
  if (a->num_splits == 1) return 0;
  const size_t rows = static_cast<size_t>(a->total_q) * a->H * a->num_splits;
  return align256(rows * a->d * sizeof(float)) + align256(rows * sizeof(float));
}

// The forward's tile (query rows x keys per CTA) for head-dim bucket D, as launch_fwd picks it.
template <int D>
static void fwd_tile(int arch, int* BM, int* BN) {
  if constexpr (has_wgmma_fwd(D)) {
    if (runs_wgmma_fwd(arch, D)) {
      *BM = WgTraits<D>::BM;
      *BN = WgTraits<D>::BN;
      return;
    }
  }
  *BM = FwdTraits<D>::BM;
  *BN = FwdTraits<D>::BN;
}

size_t fwd_workspace_bytes(FaArgs* a) {
  const int D = head_dim_bucket(a->d);
  int BM, BN;
  if (D == 64) fwd_tile<64>(a->arch, &BM, &BN);
  else if (D == 128) fwd_tile<128>(a->arch, &BM, &BN);
  else fwd_tile<256>(a->arch, &BM, &BN);
  const int64_t mblocks = (a->max_tq + BM - 1) / BM;
  const int64_t ctas = mblocks * a->H * a->B;
  const int64_t nblocks = (a->max_tk + BN - 1) / BN;
  int splits = 1;
  const int sms = a->num_sms > 0 ? a->num_sms : 132;
  if (ctas > 0 && ctas < sms && nblocks >= 8) {
    int64_t want = (2 * sms + ctas - 1) / ctas;
    want = std::min<int64_t>(want, nblocks / 4);
    want = std::min<int64_t>(want, 64);
    want = std::min<int64_t>(want, 65535 / std::max(1, a->B));
    splits = static_cast<int>(std::max<int64_t>(1, want));
  }
  return fwd_workspace_bytes_splits(a, splits);
}

cudaError_t fwd(FaArgs* a, const FaTensors& t, void* ws, cudaStream_t st) {
  if (a->num_splits > 1) {
    const size_t rows = static_cast<size_t>(a->total_q) * a->H * a->num_splits;
    a->oaccum = static_cast<float*>(ws);
    a->lseaccum = reinterpret_cast<float*>(static_cast<char*>(ws) + align256(rows * a->d * sizeof(float)));
  } else {
    a->oaccum = nullptr;
    a->lseaccum = nullptr;
  }
  if (a->total_q == 0) return cudaSuccess;
  return a->dtype == kBF16 ? fwd_bf16(a, t, st) : fwd_f16(a, t, st);
}

size_t bwd_workspace_bytes(const FaArgs* a) {
  const size_t rows = static_cast<size_t>(a->total_q) * a->H;
  size_t n = 2 * align256(rows * sizeof(float));
  if (!a->deterministic) n += align256(rows * a->d * sizeof(float));
  return n;
}

void bwd_setup(FaArgs* a, void* ws) {
  const size_t rows = static_cast<size_t>(a->total_q) * a->H;
  char* p = static_cast<char*>(ws);
  a->lse2 = reinterpret_cast<float*>(p);
  p += align256(rows * sizeof(float));
  a->dsum = reinterpret_cast<float*>(p);
  p += align256(rows * sizeof(float));
  a->dq_accum = a->deterministic ? nullptr : reinterpret_cast<float*>(p);
}

// The kernels launch_fwd / launch_bwd (fa_launch.cuh) pick, by the same predicates.
template <int D>
static SmemNeeds smem_needs_for(int arch, int no_wgmma_bwd) {
  SmemNeeds n{};
  n.fwd = fwd_smem_bytes<FwdTraits<D>>();
  n.bwd = bwd_smem_bytes<BwdTraits<D>>();
  if constexpr (has_wgmma_fwd(D)) {
    if (runs_wgmma_fwd(arch, D)) n.fwd = fwd_wg_smem_bytes<WgTraits<D>>();
  }
  if constexpr (has_wgmma_bwd(D)) {
    if (runs_wgmma_bwd(arch, D, no_wgmma_bwd)) n.bwd = bwd_wg_smem_bytes<BwdWgCfg<D>>();
  }
  n.bwd_deterministic = std::max(n.bwd, dq_smem_bytes<D>());
  return n;
}

SmemNeeds smem_needs(int arch, int d, int no_wgmma_bwd) {
  switch (head_dim_bucket(d)) {
    case 64: return smem_needs_for<64>(arch, no_wgmma_bwd);
    case 128: return smem_needs_for<128>(arch, no_wgmma_bwd);
    case 256: return smem_needs_for<256>(arch, no_wgmma_bwd);
    default: return SmemNeeds{0, 0, 0};
  }
}

cudaError_t bwd(FaArgs* a, const FaTensors& t, void* ws, cudaStream_t st) {
  bwd_setup(a, ws);
  if (a->total_q == 0 && a->total_k == 0) return cudaSuccess;
  return a->dtype == kBF16 ? bwd_bf16(a, t, st) : bwd_f16(a, t, st);
}

}  // namespace fa
