// Host side of fa_tma.cuh: tensor maps for the TMA kernels. The encoder is a driver entry point
// (cuTensorMapEncodeTiled); we link the runtime statically and never libcuda directly, so it is
// looked up once through the runtime.
#include <cudaTypedefs.h>

#include <mutex>

#include "fa_tma.cuh"

namespace fa {
namespace tma {

static PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    else
      cudaGetLastError();  // leave no sticky error behind for the caller
  });
  return fn;
}

bool encode_operand(CUtensorMap* map, const void* base, bool bf16, int d, int heads, int total, int rows) {
  auto fn = encoder();
  if (!fn || !base || d <= 0 || d % 8 != 0 || heads <= 0 || total <= 0 || rows <= 0 || rows > 256) return false;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(total)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d) * 2, static_cast<cuuint64_t>(d) * heads * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(rows)};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = fn(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, const_cast<void*>(base), dims, strides, box,
                        elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

}  // namespace tma
}  // namespace fa
