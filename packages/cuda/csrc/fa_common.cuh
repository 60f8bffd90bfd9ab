// Shared pieces of the @fa tensor-core kernels: the mma.sync m16n8k16 wrappers, the products and
// register packing of the element policies (fa_traits.cuh; split f32 included), the score/mask
// rules of DESIGN.md (scale -> softcap -> ALiBi -> mask; bottom-right aligned windows) and the
// two epilogues that write outputs in the caller's layout and dtype.
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

#include <type_traits>

#include "fa_api.h"
#include "fa_tile.cuh"
#include "fa_traits.cuh"

namespace fa {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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
// Products and packing per element policy (fa_traits.cuh). A split operand is a pair of f16
// planes (hi, lo); its MMA runs the two cross products first (the small terms) and hi·hi last.
// ---------------------------------------------------------------------------------------------

// P is split as P·kPScale: P <= 1, so its hi part stays at most 2^15 (< 65504, the f16 maximum)
// and the remainder of every P above 2^-25 stays a normal f16.
constexpr float kPScale = 32768.f;

// The unscaling factors of a call: read from the device for split f32, exactly 1 otherwise
// (the compiler folds the multiplications away).
template <typename E>
__device__ __forceinline__ SplitScales split_scales(const FaArgs& a) {
  if constexpr (E::SPLIT) {
    return *a.scales;
  } else {
    return SplitScales{1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
  }
}

// c += A·B for one 16x8 tile: a[p] the A fragment of plane p, b[p][2h], b[p][2h+1] the B
// fragment of plane p (h picks one of the two n8 tiles an ldmatrix.x4 brings).
template <typename E>
__device__ __forceinline__ void mma_e(float* c, const uint32_t (&a)[E::NP][4], const uint32_t (&b)[E::NP][4], int h) {
  using M = Mma<typename E::T>;
  if constexpr (E::SPLIT) {
    M::run(c, a[0], b[1][2 * h], b[1][2 * h + 1]);
    M::run(c, a[1], b[0][2 * h], b[0][2 * h + 1]);
  }
  M::run(c, a[0], b[0][2 * h], b[0][2 * h + 1]);
}

// x ≈ hi + lo, both f16 rounded to nearest (x - hi is exact in float32). For x below 2^-14 the
// parts are subnormal: the absolute error stays below 2^-25.
__device__ __forceinline__ void split_pair(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x, y);
  const float2 hf = __half22float2(h);
  const __half2 l = __floats2half2_rn(x - hf.x, y - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// Packs two float32 values into one A/B-fragment register per plane; split values are first
// multiplied by `mul` (a power of two: kPScale for P, SplitScales::ds for dS). Without a split
// only `hi` is written (callers pass the same register twice).
template <typename E>
__device__ __forceinline__ void pack_e(float x, float y, float mul, uint32_t& hi, uint32_t& lo) {
  if constexpr (E::SPLIT) {
    split_pair(x * mul, y * mul, hi, lo);
  } else {
    hi = Mma<typename E::T>::pack(x, y);
  }
}

// Input element loads in the caller's dtype.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// Output element stores in the caller's dtype.
template <typename TO>
struct Out;
template <>
struct Out<float> {
  __device__ __forceinline__ static void one(float* p, float x) { *p = x; }
  __device__ __forceinline__ static void two(float* p, float x, float y) { *reinterpret_cast<float2*>(p) = make_float2(x, y); }
};
template <typename T>
struct Out {
  __device__ __forceinline__ static void one(T* p, float x) { *p = Mma<T>::from_float(x); }
  __device__ __forceinline__ static void two(T* p, float x, float y) { *reinterpret_cast<uint32_t*>(p) = Mma<T>::pack(x, y); }
};
// Columns c (even) and c + 1 of an output row of d_out columns, those that exist. With d_out even
// the pair is one aligned vector store (ODD = false); with d_out odd rows start at odd offsets, so
// one by one. Callers test d_out's parity once per row, outside their column loops: a test per
// pair cost the bf16 D = 64 forward up to 3% at T = 512 (200 more instructions per CTA).
template <bool ODD, typename TO>
__device__ __forceinline__ void store_cols(TO* row, int c, int d_out, float x, float y) {
  if constexpr (!ODD) {
    if (c < d_out) Out<TO>::two(row + c, x, y);
  } else {
    if (c < d_out) Out<TO>::one(row + c, x);
    if (c + 1 < d_out) Out<TO>::one(row + c + 1, y);
  }
}
// Row r of NTD column pairs: v(n, j) is column 8n + 2(lane % 4) + j, offset by c0.
template <int NTD, typename TO, typename V>
__device__ __forceinline__ void store_row(TO* row, int c0, int lane, int d_out, V v) {
  if ((d_out & 1) == 0) {
#pragma unroll
    for (int n = 0; n < NTD; ++n) store_cols<false>(row, c0 + n * 8 + 2 * (lane & 3), d_out, v(n, 0), v(n, 1));
  } else {
#pragma unroll
    for (int n = 0; n < NTD; ++n) store_cols<true>(row, c0 + n * 8 + 2 * (lane & 3), d_out, v(n, 0), v(n, 1));
  }
}

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

// (64-bit: callers that pass the caller's windows, not fwd()/bwd()'s clamped ones, may hold any
// window up to INT_MAX: the harness's reference)
__device__ __forceinline__ bool visible(const FaArgs& a, const SeqInfo& s, int i, int j) {
  const long long pos = static_cast<long long>(i) + s.off;
  return i < s.tq && j < s.tk && (a.win_left < 0 || j >= pos - a.win_left) && (a.win_right < 0 || j <= pos + a.win_right);
}

// visible() for a whole row of a tile at once: the offsets c from `base` with visible(i, base + c)
// (query row i, VisibleSpan::of_query) or visible(base + c, j) (key j, of_key) are lo <= c <= hi.
// The masks of the tensor-core kernels then cost two compares an element against per-row bounds
// instead of visible()'s per-element arithmetic (H200 run 40: the causal forward's diagonal tiles
// cost 14-28 % of the time with visible()). Bounds are computed in 64 bits and clamped, so huge
// windows and offsets cannot overflow.
struct VisibleSpan {
  int lo, hi;
  __device__ __forceinline__ bool has(int c) const { return lo <= c && c <= hi; }
  __device__ __forceinline__ static VisibleSpan rel(long long lo, long long hi, int base) {
    const long long k = 1ll << 30;
    if (hi < lo) return {1, 0};
    return {static_cast<int>(max(-k, min(k, lo - base))), static_cast<int>(max(-k, min(k, hi - base)))};
  }
  // keys j = base + c that query row i sees
  __device__ __forceinline__ static VisibleSpan of_query(const FaArgs& a, const SeqInfo& s, int i, int base) {
    const long long pos = static_cast<long long>(i) + s.off;
    long long lo = 0, hi = s.tk - 1;
    if (a.win_left >= 0) lo = max(lo, pos - a.win_left);
    if (a.win_right >= 0) hi = min(hi, pos + a.win_right);
    if (i >= s.tq) hi = -1;
    return rel(lo, hi, base);
  }
  // query rows i = base + c that see key j (j >= i + off - win_left and j <= i + off + win_right)
  __device__ __forceinline__ static VisibleSpan of_key(const FaArgs& a, const SeqInfo& s, int j, int base) {
    const long long t = static_cast<long long>(j) - s.off;
    long long lo = 0, hi = s.tq - 1;
    if (a.win_right >= 0) lo = max(lo, t - a.win_right);
    if (a.win_left >= 0) hi = min(hi, t + a.win_left);
    if (j >= s.tk) hi = -1;
    return rel(lo, hi, base);
  }
};

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
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int w = 16; w > 0; w >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, w));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int w = 16; w > 0; w >>= 1) x += __shfl_xor_sync(0xffffffffu, x, w);
  return x;
}

__device__ __forceinline__ int64_t lse_index(const FaArgs& a, int b, int h, int q0, int i) {
  return a.varlen ? static_cast<int64_t>(h) * a.total_q + q0 + i : (static_cast<int64_t>(b) * a.H + h) * a.max_tq + i;
}

// The end of one online-softmax row: its sum over the quad (row_sum holds this thread's part),
// the factor that normalises the accumulator (`unscale` turns it into P·V) and the row's LSE (row_max
// in log2 units). An empty row (every key masked: sum 0) has O = 0 and LSE = -inf; NaN stays NaN.
struct RowEnd {
  float inv, lse;
};
__device__ __forceinline__ RowEnd row_end(float row_max, float row_sum, float unscale) {
  const float l = quad_sum(row_sum);
  const float m_use = row_max == -INFINITY ? 0.f : row_max;
  return {l == 0.f ? 0.f : unscale / l, l == 0.f ? -INFINITY : (m_use + log2f(l)) * kLn2};
}

// ---------------------------------------------------------------------------------------------
// The forward epilogue shared by fwd_kernel and fwd_wgmma_kernel: normalises one thread's two
// rows of the O accumulator and writes O (caller's layout and dtype) and the LSE, or, split-KV,
// the float32 partials (kernel layout). Layout (the mma.sync C layout, also wgmma's):
// o4[4n + 2rr + j] holds row r + 8rr, column 8n + 2(lane % 4) + j; row_max in log2 units, row_sum
// per thread (summed over the quad here); `unscale` turns the accumulator into P·V.
// ---------------------------------------------------------------------------------------------
template <typename E, int NTD>
__device__ __forceinline__ void store_forward_rows(const FaArgs& a, const FaTensors& t, const SeqInfo& s, int b, int h, int split, int r, int lane,
                                                   const float* o4, const float* row_max, const float* row_sum, float unscale) {
  using TO = typename E::TO;
  const int64_t ldo = static_cast<int64_t>(a.H) * a.d_out;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const RowEnd e = row_end(row_max[rr], row_sum[rr], unscale);
    const int i = r + rr * 8;
    if (i >= s.tq) continue;
    const int64_t row = s.q0 + i;
    if (a.num_splits == 1) {
      TO* Og = static_cast<TO*>(t.o) + row * ldo + static_cast<int64_t>(h) * a.d_out;
      store_row<NTD>(Og, 0, lane, a.d_out, [&](int n, int j) { return o4[4 * n + 2 * rr + j] * e.inv; });
      if ((lane & 3) == 0) t.lse[lse_index(a, b, h, s.q0, i)] = e.lse;
    } else {
      float* Oa = a.oaccum + ((static_cast<int64_t>(split) * a.total_q + row) * a.H + h) * a.d;
#pragma unroll
      for (int n = 0; n < NTD; ++n) {
        const int c = n * 8 + 2 * (lane & 3);
        if (c < a.d) *reinterpret_cast<float2*>(Oa + c) = make_float2(o4[4 * n + 2 * rr] * e.inv, o4[4 * n + 2 * rr + 1] * e.inv);
      }
      if ((lane & 3) == 0) a.lseaccum[(static_cast<int64_t>(split) * a.H + h) * a.total_q + row] = e.lse;
    }
  }
}

// store_forward_rows for a tile that a TMA store will write (16-bit outputs, no splits, every
// row inside the sequence): O normalised into the 64-row swizzled tile sO (swz128<64>, rows r_loc
// and r_loc + 8 of it), the LSE to global memory as before.
template <typename E, int NTD>
__device__ __forceinline__ void store_forward_rows_smem(const FaArgs& a, const FaTensors& t, const SeqInfo& s, int b, int h, int r, int r_loc,
                                                        int lane, const float* o4, const float* row_max, const float* row_sum, float unscale,
                                                        typename E::T* sO) {
  using T = typename E::T;
  static_assert(std::is_same<T, typename E::TO>::value, "the TMA store writes the output in the operands' 16-bit type");
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const RowEnd e = row_end(row_max[rr], row_sum[rr], unscale);
    const int i = r + rr * 8, rl = r_loc + rr * 8;
#pragma unroll
    for (int n = 0; n < NTD; ++n) {
      const int c = n * 8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t*>(sO + swz128<64>(rl, c)) = Mma<T>::pack(o4[4 * n + 2 * rr] * e.inv, o4[4 * n + 2 * rr + 1] * e.inv);
    }
    if ((lane & 3) == 0) t.lse[lse_index(a, b, h, s.q0, i)] = e.lse;
  }
}

// The backward epilogue shared by bwd_kernel and bwd_wgmma_kernel: writes one thread's two key
// rows of dK (times dk_mul: the softmax scale and the split unscaling) and dV (times dv_mul).
// Same accumulator layout as store_forward_rows: dk4[4n + 2rr + j] holds key row r + 8rr, column
// c0 + 8n + 2(lane % 4) + j.
template <typename E, int NTD>
__device__ __forceinline__ void store_dkdv_rows(const FaArgs& a, const FaTensors& t, const SeqInfo& s, int hk, int r, int c0, int lane,
                                                const float* dk4, const float* dv4, float dk_mul, float dv_mul) {
  using TO = typename E::TO;
  const int64_t ldo = static_cast<int64_t>(a.Hkv) * a.d_out;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int j = r + rr * 8;
    if (j >= s.tk) continue;
    const int64_t off = (s.k0 + j) * ldo + static_cast<int64_t>(hk) * a.d_out;
    store_row<NTD>(static_cast<TO*>(t.dk) + off, c0, lane, a.d_out, [&](int n, int jj) { return dk4[4 * n + 2 * rr + jj] * dk_mul; });
    store_row<NTD>(static_cast<TO*>(t.dv) + off, c0, lane, a.d_out, [&](int n, int jj) { return dv4[4 * n + 2 * rr + jj] * dv_mul; });
  }
}

}  // namespace fa
