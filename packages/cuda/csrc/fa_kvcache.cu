// Host entry points of the KV-cache kernels: shared memory, the split choice, workspace, dtype
// dispatch. The kernels and the split rule are in fa_kvcache.cuh.
#include "fa_kvcache.cuh"

namespace fa {

cudaError_t kv_forward_bf16(KvArgs* a, const KvTensors& t, cudaStream_t st);
cudaError_t kv_forward_f16(KvArgs* a, const KvTensors& t, cudaStream_t st);

static size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }

template <int D>
static size_t smem_for(size_t optin) {
  return kv_runs_small<D>(optin) ? kv_attn_smem_bytes<KvTraitsSmall<D>>() : kv_attn_smem_bytes<KvTraits<D>>();
}

size_t kv_smem_bytes(int d, size_t smem_optin) {
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

size_t kv_workspace_bytes(KvArgs* a) {
  int s = 1;
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
  return a->dtype == kBF16 ? kv_forward_bf16(a, t, st) : kv_forward_f16(a, t, st);
}

}  // namespace fa
