// The fwd launchers of one element policy (ElemF32, fa_traits.cuh), in a file of their own so the
// template instantiations compile in parallel.
#include "fa_launch.cuh"
namespace fa {
cudaError_t fwd_f32(FaArgs* a, const FaTensors& t, cudaStream_t st) { return dispatch_fwd<ElemF32>(a, t, st); }
}  // namespace fa
