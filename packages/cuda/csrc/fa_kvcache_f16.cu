#include "fa_kvcache_launch.cuh"
namespace fa {
cudaError_t kv_forward_f16(KvArgs* a, const KvTensors& t, cudaStream_t st) { return dispatch_kv<__half>(a, t, st); }
}  // namespace fa
