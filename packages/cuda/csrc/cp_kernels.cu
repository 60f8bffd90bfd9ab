// Kernels of cp_kernels.h. Memory-bound, simple and exact in what they promise: the merge is
// the same arithmetic as core's online-softmax.ts (mergeStates + finalizeRow on states
// m = lse, l = 1, acc = out), in float32 with expf/logf, NaN propagating.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "cp_kernels.h"

namespace fa_cp {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

unsigned blocks_for(size_t work) {
  const size_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1u << 20) ? (1u << 20) : b));
}

__global__ void fill_kernel(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) p[i] = v;
}

template <typename T>
__global__ void accumulate_kernel(float* acc, const T* x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    acc[i] += to_f32(x[i]);
}

template <typename T>
__global__ void convert_kernel(T* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = from_f32<T>(src[i]);
}

// One warp per (row, head): the two weights once, the d values by the lanes (coalesced).
template <typename T>
__global__ void merge_kernel(float* out, float* lse, const T* po, const float* pl, int64_t rows, int heads, int d) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t pairs = rows * heads;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; w < pairs; w += warps) {
    const int64_t row = w / heads;
    const int h = static_cast<int>(w % heads);
    const int64_t li = static_cast<int64_t>(h) * rows + row;
    const float a = lse[li];
    const float b = pl[li];
    const float m = (isnan(a) || isnan(b)) ? NAN : fmaxf(a, b);
    if (m == -INFINITY) continue;  // both empty: the row stays empty (out 0, lse -inf)
    // e^(x - m), exactly 1 for the max (also guards -inf - -inf); NaN stays NaN
    const float wa = a == m ? 1.f : expf(a - m);
    const float wb = b == m ? 1.f : expf(b - m);
    const float sum = wa + wb;
    const float ia = wa / sum;
    const float ib = wb / sum;
    float* o = out + w * d;
    const T* p = po + w * d;
    for (int c = lane; c < d; c += 32) o[c] = o[c] * ia + to_f32(p[c]) * ib;
    if (lane == 0) lse[li] = m + logf(sum);
  }
}

__global__ void transpose_kernel(float* dst, const float* src, int64_t batch, int64_t heads, int64_t t, int to_packed) {
  const int64_t n = batch * heads * t;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // i indexes the batched layout [b, h, t]
    const int64_t b = i / (heads * t);
    const int64_t h = (i / t) % heads;
    const int64_t x = i % t;
    const int64_t packed = h * batch * t + b * t + x;
    if (to_packed) dst[packed] = src[i];
    else dst[i] = src[packed];
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void random_kernel(T* dst, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    const float u = static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;  // 24 bits: [-1, 1)
    dst[i] = from_f32<T>(u * scale);
  }
}

}  // namespace

cudaError_t fill_f32(float* p, size_t n, float value, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, n, value);
  return cudaGetLastError();
}

cudaError_t accumulate(float* acc, const void* x, int xdt, size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned g = blocks_for(n);
  if (xdt == kF32) accumulate_kernel<<<g, kThreads, 0, s>>>(acc, static_cast<const float*>(x), n);
  else if (xdt == kF16) accumulate_kernel<<<g, kThreads, 0, s>>>(acc, static_cast<const __half*>(x), n);
  else accumulate_kernel<<<g, kThreads, 0, s>>>(acc, static_cast<const __nv_bfloat16*>(x), n);
  return cudaGetLastError();
}

cudaError_t convert(void* dst, int dstdt, const float* src, size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (dstdt == kF32) return cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
  const unsigned g = blocks_for(n);
  if (dstdt == kF16) convert_kernel<<<g, kThreads, 0, s>>>(static_cast<__half*>(dst), src, n);
  else convert_kernel<<<g, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(dst), src, n);
  return cudaGetLastError();
}

cudaError_t merge_forward(float* out, float* lse, const void* part_out, int part_dt, const float* part_lse, int64_t rows, int heads,
                          int d, cudaStream_t s) {
  const int64_t pairs = rows * heads;
  if (pairs == 0) return cudaSuccess;
  const unsigned g = blocks_for(static_cast<size_t>(pairs) * 32);
  if (part_dt == kF32) merge_kernel<<<g, kThreads, 0, s>>>(out, lse, static_cast<const float*>(part_out), part_lse, rows, heads, d);
  else if (part_dt == kF16) merge_kernel<<<g, kThreads, 0, s>>>(out, lse, static_cast<const __half*>(part_out), part_lse, rows, heads, d);
  else merge_kernel<<<g, kThreads, 0, s>>>(out, lse, static_cast<const __nv_bfloat16*>(part_out), part_lse, rows, heads, d);
  return cudaGetLastError();
}

cudaError_t transpose_lse(float* dst, const float* src, int64_t batch, int64_t heads, int64_t t, int to_packed, cudaStream_t s) {
  const int64_t n = batch * heads * t;
  if (n == 0) return cudaSuccess;
  transpose_kernel<<<blocks_for(static_cast<size_t>(n)), kThreads, 0, s>>>(dst, src, batch, heads, t, to_packed);
  return cudaGetLastError();
}

cudaError_t random_fill(void* dst, int dt, size_t n, uint64_t seed, float scale, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned g = blocks_for(n);
  if (dt == kF32) random_kernel<<<g, kThreads, 0, s>>>(static_cast<float*>(dst), n, seed, scale);
  else if (dt == kF16) random_kernel<<<g, kThreads, 0, s>>>(static_cast<__half*>(dst), n, seed, scale);
  else random_kernel<<<g, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(dst), n, seed, scale);
  return cudaGetLastError();
}

}  // namespace fa_cp
