#include <algorithm>
#include "fa_launch.cuh"
namespace fa {
cudaError_t fwd_f16(FaArgs* a, const FaTensors& t, cudaStream_t st) { return dispatch_fwd<__half>(a, t, st); }
}  // namespace fa
