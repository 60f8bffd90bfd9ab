// Plain float32 attention on FFMA (no tensor cores), any head dim d <= 256, every option: the f32
// path for GPUs whose shared memory cannot hold the split tensor-core kernels' tiles (the split
// D = 128 forward needs 160 KiB with mma.sync; these need at most 97 KiB at d = 256), and the path
// `createCudaBackend({ f32: 'ffma' })` forces (the conformance kit runs it on the H200).
//
//   ffma_fwd_kernel      a CTA owns BM = NW * ROWS query rows, walks BN = 32-key tiles: lane j
//                        computes the score of key j (one lane per key), the warp runs the online
//                        softmax, and lane c accumulates output columns c, c + 32, ... (MC of them)
//   ffma_bwd_dq_kernel   the same walk: dS of key j in lane j, dQ columns per lane
//   ffma_bwd_dkv_kernel  a CTA owns BM keys of one kv head, walks 32-query tiles of every query
//                        head of its GQA group: P and dS of query i in lane i, dK, dV columns per lane
// No atomics: results are bit-identical run to run, so `deterministic` costs nothing here.
// Key (query) tiles are stored with an odd row stride (d | 1) so that one-lane-per-row reads are
// conflict-free; rows past the sequence are zero and masked.
#include "fa_common.cuh"
#include "fa_host.h"
#include "fa_smem.cuh"

namespace fa {
namespace {

using F = FfmaTraits;

__device__ __forceinline__ float dot(const float* x, const float* y, int d) {
  float s = 0.f;
  for (int c = 0; c < d; ++c) s = fmaf(x[c], y[c], s);
  return s;
}
// Copies rows [r0, r0 + R) of a [rows, ld] tensor (d columns at column offset 0 of each row's
// head slice `g`) into shared memory with row stride `stride`; rows >= nrows are zero.
__device__ __forceinline__ void load_rows(float* s, int stride, const float* g, int64_t ld, int R, int nrows, int d) {
  for (int i = threadIdx.x; i < R * d; i += blockDim.x) {
    const int r = i / d, c = i - r * d;
    s[r * stride + c] = r < nrows ? g[r * ld + c] : 0.f;
  }
}

__global__ void __launch_bounds__(F::NW * 32) ffma_fwd_kernel(FaArgs a, FaTensors t) {
  extern __shared__ float smf[];
  const int d = a.d, ks = d | 1;
  float* sQ = smf;              // [BM][d]
  float* sK = sQ + F::BM * d;   // [BN][ks]
  float* sV = sK + F::BN * ks;  // [BN][d]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * F::BM;
  if (m0 >= s.tq) return;
  const int hk = h / (a.H / a.Hkv);
  const int64_t ldq = static_cast<int64_t>(a.H) * d, ldk = static_cast<int64_t>(a.Hkv) * d;
  const float* Kg = static_cast<const float*>(t.k) + s.k0 * ldk + static_cast<int64_t>(hk) * d;
  const float* Vg = static_cast<const float*>(t.v) + s.k0 * ldk + static_cast<int64_t>(hk) * d;
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  const bool plain = a.softcap <= 0.f && slope == 0.f;
  const float scale_log2 = a.scale * kLog2e;
  load_rows(sQ, d, static_cast<const float*>(t.q) + (s.q0 + m0) * ldq + static_cast<int64_t>(h) * d, ldq, F::BM, s.tq - m0, d);

  float o[F::ROWS][F::MC], m[F::ROWS], l[F::ROWS];
#pragma unroll
  for (int r = 0; r < F::ROWS; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < F::MC; ++c) o[r][c] = 0.f;
  }
  int nb_lo, nb_hi;
  key_block_range(a, s, m0, F::BM, F::BN, &nb_lo, &nb_hi);
  for (int nb = nb_lo; nb < nb_hi; ++nb) {
    const int n0 = nb * F::BN;
    __syncthreads();  // the previous tile is consumed
    load_rows(sK, ks, Kg + n0 * ldk, ldk, F::BN, s.tk - n0, d);
    load_rows(sV, d, Vg + n0 * ldk, ldk, F::BN, s.tk - n0, d);
    __syncthreads();
    const int j = n0 + lane;
#pragma unroll
    for (int r = 0; r < F::ROWS; ++r) {
      const int i = m0 + warp * F::ROWS + r;
      const float x = dot(sQ + (warp * F::ROWS + r) * d, sK + lane * ks, d);
      float sc = plain ? x * scale_log2 : score_log2(a, x, slope, i, j, s.off, nullptr);
      if (!visible(a, s, i, j)) sc = -INFINITY;
      const float mx = fmaxf(m[r], warp_max(sc));
      const float m_use = mx == -INFINITY ? 0.f : mx;
      const float alpha = exp2f(m[r] - m_use);
      const float p = exp2f(sc - m_use);
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = mx;
#pragma unroll
      for (int c = 0; c < F::MC; ++c) o[r][c] *= alpha;
      for (int jj = 0; jj < F::BN; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        const float* vr = sV + jj * d;
#pragma unroll
        for (int c = 0; c < F::MC; ++c)
          if (lane + 32 * c < d) o[r][c] = fmaf(pj, vr[lane + 32 * c], o[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < F::ROWS; ++r) {
    const int i = m0 + warp * F::ROWS + r;
    if (i >= s.tq) continue;
    const float inv = l[r] == 0.f ? 0.f : 1.f / l[r];  // NaN stays NaN
    float* O = static_cast<float*>(t.o) + (s.q0 + i) * ldq + static_cast<int64_t>(h) * d;
#pragma unroll
    for (int c = 0; c < F::MC; ++c)
      if (lane + 32 * c < d) O[lane + 32 * c] = o[r][c] * inv;
    if (lane == 0) {
      const float m_use = m[r] == -INFINITY ? 0.f : m[r];
      t.lse[lse_index(a, b, h, s.q0, i)] = l[r] == 0.f ? -INFINITY : (m_use + log2f(l[r])) * kLn2;
    }
  }
}

__global__ void __launch_bounds__(F::NW * 32) ffma_bwd_dq_kernel(FaArgs a, FaTensors t) {
  extern __shared__ float smf[];
  const int d = a.d, ks = d | 1;
  float* sQ = smf;               // [BM][d]
  float* sdO = sQ + F::BM * d;   // [BM][d]
  float* sK = sdO + F::BM * d;   // [BN][ks]
  float* sV = sK + F::BN * ks;   // [BN][ks]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * F::BM;
  if (m0 >= s.tq) return;
  const int hk = h / (a.H / a.Hkv);
  const int64_t ldq = static_cast<int64_t>(a.H) * d, ldk = static_cast<int64_t>(a.Hkv) * d;
  const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * d;
  const float* Kg = static_cast<const float*>(t.k) + s.k0 * ldk + static_cast<int64_t>(hk) * d;
  const float* Vg = static_cast<const float*>(t.v) + s.k0 * ldk + static_cast<int64_t>(hk) * d;
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  const bool plain = a.softcap <= 0.f && slope == 0.f;
  const float scale_log2 = a.scale * kLog2e;
  load_rows(sQ, d, static_cast<const float*>(t.q) + qoff, ldq, F::BM, s.tq - m0, d);
  load_rows(sdO, d, static_cast<const float*>(t.dout) + qoff, ldq, F::BM, s.tq - m0, d);

  float dq[F::ROWS][F::MC], lse2[F::ROWS], dsum[F::ROWS];
#pragma unroll
  for (int r = 0; r < F::ROWS; ++r) {
    const int i = m0 + warp * F::ROWS + r;
    const int64_t idx = static_cast<int64_t>(h) * a.total_q + s.q0 + i;
    lse2[r] = i < s.tq ? a.lse2[idx] : INFINITY;
    dsum[r] = i < s.tq ? a.dsum[idx] : 0.f;
#pragma unroll
    for (int c = 0; c < F::MC; ++c) dq[r][c] = 0.f;
  }
  int nb_lo, nb_hi;
  key_block_range(a, s, m0, F::BM, F::BN, &nb_lo, &nb_hi);
  for (int nb = nb_lo; nb < nb_hi; ++nb) {
    const int n0 = nb * F::BN;
    __syncthreads();
    load_rows(sK, ks, Kg + n0 * ldk, ldk, F::BN, s.tk - n0, d);
    load_rows(sV, ks, Vg + n0 * ldk, ldk, F::BN, s.tk - n0, d);
    __syncthreads();
    const int j = n0 + lane;
#pragma unroll
    for (int r = 0; r < F::ROWS; ++r) {
      const int i = m0 + warp * F::ROWS + r;
      const float x = dot(sQ + (warp * F::ROWS + r) * d, sK + lane * ks, d);
      const float y = dot(sdO + (warp * F::ROWS + r) * d, sV + lane * ks, d);
      float dcap = 1.f;
      const float v = plain ? x : score_log2(a, x, slope, i, j, s.off, &dcap);
      const float p = exp2f(fmaf(v, plain ? scale_log2 : 1.f, -lse2[r]));
      float ds = p * (y - dsum[r]) * dcap;
      if (!visible(a, s, i, j)) ds = 0.f;
      for (int jj = 0; jj < F::BN; ++jj) {
        const float dsj = __shfl_sync(0xffffffffu, ds, jj);
        const float* kr = sK + jj * ks;
#pragma unroll
        for (int c = 0; c < F::MC; ++c)
          if (lane + 32 * c < d) dq[r][c] = fmaf(dsj, kr[lane + 32 * c], dq[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < F::ROWS; ++r) {
    const int i = m0 + warp * F::ROWS + r;
    if (i >= s.tq) continue;
    float* dQ = static_cast<float*>(t.dq) + (s.q0 + i) * ldq + static_cast<int64_t>(h) * d;
#pragma unroll
    for (int c = 0; c < F::MC; ++c)
      if (lane + 32 * c < d) dQ[lane + 32 * c] = dq[r][c] * a.scale;
  }
}

__global__ void __launch_bounds__(F::NW * 32) ffma_bwd_dkv_kernel(FaArgs a, FaTensors t) {
  extern __shared__ float smf[];
  const int d = a.d, ks = d | 1;
  float* sK = smf;               // [BM keys][d]
  float* sV = sK + F::BM * d;    // [BM keys][d]
  float* sQ = sV + F::BM * d;    // [BN queries][ks]
  float* sdO = sQ + F::BN * ks;  // [BN queries][ks]
  float* sL = sdO + F::BN * ks;  // [BN] lse2
  float* sD = sL + F::BN;        // [BN] dsum
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int n0 = n_block * F::BM;
  if (n0 >= s.tk) return;
  const int G = a.H / a.Hkv;
  const int64_t ldq = static_cast<int64_t>(a.H) * d, ldk = static_cast<int64_t>(a.Hkv) * d;
  const int64_t koff = (s.k0 + n0) * ldk + static_cast<int64_t>(hk) * d;
  load_rows(sK, d, static_cast<const float*>(t.k) + koff, ldk, F::BM, s.tk - n0, d);
  load_rows(sV, d, static_cast<const float*>(t.v) + koff, ldk, F::BM, s.tk - n0, d);
  const float scale_log2 = a.scale * kLog2e;

  float dk[F::ROWS][F::MC], dv[F::ROWS][F::MC];
#pragma unroll
  for (int r = 0; r < F::ROWS; ++r)
#pragma unroll
    for (int c = 0; c < F::MC; ++c) dk[r][c] = dv[r][c] = 0.f;
  int mb_lo, mb_hi;
  query_block_range(a, s, n0, F::BM, F::BN, &mb_lo, &mb_hi);
  for (int g = 0; g < G; ++g) {
    const int h = hk * G + g;
    const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
    const bool plain = a.softcap <= 0.f && slope == 0.f;
    for (int mb = mb_lo; mb < mb_hi; ++mb) {
      const int m0 = mb * F::BN;
      __syncthreads();  // the previous tile is consumed (and K, V are loaded)
      const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * d;
      load_rows(sQ, ks, static_cast<const float*>(t.q) + qoff, ldq, F::BN, s.tq - m0, d);
      load_rows(sdO, ks, static_cast<const float*>(t.dout) + qoff, ldq, F::BN, s.tq - m0, d);
      for (int r = threadIdx.x; r < F::BN; r += blockDim.x) {
        const bool ok = m0 + r < s.tq;
        const int64_t idx = static_cast<int64_t>(h) * a.total_q + s.q0 + m0 + r;
        sL[r] = ok ? a.lse2[idx] : INFINITY;
        sD[r] = ok ? a.dsum[idx] : 0.f;
      }
      __syncthreads();
      const int i = m0 + lane;
#pragma unroll
      for (int r = 0; r < F::ROWS; ++r) {
        const int jr = warp * F::ROWS + r, j = n0 + jr;
        const float x = dot(sQ + lane * ks, sK + jr * d, d);
        const float y = dot(sdO + lane * ks, sV + jr * d, d);
        float dcap = 1.f;
        const float v = plain ? x : score_log2(a, x, slope, i, j, s.off, &dcap);
        float p = exp2f(fmaf(v, plain ? scale_log2 : 1.f, -sL[lane]));
        float ds = p * (y - sD[lane]) * dcap;
        if (!visible(a, s, i, j)) p = ds = 0.f;
        for (int ii = 0; ii < F::BN; ++ii) {
          const float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
          const float* qr = sQ + ii * ks;
          const float* dor = sdO + ii * ks;
#pragma unroll
          for (int c = 0; c < F::MC; ++c) {
            if (lane + 32 * c < d) {
              dv[r][c] = fmaf(pi, dor[lane + 32 * c], dv[r][c]);
              dk[r][c] = fmaf(dsi, qr[lane + 32 * c], dk[r][c]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < F::ROWS; ++r) {
    const int j = n0 + warp * F::ROWS + r;
    if (j >= s.tk) continue;
    const int64_t off = (s.k0 + j) * ldk + static_cast<int64_t>(hk) * d;
    float* dK = static_cast<float*>(t.dk) + off;
    float* dV = static_cast<float*>(t.dv) + off;
#pragma unroll
    for (int c = 0; c < F::MC; ++c) {
      if (lane + 32 * c < d) {
        dK[lane + 32 * c] = dk[r][c] * a.scale;
        dV[lane + 32 * c] = dv[r][c];
      }
    }
  }
}

template <typename K>
cudaError_t smem_attr(K kernel, size_t bytes) {
  return set_smem_limit(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace

static_assert(F::MC * 32 >= 256, "columns per lane cover the largest head dim");

cudaError_t ffma_fwd(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  if (a->max_tq == 0) return cudaSuccess;
  const size_t smem = ffma_fwd_smem_bytes(a->d);
  cudaError_t e = smem_attr(ffma_fwd_kernel, smem);
  if (e != cudaSuccess) return e;
  ffma_fwd_kernel<<<dim3((a->max_tq + F::BM - 1) / F::BM, a->H, a->B), F::NW * 32, smem, st>>>(*a, t);
  FA_CHECK_LAUNCH();
  return cudaSuccess;
}

cudaError_t ffma_bwd(FaArgs* a, const FaTensors& t, cudaStream_t st) {
  const size_t smem = ffma_bwd_smem_bytes(a->d);
  cudaError_t e = smem_attr(ffma_bwd_dq_kernel, smem);
  if (e == cudaSuccess) e = smem_attr(ffma_bwd_dkv_kernel, smem);
  if (e != cudaSuccess) return e;
  if (a->max_tq > 0) {
    ffma_bwd_dq_kernel<<<dim3((a->max_tq + F::BM - 1) / F::BM, a->H, a->B), F::NW * 32, smem, st>>>(*a, t);
    FA_CHECK_LAUNCH();
  }
  if (a->max_tk > 0) {
    ffma_bwd_dkv_kernel<<<dim3((a->max_tk + F::BM - 1) / F::BM, a->Hkv, a->B), F::NW * 32, smem, st>>>(*a, t);
    FA_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

}  // namespace fa
