#include <algorithm>
#include "fa_launch.cuh"
namespace fa {
cudaError_t fwd_bf16(FaArgs* a, const FaTensors& t, cudaStream_t st) { return dispatch_fwd<__nv_bfloat16>(a, t, st); }
}  // namespace fa
