// Host entry points of the kernel files, for fa_api.cu (which plans a call and runs them), and
// the launch check they share.
#pragma once
#include "fa_api.h"

namespace fa {

#define FA_CHECK_LAUNCH()                      \
  do {                                         \
    cudaError_t e_ = cudaGetLastError();       \
    if (e_ != cudaSuccess) return e_;          \
  } while (0)

// Raises a kernel's dynamic shared memory limit to `bytes` on the current device, once per
// (kernel, device, size): the attribute stays set, and asking the driver again on every launch
// cost host time on every call (cudaFuncSetAttribute, ~1-2 us). Kernels within the default 48 KiB
// need nothing. Thread-safe (contexts of two devices may launch at once).
cudaError_t set_smem_limit(const void* kernel, size_t bytes);

// Tensor-core kernels of one dtype (fa_fwd_<dtype>.cu, fa_bwd_<dtype>.cu), on the kernel view of
// a call: operands in the kernel layout, a->d a multiple of 8, a->d_out the caller's head dim.
cudaError_t fwd_bf16(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t fwd_f16(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t fwd_f32(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t bwd_bf16(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t bwd_f16(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t bwd_f32(FaArgs* a, const FaTensors& t, cudaStream_t st);

// FFMA f32 kernels (fa_ffma.cu), on the caller's tensors (any head dim; a->d == a->d_out). The
// backward needs a->lse2 and a->dsum.
cudaError_t ffma_fwd(FaArgs* a, const FaTensors& t, cudaStream_t st);
cudaError_t ffma_bwd(FaArgs* a, const FaTensors& t, cudaStream_t st);

// Operand preparation (fa_prep.cu): padded 16-bit copies, or the split of f32 operands into f16
// (hi, lo) planes, in a workspace of prep_bytes() bytes. `ka` is the kernel view (d = kd,
// d_out = the caller's head dim); on return kt points at the prepared operands and, for a split,
// ka->scales at their unscaling factors.
size_t prep_bytes(const FaArgs& a, int kd, bool split, bool backward);
cudaError_t prepare_operands(FaArgs* ka, FaTensors* kt, const FaTensors& t, bool split, bool backward, void* ws, cudaStream_t st);

}  // namespace fa
