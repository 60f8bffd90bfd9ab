// The tensor-core rate behind the f32 split choice (KERNEL_NOTES.md, "f32"): dense SS-wgmma
// throughput of f16 (m64n128k16) against tf32 (m64n128k8), one CTA of two warpgroups per SM
// issuing batches of 16 wgmmas on random shared-memory operands (128B-swizzled, K-major: the only
// layout tf32 wgmma takes). Included by dev/harness.cu only.
#pragma once
#include "harness_problem.cuh"

__device__ __forceinline__ void wgmma_tf32_m64n128k8(float* d, uint64_t da, uint64_t db) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]),
        "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),
        "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
#endif
}

// A: 64 rows x 128 bytes, B: 128 rows x 128 bytes, both one 128B-swizzle column block; each
// k-step advances 32 bytes inside the swizzle atom (k16 of f16, k8 of tf32).
template <bool TF32>
__global__ void __launch_bounds__(256, 1) tcrate_kernel(int iters, float* sink) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) uint32_t sm[(64 + 128) * 32];
  for (int i = threadIdx.x; i < (64 + 128) * 32; i += blockDim.x) {
    const float u = (hash32(blockIdx.x * 100003ull + i) >> 8) * (1.f / 16777216.f) - 0.5f;
    if (TF32) {
      sm[i] = __float_as_uint(u);
    } else {
      const __half2 h = __floats2half2_rn(u, -u);
      sm[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
  wg::fence_proxy_async();
  __syncthreads();
  const uint32_t a = smem_u32(sm), b = a + 64 * 128;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  for (int it = 0; it < iters; ++it) {
    wg::fence();
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint64_t da = wg::desc(a + (j & 3) * 32, 16, 1024), db = wg::desc(b + (j & 3) * 32, 16, 1024);
      if (TF32) wgmma_tf32_m64n128k8(acc, da, db);
      else wg::Op<__half, 128>::ss(acc, da, db, 1);
    }
    wg::commit();
    wg::wait<0>();
    wg::fence_operands<64>(acc);
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  if (s == 1234.5f) sink[threadIdx.x] = s;  // keeps the work alive
#endif
}

static void tcrate() {
  float* sink;
  CK(cudaMalloc(&sink, 1024));
  const int iters = 4000, ctas = g_sms;
  // FLOPs per wgmma: 2 * 64 * 128 * K, K = 16 (f16) or 8 (tf32); 16 per batch, 2 warpgroups per CTA
  const double f16 = 2.0 * 64 * 128 * 16 * 16 * iters * 2 * ctas, tf32 = f16 / 2;
  const float ms16 = time_ms([&] { tcrate_kernel<false><<<ctas, 256>>>(iters, sink); }, 2, 5);
  const float ms32 = time_ms([&] { tcrate_kernel<true><<<ctas, 256>>>(iters, sink); }, 2, 5);
  CK(cudaGetLastError());
  printf("tcrate: SS-wgmma f16 m64n128k16 %.0f TFLOP/s, tf32 m64n128k8 %.0f TFLOP/s (ratio %.2f); "
         "an f32 product as 3 split products: f16 ceiling %.0f, tf32 ceiling %.0f TFLOP/s\n",
         f16 / ms16 / 1e9, tf32 / ms32 / 1e9, (f16 / ms16) / (tf32 / ms32), f16 / ms16 / 1e9 / 3, tf32 / ms32 / 1e9 / 3);
  fflush(stdout);
  cudaFree(sink);
}
