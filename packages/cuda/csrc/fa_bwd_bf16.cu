// The bwd launchers of one element policy (ElemBF16, fa_traits.cuh), in a file of their own so the
// template instantiations compile in parallel.
#include "fa_launch.cuh"
namespace fa {
cudaError_t bwd_bf16(FaArgs* a, const FaTensors& t, cudaStream_t st) { return dispatch_bwd<ElemBF16>(a, t, st); }
}  // namespace fa
