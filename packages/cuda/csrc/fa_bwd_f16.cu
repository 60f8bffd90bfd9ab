#include <algorithm>
#include "fa_launch.cuh"
namespace fa {
cudaError_t bwd_f16(FaArgs* a, const FaTensors& t, cudaStream_t st) { return dispatch_bwd<__half>(a, t, st); }
}  // namespace fa
