// Operand preparation (see the plan in fa_api.h): the kernels read operands whose head dim is a
// multiple of 8, in a 16-bit type. This pass makes such copies in the call's workspace:
//   pad    f16/bf16 with another head dim: a copy with zero columns up to kd (contributes
//          nothing: scores, outputs and gradients of the real columns are unchanged)
//   split  f32: each operand x becomes two f16 planes with x·2^e ≈ hi + lo (round to nearest,
//          then the exact remainder rounded to nearest), e one power of two per tensor chosen from
//          its largest finite |x| so that hi <= 2^15 < 65504 for every element (the largest lands
//          in [2^14, 2^15)). Each element is then represented to within 2^-22 of itself (float32's
//          own unit roundoff is 2^-24) or 2^-39 of the tensor's largest |x|, whichever is larger:
//          the remainders of elements above 2^-18 of the largest are normal f16, and smaller ones
//          are subnormal with an absolute error below 2^-25 in scaled units.
// For the backward it also bounds |dS| = |P (dP - Dsum)| <= max‖dO_i‖ (max‖V_j‖ + max‖O_i‖)
// (P <= 1, Cauchy-Schwarz) and scales dS by the power of two that brings that bound to 2^15.
// The unscaling factors (SplitScales, fa_api.h) stay on the device: the kernels read them.
#include <algorithm>
#include <cfloat>

#include "fa_common.cuh"
#include "fa_host.h"

namespace fa {
namespace {

enum Slot : int { kSlotQ = 0, kSlotK = 1, kSlotV = 2, kSlotDO = 3 };
enum NormSlot : int { kNormV = 0, kNormDO = 1, kNormO = 2 };

// Lives at the start of the preparation workspace; zeroed before the statistics pass.
struct PrepState {
  int absmax[4];   // per Slot: max |x| over the finite elements (a non-negative float's bits order as ints)
  int rownorm[3];  // per NormSlot: max row 2-norm (over finite elements)
  int exps[4];     // per Slot: the split exponent e
  SplitScales scales;
};
static_assert(sizeof(PrepState) <= 256, "the preparation state fits its 256 bytes");

struct StatSrc {
  const float* p;
  int64_t rows;
  int slot;  // Slot, or -1
  int norm;  // NormSlot, or -1
};
struct StatList {
  StatSrc s[5];
  int d;
};

// One warp per row, grid-stride; blockIdx.y picks the tensor. Each block adds its maxima once.
__global__ void prep_stats_kernel(StatList L, PrepState* st) {
  const StatSrc src = L.s[blockIdx.y];
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  float mx = 0.f, nmax = 0.f;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + wib; r < src.rows; r += static_cast<int64_t>(gridDim.x) * (blockDim.x / 32)) {
    const float* row = src.p + r * L.d;
    float m = 0.f, ss = 0.f;
    for (int c = lane; c < L.d; c += 32) {
      const float x = row[c];
      if (isfinite(x)) {
        m = fmaxf(m, fabsf(x));
        ss = fmaf(x, x, ss);
      }
    }
#pragma unroll
    for (int w = 16; w > 0; w >>= 1) {
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
      ss += __shfl_xor_sync(0xffffffffu, ss, w);
    }
    mx = fmaxf(mx, m);
    nmax = fmaxf(nmax, sqrtf(ss));
  }
  __shared__ float red[2][32];
  if (lane == 0) {
    red[0][wib] = mx;
    red[1][wib] = nmax;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      mx = fmaxf(mx, red[0][w]);
      nmax = fmaxf(nmax, red[1][w]);
    }
    if (src.slot >= 0) atomicMax(&st->absmax[src.slot], __float_as_int(mx));
    if (src.norm >= 0) atomicMax(&st->rownorm[src.norm], __float_as_int(nmax));
  }
}

// The exponent e with m·2^e < 2^15 (so hi <= 2^15), clamped so that 2^±e stays a normal float.
__device__ int split_exponent(float m) {
  if (!(m > 0.f)) return 0;  // all zeros (or nothing finite)
  if (isinf(m)) m = FLT_MAX;
  return max(-113, min(112, 14 - ilogbf(m)));
}
__device__ float pow2(int n) { return ldexpf(1.f, max(-126, min(127, n))); }

__global__ void prep_scales_kernel(PrepState* st) {
  const int eq = split_exponent(__int_as_float(st->absmax[kSlotQ]));
  const int ek = split_exponent(__int_as_float(st->absmax[kSlotK]));
  const int ev = split_exponent(__int_as_float(st->absmax[kSlotV]));
  const int edo = split_exponent(__int_as_float(st->absmax[kSlotDO]));
  const float bound = __int_as_float(st->rownorm[kNormDO]) * (__int_as_float(st->rownorm[kNormV]) + __int_as_float(st->rownorm[kNormO]));
  const int eds = split_exponent(bound);
  st->exps[kSlotQ] = eq;
  st->exps[kSlotK] = ek;
  st->exps[kSlotV] = ev;
  st->exps[kSlotDO] = edo;
  constexpr int kP = 15;  // log2(kPScale)
  static_assert(kPScale == 32768.f, "kP is log2(kPScale)");
  st->scales = SplitScales{pow2(-(eq + ek)), pow2(-(kP + ev)), pow2(-(edo + ev)), pow2(-(kP + edo)), pow2(eds), pow2(-(eds + eq)), pow2(-(eds + ek))};
}

struct PrepDst {
  const void* src;  // [rows, d] in the caller's dtype
  int64_t rows;
  __half* hi;       // split: [rows, kd] f16; pad: [rows, kd] in the caller's 16-bit type
  __half* lo;       // split only
  int slot;
};
struct PrepList {
  PrepDst s[4];
  int d, kd;
};

// Two columns per thread step, grid-stride; blockIdx.y picks the tensor.
__global__ void prep_split_kernel(PrepList L, const PrepState* st) {
  const PrepDst t = L.s[blockIdx.y];
  const float f = ldexpf(1.f, st->exps[t.slot]);
  const float* src = static_cast<const float*>(t.src);
  const int half = L.kd / 2;
  const int64_t n = t.rows * half;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / half;
    const int c = 2 * static_cast<int>(i - r * half);
    const float x = c < L.d ? src[r * L.d + c] * f : 0.f;
    const float y = c + 1 < L.d ? src[r * L.d + c + 1] * f : 0.f;
    const __half2 h = __floats2half2_rn(x, y);
    const float2 hf = __half22float2(h);
    // an infinite hi keeps lo = 0 (inf - inf would make it NaN)
    const __half2 l = __floats2half2_rn(isfinite(hf.x) ? x - hf.x : 0.f, isfinite(hf.y) ? y - hf.y : 0.f);
    *reinterpret_cast<__half2*>(t.hi + r * L.kd + c) = h;
    *reinterpret_cast<__half2*>(t.lo + r * L.kd + c) = l;
  }
}

__global__ void prep_pad_kernel(PrepList L) {
  const PrepDst t = L.s[blockIdx.y];
  const uint16_t* src = static_cast<const uint16_t*>(t.src);
  uint16_t* dst = reinterpret_cast<uint16_t*>(t.hi);
  const int64_t n = t.rows * L.kd;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / L.kd;
    const int c = static_cast<int>(i - r * L.kd);
    dst[i] = c < L.d ? src[r * L.d + c] : static_cast<uint16_t>(0);
  }
}

size_t align256(size_t x) { return (x + 255) & ~static_cast<size_t>(255); }

unsigned blocks_for(int64_t items, int per_block) {
  const int64_t b = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : b > 2048 ? 2048 : b);
}

}  // namespace

size_t prep_bytes(const FaArgs& a, int kd, bool split, bool backward) {
  const int64_t nq = static_cast<int64_t>(a.total_q) * a.H * kd, nk = static_cast<int64_t>(a.total_k) * a.Hkv * kd;
  const size_t planes = split ? 2 : 1;
  size_t n = split ? 256 : 0;
  for (int64_t e : {nq, nk, nk}) n += planes * align256(static_cast<size_t>(e) * 2);
  if (backward) n += planes * align256(static_cast<size_t>(nq) * 2);
  return n;
}

cudaError_t prepare_operands(FaArgs* ka, FaTensors* kt, const FaTensors& t, bool split, bool backward, void* ws, cudaStream_t st) {
  const int d = ka->d_out, kd = ka->d;
  char* p = static_cast<char*>(ws);
  PrepState* state = nullptr;
  if (split) {
    state = reinterpret_cast<PrepState*>(p);
    p += 256;
  }
  const int64_t rq = static_cast<int64_t>(ka->total_q) * ka->H, rk = static_cast<int64_t>(ka->total_k) * ka->Hkv;
  PrepList L{};
  L.d = d;
  L.kd = kd;
  const void* srcs[4] = {t.q, t.k, t.v, t.dout};
  const int64_t rows[4] = {rq, rk, rk, rq};
  const int n = backward ? 4 : 3;
  int64_t most = 0;
  for (int i = 0; i < n; ++i) {
    PrepDst& x = L.s[i];
    x.src = srcs[i];
    x.rows = rows[i];
    x.slot = i;
    const size_t bytes = align256(static_cast<size_t>(rows[i]) * kd * 2);
    x.hi = reinterpret_cast<__half*>(p);
    p += bytes;
    x.lo = split ? reinterpret_cast<__half*>(p) : nullptr;
    if (split) p += bytes;
    most = std::max(most, rows[i] * kd);
  }
  kt->q = L.s[0].hi;
  kt->k = L.s[1].hi;
  kt->v = L.s[2].hi;
  kt->q_lo = L.s[0].lo;
  kt->k_lo = L.s[1].lo;
  kt->v_lo = L.s[2].lo;
  if (backward) {
    kt->dout = L.s[3].hi;
    kt->dout_lo = L.s[3].lo;
    kt->dout_src = t.dout;
  }
  if (!split) {
    prep_pad_kernel<<<dim3(blocks_for(most, 256), n), 256, 0, st>>>(L);
    FA_CHECK_LAUNCH();
    return cudaSuccess;
  }
  cudaError_t e = cudaMemsetAsync(state, 0, sizeof(PrepState), st);
  if (e != cudaSuccess) return e;
  StatList S{};
  S.d = d;
  const float* f[5] = {static_cast<const float*>(t.q), static_cast<const float*>(t.k), static_cast<const float*>(t.v), static_cast<const float*>(t.dout),
                       static_cast<const float*>(t.o)};
  const int64_t srows[5] = {rq, rk, rk, rq, rq};
  const int slots[5] = {kSlotQ, kSlotK, kSlotV, kSlotDO, -1};
  const int norms[5] = {-1, -1, backward ? kNormV : -1, kNormDO, kNormO};
  const int ns = backward ? 5 : 3;
  int64_t rmost = 0;
  for (int i = 0; i < ns; ++i) {
    S.s[i] = StatSrc{f[i], srows[i], slots[i], norms[i]};
    rmost = std::max(rmost, srows[i]);
  }
  prep_stats_kernel<<<dim3(blocks_for(rmost, 8), ns), 256, 0, st>>>(S, state);
  FA_CHECK_LAUNCH();
  prep_scales_kernel<<<1, 1, 0, st>>>(state);
  FA_CHECK_LAUNCH();
  prep_split_kernel<<<dim3(blocks_for(most / 2, 256), n), 256, 0, st>>>(L, state);
  FA_CHECK_LAUNCH();
  ka->scales = &state->scales;
  return cudaSuccess;
}

}  // namespace fa
