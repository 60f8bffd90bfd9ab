// Shared-memory tile primitives of the tensor-core kernels: the PTX wrappers for cp.async and
// ldmatrix, the two swizzled tile layouts and the global -> shared tile loads for each.
//   swz / load_tile        the mma.sync kernels' row layout (ldmatrix reads it conflict-free)
//   swz128 / load_tile128  the wgmma kernels' 128-byte-swizzled 64-column blocks (the canonical
//                          layout their shared-memory descriptors describe)
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

namespace fa {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, bool valid) {
  const int n = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p)));
}

// ---------------------------------------------------------------------------------------------
// Row layout: a tile of R rows x C columns (C a multiple of 8 elements) is stored row-major with
// each 16-byte chunk c of row r placed at chunk (c ^ (r & 7)). Eight consecutive rows read at the
// same logical chunk then hit eight different bank groups, so both ldmatrix and the cp.async
// writes are conflict-free. Rows of fewer than 8 chunks (C = 32: the split backward's P and dS
// tiles) XOR with r modulo their chunk count instead, which keeps every chunk inside its row (at
// the price of 2-way conflicts there).
// ---------------------------------------------------------------------------------------------
template <int C>
__device__ __forceinline__ int swz(int r, int c) {  // c: column in elements, multiple of 8 for chunk starts
  constexpr int M = (C / 8 < 8 ? C / 8 : 8) - 1;
  static_assert(C % 8 == 0 && (M & (M + 1)) == 0, "rows of a power-of-two number of 16-byte chunks");
  return r * C + ((((c >> 3) ^ (r & M))) << 3) + (c & 7);
}

// Loads a tile of R rows x C (bucket) columns from global memory (row stride `ld` elements) into
// swizzled shared memory. Rows >= nrows and columns >= ncols (a multiple of 8) are zero-filled.
template <int R, int C, int NT, typename T>
__device__ __forceinline__ void load_tile(T* s, const T* g, int64_t ld, int nrows, int ncols, int tid) {
  constexpr int CPR = C / 8;
#pragma unroll
  for (int it = 0; it < (R * CPR + NT - 1) / NT; ++it) {
    const int i = tid + it * NT;
    if ((R * CPR) % NT == 0 || i < R * CPR) {
      const int r = i / CPR, c = (i % CPR) * 8;
      const bool ok = r < nrows && c < ncols;
      cp_async16(s + swz<C>(r, c), g + (ok ? r * ld + c : 0), ok);  // (selecting the offset keeps it loop-invariant)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// wgmma layout: 128B-swizzled column blocks of 64 elements. Element (r, c) of an R-row tile lives
// at (c/64)*R*64 + r*64 + (((c%64)/8) ^ (r%8))*8 + c%8.
// ---------------------------------------------------------------------------------------------
template <int R>
__device__ __forceinline__ int swz128(int r, int c) {
  return (c >> 6) * R * 64 + r * 64 + ((((c & 63) >> 3) ^ (r & 7)) << 3) + (c & 7);
}

template <int R, int C, int NT, typename T>
__device__ __forceinline__ void load_tile128(T* s, const T* g, int64_t ld, int nrows, int ncols, int tid) {
  constexpr int CPR = C / 8;
#pragma unroll
  for (int it = 0; it < (R * CPR + NT - 1) / NT; ++it) {
    const int i = tid + it * NT;
    if ((R * CPR) % NT == 0 || i < R * CPR) {
      const int r = i / CPR, c = (i % CPR) * 8;
      const bool ok = r < nrows && c < ncols;
      cp_async16(s + swz128<R>(r, c), g + (ok ? r * ld + c : 0), ok);
    }
  }
}

// One warp's synchronous copy of an R-row tile into the swz128 layout, rows >= nrows and columns
// >= ncols zero-filled: the TMA kernels' path for tiles that reach into the next sequence of a
// packed batch (the copy engine would bring that sequence's rows in). The caller fences the
// stores to the async proxy (fence.proxy.async) before the tensor cores read them.
template <int R, int C, typename T>
__device__ __forceinline__ void copy_tile128_warp(T* s, const T* g, int64_t ld, int nrows, int ncols, int lane) {
#pragma unroll 1  // (a rare path, run by producer warps that hold few registers)
  for (int i = lane; i < R * C / 8; i += 32) {
    const int r = i / (C / 8), c = (i % (C / 8)) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < nrows && c < ncols) v = __ldg(reinterpret_cast<const uint4*>(g + r * ld + c));
    *reinterpret_cast<uint4*>(s + swz128<R>(r, c)) = v;
  }
}

}  // namespace fa
