#include <algorithm>
#include "fa_launch.cuh"
namespace fa {
cudaError_t bwd_bf16(FaArgs* a, const FaTensors& t, cudaStream_t st) { return dispatch_bwd<__nv_bfloat16>(a, t, st); }
}  // namespace fa
