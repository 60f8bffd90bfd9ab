// Host entry points of the KV-cache kernels: which kernel, shared memory, the split choice,
// workspace, dtype dispatch. The kernels and the split rule are in fa_kvcache.cuh (tensor cores),
// fa_kvcache_ffma.cuh (FFMA) and fa_kvcache_common.cuh.
#include "fa_kvcache.cuh"
#include "fa_kvcache_ffma.cuh"

namespace fa {

cudaError_t kv_forward_bf16(KvArgs* a, const KvTensors& t, cudaStream_t st);
cudaError_t kv_forward_f16(KvArgs* a, const KvTensors& t, cudaStream_t st);
cudaError_t kv_forward_f32(KvArgs* a, const KvTensors& t, cudaStream_t st);

static size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }

bool kv_runs_ffma(int dtype, int d) { return dtype == kF32 || d % 8 != 0; }

template <int D>
static size_t smem_for(size_t optin) {
  return kv_runs_small<D>(optin) ? kv_attn_smem_bytes<KvTraitsSmall<D>>() : kv_attn_smem_bytes<KvTraits<D>>();
}
template <int DB>
static size_t ffma_smem_for(size_t optin) {
  return kv_ffma_runs_small<DB>(optin) ? kv_ffma_smem_bytes<KvFfmaTraitsSmall<DB>>() : kv_ffma_smem_bytes<KvFfmaTraits<DB>>();
}

size_t kv_smem_bytes(int dtype, int d, size_t smem_optin) {
  if (d < 1 || d > 256) return 0;
  if (kv_runs_ffma(dtype, d)) {
    switch (kv_ffma_bucket(d)) {
      case 32: return ffma_smem_for<32>(smem_optin);
      case 64: return ffma_smem_for<64>(smem_optin);
      case 128: return ffma_smem_for<128>(smem_optin);
      default: return ffma_smem_for<256>(smem_optin);
    }
  }
  switch (head_dim_bucket(d)) {
    case 64: return smem_for<64>(smem_optin);
    case 128: return smem_for<128>(smem_optin);
    case 256: return smem_for<256>(smem_optin);
    default: return 0;
  }
}

size_t kv_workspace_bytes_splits(KvArgs* a, int splits) {
  a->num_splits = std::max(1, splits);
  if (a->num_splits == 1) return 0;
  const size_t rows = static_cast<size_t>(a->B) * a->tq * a->H * a->num_splits;
  return align256(rows * a->d * sizeof(float)) + align256(rows * sizeof(float));
}

template <int D>
static int splits_for(const KvArgs& a) {
  if (kv_runs_small<D>(a.smem_optin)) return kv_choose_splits<KvTraitsSmall<D>>(a, kv_ctas_per_sm<KvTraitsSmall<D>>());
  return kv_choose_splits<KvTraits<D>>(a, kv_ctas_per_sm<KvTraits<D>>());
}
template <int DB>
static int ffma_splits_for(const KvArgs& a) {
  if (kv_ffma_runs_small<DB>(a.smem_optin)) return kv_choose_splits<KvFfmaTraitsSmall<DB>>(a, kv_ffma_ctas_per_sm<KvFfmaTraitsSmall<DB>>());
  return kv_choose_splits<KvFfmaTraits<DB>>(a, kv_ffma_ctas_per_sm<KvFfmaTraits<DB>>());
}

size_t kv_workspace_bytes(KvArgs* a) {
  int s = 1;
  if (kv_runs_ffma(a->dtype, a->d)) {
    switch (kv_ffma_bucket(a->d)) {
      case 32: s = ffma_splits_for<32>(*a); break;
      case 64: s = ffma_splits_for<64>(*a); break;
      case 128: s = ffma_splits_for<128>(*a); break;
      default: s = ffma_splits_for<256>(*a); break;
    }
    return kv_workspace_bytes_splits(a, s);
  }
  switch (head_dim_bucket(a->d)) {
    case 64: s = splits_for<64>(*a); break;
    case 128: s = splits_for<128>(*a); break;
    case 256: s = splits_for<256>(*a); break;
    default: break;
  }
  return kv_workspace_bytes_splits(a, s);
}

cudaError_t kv_forward(KvArgs* a, const KvTensors& t, void* ws, cudaStream_t st) {
  if (a->num_splits > 1) {
    const size_t rows = static_cast<size_t>(a->B) * a->tq * a->H * a->num_splits;
    a->oaccum = static_cast<float*>(ws);
    a->lseaccum = reinterpret_cast<float*>(static_cast<char*>(ws) + align256(rows * a->d * sizeof(float)));
  } else {
    a->num_splits = 1;
    a->oaccum = nullptr;
    a->lseaccum = nullptr;
  }
  if (a->B == 0) return cudaSuccess;
  if (a->dtype == kF32) return kv_forward_f32(a, t, st);
  return a->dtype == kBF16 ? kv_forward_bf16(a, t, st) : kv_forward_f16(a, t, st);
}

}  // namespace fa
