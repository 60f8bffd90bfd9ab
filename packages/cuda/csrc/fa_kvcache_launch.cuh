// Launchers of the KV-cache kernels for one dtype (included by fa_kvcache_<dtype>.cu, and by
// dev/kv_harness.cu for its variants): append, attention, and the split-KV combine of the dense
// forward (launch_combine, fa_launch.cuh).
#pragma once
#include "fa_kvcache.cuh"
#include "fa_launch.cuh"

namespace fa {

// The append alone (a no-op without kNew/vNew).
template <typename T>
cudaError_t launch_kv_append(const KvArgs* a, const KvTensors& t, cudaStream_t st) {
  const int64_t n = static_cast<int64_t>(a->B) * a->tnew * a->Hkv * (a->d / 8);
  if (n == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, static_cast<int64_t>(std::max(1, a->num_sms)) * 16);
  kv_append_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, st>>>(*a, t);
  FA_CHECK_LAUNCH();
  return cudaSuccess;
}

// Append, then attention with config Tr and a->num_splits splits (the workspace pointers set), then
// the combine when split.
template <typename T, typename Tr>
cudaError_t launch_kv_cfg(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  cudaError_t e = launch_kv_append<T>(a, t, st);
  if (e != cudaSuccess) return e;
  const int64_t rows = static_cast<int64_t>(a->H / a->Hkv) * a->tq;
  if (rows == 0 || a->B == 0) return cudaSuccess;
  const size_t smem = kv_attn_smem_bytes<Tr>();
  e = set_smem(kv_attn_kernel<T, Tr>, smem);
  if (e != cudaSuccess) return e;
  const int64_t mtiles = (rows + 15) / 16;
  dim3 grid(static_cast<unsigned>(mtiles * a->num_splits), a->Hkv, a->B);
  kv_attn_kernel<T, Tr><<<grid, Tr::NW * 32, smem, st>>>(*a, t);
  FA_CHECK_LAUNCH();
  if (a->num_splits <= 1) return cudaSuccess;
  // fwd_combine_kernel reads the partials in the dense forward's layout, which the KV-cache
  // call's shapes fill exactly: packed rows b·tq + i, LSE [B, H, tq] (non-varlen, max_tq = tq).
  FaArgs f{};
  f.B = a->B;
  f.H = a->H;
  f.Hkv = a->Hkv;
  f.d = a->d;
  f.d_out = a->d;
  f.max_tq = a->tq;
  f.total_q = a->B * a->tq;
  f.varlen = 0;
  f.num_splits = a->num_splits;
  f.oaccum = a->oaccum;
  f.lseaccum = a->lseaccum;
  FaTensors ft{};
  ft.o = t.o;
  ft.lse = t.lse;
  return launch_combine<Elem<T, T, false>>(&f, ft, st);
}

template <typename T, int D>
cudaError_t launch_kv(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  if (kv_runs_small<D>(a->smem_optin)) return launch_kv_cfg<T, KvTraitsSmall<D>>(a, t, st);
  return launch_kv_cfg<T, KvTraits<D>>(a, t, st);
}

template <typename T>
cudaError_t dispatch_kv(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  switch (head_dim_bucket(a->d)) {
    case 64: return launch_kv<T, 64>(a, t, st);
    case 128: return launch_kv<T, 128>(a, t, st);
    case 256: return launch_kv<T, 256>(a, t, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fa
