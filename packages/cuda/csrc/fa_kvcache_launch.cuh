// Launchers of the KV-cache kernels for one dtype (included by fa_kvcache_<dtype>.cu, and by
// dev/kv_harness.cu for its variants): append, attention (the tensor-core kernel for f16/bf16 with
// d % 8 == 0, the FFMA kernel for f32 and every other head dim), and the split-KV combine of the
// dense forward (launch_combine, fa_launch.cuh).
#pragma once
#include "fa_kvcache.cuh"
#include "fa_kvcache_ffma.cuh"
#include "fa_launch.cuh"

namespace fa {

// The append alone (a no-op without kNew/vNew), in the widest chunks a row of d elements allows.
template <typename T>
cudaError_t launch_kv_append(const KvArgs* a, const KvTensors& t, cudaStream_t st) {
  const int vb = kv_vec_bytes(a->d, static_cast<int>(sizeof(T)));
  const int64_t n = static_cast<int64_t>(a->B) * a->tnew * a->Hkv * (a->d * static_cast<int>(sizeof(T)) / vb);
  if (n == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, static_cast<int64_t>(std::max(1, a->num_sms)) * 16);
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (vb) {
    case 16: kv_append_kernel<T, 16><<<grid, 256, 0, st>>>(*a, t); break;
    case 8: kv_append_kernel<T, 8><<<grid, 256, 0, st>>>(*a, t); break;
    case 4: kv_append_kernel<T, 4><<<grid, 256, 0, st>>>(*a, t); break;
    default:
      if constexpr (sizeof(T) <= 2) kv_append_kernel<T, 2><<<grid, 256, 0, st>>>(*a, t);
      break;
  }
  FA_CHECK_LAUNCH();
  return cudaSuccess;
}

// The split-KV combine (nothing without splits). fwd_combine_kernel reads the partials in the
// dense forward's layout, which the KV-cache call's shapes fill exactly: packed rows b·tq + i,
// LSE [B, H, tq] (non-varlen, max_tq = tq), head dim d in the workspace and the output.
template <typename T>
cudaError_t launch_kv_combine(const KvArgs* a, const KvTensors& t, cudaStream_t st) {
  if (a->num_splits <= 1) return cudaSuccess;
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
  return launch_kv_combine<T>(a, t, st);
}

// The same with the FFMA kernel and config Tr (KvFfmaCfg).
template <typename T, typename Tr>
cudaError_t launch_kv_ffma_cfg(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  cudaError_t e = launch_kv_append<T>(a, t, st);
  if (e != cudaSuccess) return e;
  const int64_t rows = static_cast<int64_t>(a->H / a->Hkv) * a->tq;
  if (rows == 0 || a->B == 0) return cudaSuccess;
  const size_t smem = kv_ffma_smem_bytes<Tr>();
  e = set_smem(kv_ffma_kernel<T, Tr>, smem);
  if (e != cudaSuccess) return e;
  const int64_t mtiles = (rows + Tr::ROWS - 1) / Tr::ROWS;
  dim3 grid(static_cast<unsigned>(mtiles * a->num_splits), a->Hkv, a->B);
  kv_ffma_kernel<T, Tr><<<grid, Tr::NW * 32, smem, st>>>(*a, t);
  FA_CHECK_LAUNCH();
  return launch_kv_combine<T>(a, t, st);
}

template <typename T, int D>
cudaError_t launch_kv(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  if (kv_runs_small<D>(a->smem_optin)) return launch_kv_cfg<T, KvTraitsSmall<D>>(a, t, st);
  return launch_kv_cfg<T, KvTraits<D>>(a, t, st);
}
template <typename T, int DB>
cudaError_t launch_kv_ffma(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  if (kv_ffma_runs_small<DB>(a->smem_optin)) return launch_kv_ffma_cfg<T, KvFfmaTraitsSmall<DB>>(a, t, st);
  return launch_kv_ffma_cfg<T, KvFfmaTraits<DB>>(a, t, st);
}

template <typename T>
cudaError_t dispatch_kv_ffma(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  switch (kv_ffma_bucket(a->d)) {
    case 32: return launch_kv_ffma<T, 32>(a, t, st);
    case 64: return launch_kv_ffma<T, 64>(a, t, st);
    case 128: return launch_kv_ffma<T, 128>(a, t, st);
    default: return launch_kv_ffma<T, 256>(a, t, st);
  }
}

// Which kernel a call runs: kv_runs_ffma (fa_kvcache.h).
template <typename T>
cudaError_t dispatch_kv(KvArgs* a, const KvTensors& t, cudaStream_t st) {
  if constexpr (sizeof(T) == 4) {
    return dispatch_kv_ffma<T>(a, t, st);
  } else {
    if (a->d % 8 != 0) return dispatch_kv_ffma<T>(a, t, st);
    switch (head_dim_bucket(a->d)) {
      case 64: return launch_kv<T, 64>(a, t, st);
      case 128: return launch_kv<T, 128>(a, t, st);
      case 256: return launch_kv<T, 256>(a, t, st);
      default: return cudaErrorInvalidValue;
    }
  }
}

}  // namespace fa
