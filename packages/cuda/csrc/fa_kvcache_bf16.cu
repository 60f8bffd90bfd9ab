#include "fa_kvcache_launch.cuh"
namespace fa {
cudaError_t kv_forward_bf16(KvArgs* a, const KvTensors& t, cudaStream_t st) { return dispatch_kv<__nv_bfloat16>(a, t, st); }
}  // namespace fa
