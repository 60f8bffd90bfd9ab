// Shared pieces of the @fa CUDA kernels: PTX wrappers (cp.async, ldmatrix, mma.sync m16n8k16),
// the swizzled shared-memory layout, per-head-dim tile traits and the score/mask rules of
// DESIGN.md (scale -> softcap -> ALiBi -> mask; bottom-right aligned windows).
//
// Fragment conventions (mma.sync.m16n8k16, g = lane / 4, t = lane % 4):
//   C/D (16x8 f32):  c0,c1 = (row g,   cols 2t, 2t+1)   c2,c3 = (row g+8, cols 2t, 2t+1)
//   A   (16x16):     a0a1 = (g, 2t..)  a2a3 = (g+8, 2t..)  a4a5 = (g, 2t+8..)  a6a7 = (g+8, 2t+8..)
//   B   (16x8):      b0b1 = (k 2t.., n g)  b2b3 = (k 2t+8.., n g)
// Two adjacent C tiles (16 columns) therefore re-pack into one A fragment: that is how the
// probabilities P go from the QK^T accumulator into the PV product without shared memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fa_api.h"

namespace fa {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------
// PTX wrappers
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n));
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

template <typename T>
struct Mma;
template <>
struct Mma<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ __forceinline__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ __forceinline__ static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};
template <>
struct Mma<__half> {
  __device__ __forceinline__ static void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  __device__ __forceinline__ static float to_float(__half x) { return __half2float(x); }
  __device__ __forceinline__ static __half from_float(float x) { return __float2half_rn(x); }
};

// ---------------------------------------------------------------------------------------------
// Swizzled tile layout: a tile of R rows x C columns (C a multiple of 64 elements = 128 bytes)
// is stored row-major with each 16-byte chunk c of row r placed at chunk (c ^ (r & 7)). Eight
// consecutive rows read at the same logical chunk then hit eight different bank groups, so both
// ldmatrix and the cp.async writes are conflict-free.
// ---------------------------------------------------------------------------------------------
template <int C>
__device__ __forceinline__ int swz(int r, int c) {  // c: column in elements, multiple of 8 for chunk starts
  return r * C + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
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
      cp_async16(s + swz<C>(r, c), ok ? (const void*)(g + r * ld + c) : (const void*)g, ok);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tile traits, one place per head-dim bucket.
// ---------------------------------------------------------------------------------------------
// Which kernel family a call runs: the Hopper wgmma kernels on sm_90 for the 64 and 128 head-dim
// buckets, mma.sync elsewhere. One definition for the launchers (fa_launch.cuh), the split-KV
// heuristic and smem_needs() (fa_api.cu). FA_NO_WGMMA_BWD builds without the wgmma backward.
constexpr bool has_wgmma_fwd(int D) { return D == 64 || D == 128; }
constexpr bool has_wgmma_bwd(int D) {
#ifdef FA_NO_WGMMA_BWD
  return false;
#else
  return D == 64 || D == 128;
#endif
}
constexpr bool runs_wgmma_fwd(int arch, int D) { return arch == 90 && has_wgmma_fwd(D); }
constexpr bool runs_wgmma_bwd(int arch, int D, int no_wgmma_bwd) { return arch == 90 && has_wgmma_bwd(D) && !no_wgmma_bwd; }

// Forward: BM = 16 * NW * MT query rows per CTA (each warp owns MT row tiles of 16), BN keys per
// step; QREG keeps Q's fragments in registers (only with MT == 1).
template <int D_, int BM_, int BN_, int NW_, int MT_, bool QREG_>
struct FwdCfg {
  static constexpr int D = D_, BM = BM_, BN = BN_, NW = NW_, MT = MT_;
  static constexpr bool QREG = QREG_;
  static_assert(BM == 16 * NW * MT, "rows per CTA");
};
template <int D>
struct FwdTraits;
template <>
struct FwdTraits<64> : FwdCfg<64, 64, 128, 4, 1, true> {};
template <>
struct FwdTraits<128> : FwdCfg<128, 128, 64, 8, 1, true> {};
template <>
struct FwdTraits<256> : FwdCfg<256, 64, 32, 4, 1, false> {};

// Backward: a CTA owns BN keys; WK warps along keys (16 keys each), NW / WK along the query /
// head-dim direction. BM query rows per inner step.
template <int D_, int BM_, int BN_, int NW_, int WK_>
struct BwdCfg {
  static constexpr int D = D_, BM = BM_, BN = BN_, NW = NW_, WK = WK_;
};
template <int D>
struct BwdTraits;
template <>
struct BwdTraits<64> : BwdCfg<64, 64, 128, 8, 8> {};
template <>
struct BwdTraits<128> : BwdCfg<128, 64, 128, 8, 8> {};
template <>
struct BwdTraits<256> : BwdCfg<256, 64, 64, 8, 4> {};

// The deterministic dQ kernel: a CTA owns BM query rows (16 per warp) and walks the key tiles.
template <int D>
struct DqTraits;
template <>
struct DqTraits<64> { static constexpr int BM = 64, BN = 64, NW = 4; };
template <>
struct DqTraits<128> { static constexpr int BM = 64, BN = 64, NW = 4; };
template <>
struct DqTraits<256> { static constexpr int BM = 64, BN = 32, NW = 4; };

// ---------------------------------------------------------------------------------------------
// Sequences, masks and score modifiers.
// ---------------------------------------------------------------------------------------------
struct SeqInfo {
  int q0, tq, k0, tk, off;  // packed offsets, lengths, off = tk - tq (bottom-right alignment)
};
__device__ __forceinline__ SeqInfo seq_info(const FaArgs& a, int b) {
  SeqInfo s;
  s.q0 = a.cu_q[b];
  s.tq = a.cu_q[b + 1] - s.q0;
  s.k0 = a.cu_k[b];
  s.tk = a.cu_k[b + 1] - s.k0;
  s.off = s.tk - s.tq;
  return s;
}

__device__ __forceinline__ bool visible(const FaArgs& a, const SeqInfo& s, int i, int j) {
  const int pos = i + s.off;
  return i < s.tq && j < s.tk && (a.win_left < 0 || j >= pos - a.win_left) && (a.win_right < 0 || j <= pos + a.win_right);
}

// True when some (i, j) of the tile [m0, m0+bm) x [n0, n0+bn) is masked (or out of range).
__device__ __forceinline__ bool tile_needs_mask(const FaArgs& a, const SeqInfo& s, int m0, int bm, int n0, int bn) {
  if (m0 + bm > s.tq || n0 + bn > s.tk) return true;
  if (a.win_left >= 0 && n0 < m0 + bm - 1 + s.off - a.win_left) return true;
  if (a.win_right >= 0 && n0 + bn - 1 > m0 + s.off + a.win_right) return true;
  return false;
}

// Key blocks [*lo, *hi) that queries [m0, m0+bm) of the sequence may see.
__device__ __forceinline__ void key_block_range(const FaArgs& a, const SeqInfo& s, int m0, int bm, int bn, int* lo, int* hi) {
  const int mlast = min(m0 + bm, s.tq) - 1;
  const int klo = a.win_left < 0 ? 0 : max(0, m0 + s.off - a.win_left);
  const int khi = a.win_right < 0 ? s.tk - 1 : min(s.tk - 1, mlast + s.off + a.win_right);
  if (khi < klo || s.tk <= 0) {
    *lo = 0;
    *hi = 0;
    return;
  }
  *lo = klo / bn;
  *hi = khi / bn + 1;
}

// Query blocks [*lo, *hi) whose queries may see keys [n0, n0+bn).
__device__ __forceinline__ void query_block_range(const FaArgs& a, const SeqInfo& s, int n0, int bn, int bm, int* lo, int* hi) {
  const int nlast = min(n0 + bn, s.tk) - 1;
  const int qlo = a.win_right < 0 ? 0 : max(0, n0 - s.off - a.win_right);
  const int qhi = a.win_left < 0 ? s.tq - 1 : min(s.tq - 1, nlast - s.off + a.win_left);
  if (qhi < qlo || s.tq <= 0) {
    *lo = 0;
    *hi = 0;
    return;
  }
  *lo = qlo / bm;
  *hi = qhi / bm + 1;
}

// Score of a raw dot product x for query i and key j, in log2 units (times log2 e), with the
// derivative factor of the soft-cap (1 - tanh^2) in *dcap when asked for. Args: FaArgs, or the
// KV-cache kernels' KvArgs (anything with `scale` and `softcap`).
template <typename Args>
__device__ __forceinline__ float score_log2(const Args& a, float x, float slope, int i, int j, int off, float* dcap) {
  float s = x * a.scale;
  if (a.softcap > 0.f) {
    const float th = tanhf(s / a.softcap);
    s = a.softcap * th;
    if (dcap) *dcap = 1.f - th * th;
  }
  if (slope != 0.f) s -= slope * fabsf(static_cast<float>(i + off - j));
  return s * kLog2e;
}

// 2^x on the SFU (flushes results below 2^-126 to 0; exp2(-inf) = 0, NaN stays NaN).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ int64_t lse_index(const FaArgs& a, int b, int h, int q0, int i) {
  return a.varlen ? static_cast<int64_t>(h) * a.total_q + q0 + i : (static_cast<int64_t>(b) * a.H + h) * a.max_tq + i;
}

// ---------------------------------------------------------------------------------------------
// The forward epilogue shared by fwd_kernel and fwd_wgmma_kernel: normalises one thread's two
// rows of the O accumulator and writes O and the LSE (or, split-KV, the float32 partials).
// Layout (the mma.sync C layout, also wgmma's): o4[4n + 2rr + j] holds row r + 8rr, column
// 8n + 2(lane % 4) + j; row_max in log2 units, row_sum per thread (summed over the quad here).
// ---------------------------------------------------------------------------------------------
template <typename T, int NTD>
__device__ __forceinline__ void store_forward_rows(const FaArgs& a, const FaTensors& t, const SeqInfo& s, int b, int h, int split, int64_t ldq,
                                                   int r, int lane, const float* o4, const float* row_max, const float* row_sum) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const float l = quad_sum(row_sum[rr]);
    const float inv = l == 0.f ? 0.f : 1.f / l;  // NaN stays NaN
    const float m_use = row_max[rr] == -INFINITY ? 0.f : row_max[rr];
    const float lse = l == 0.f ? -INFINITY : (m_use + log2f(l)) * kLn2;
    const int i = r + rr * 8;
    if (i >= s.tq) continue;
    const int64_t row = s.q0 + i;
    if (a.num_splits == 1) {
      T* Og = static_cast<T*>(t.o) + row * ldq + static_cast<int64_t>(h) * a.d;
#pragma unroll
      for (int n = 0; n < NTD; ++n) {
        const int c = n * 8 + 2 * (lane & 3);
        if (c < a.d) *reinterpret_cast<uint32_t*>(Og + c) = Mma<T>::pack(o4[4 * n + 2 * rr] * inv, o4[4 * n + 2 * rr + 1] * inv);
      }
      if ((lane & 3) == 0) t.lse[lse_index(a, b, h, s.q0, i)] = lse;
    } else {
      float* Oa = a.oaccum + ((static_cast<int64_t>(split) * a.total_q + row) * a.H + h) * a.d;
#pragma unroll
      for (int n = 0; n < NTD; ++n) {
        const int c = n * 8 + 2 * (lane & 3);
        if (c < a.d) *reinterpret_cast<float2*>(Oa + c) = make_float2(o4[4 * n + 2 * rr] * inv, o4[4 * n + 2 * rr + 1] * inv);
      }
      if ((lane & 3) == 0) a.lseaccum[(static_cast<int64_t>(split) * a.H + h) * a.total_q + row] = lse;
    }
  }
}

// The backward epilogue shared by bwd_kernel and bwd_wgmma_kernel: writes one thread's two key
// rows of dK (times the softmax scale) and dV. Same accumulator layout as store_forward_rows:
// dk4[4n + 2rr + j] holds key row r + 8rr, column c0 + 8n + 2(lane % 4) + j.
template <typename T, int NTD>
__device__ __forceinline__ void store_dkdv_rows(const FaArgs& a, const FaTensors& t, const SeqInfo& s, int hk, int64_t ldk, int r, int c0, int lane,
                                                const float* dk4, const float* dv4) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int j = r + rr * 8;
    if (j >= s.tk) continue;
    const int64_t off = (s.k0 + j) * ldk + static_cast<int64_t>(hk) * a.d;
    T* dK = static_cast<T*>(t.dk) + off;
    T* dV = static_cast<T*>(t.dv) + off;
#pragma unroll
    for (int n = 0; n < NTD; ++n) {
      const int c = c0 + n * 8 + 2 * (lane & 3);
      if (c < a.d) {
        *reinterpret_cast<uint32_t*>(dK + c) = Mma<T>::pack(dk4[4 * n + 2 * rr] * a.scale, dk4[4 * n + 2 * rr + 1] * a.scale);
        *reinterpret_cast<uint32_t*>(dV + c) = Mma<T>::pack(dv4[4 * n + 2 * rr], dv4[4 * n + 2 * rr + 1]);
      }
    }
  }
}

}  // namespace fa
