// The fwd launchers of one element policy (ElemF16, fa_traits.cuh), in a file of their own so the
// template instantiations compile in parallel.
#include "fa_launch.cuh"
namespace fa {
cudaError_t fwd_f16(FaArgs* a, const FaTensors& t, cudaStream_t st) { return dispatch_fwd<ElemF16>(a, t, st); }
}  // namespace fa
