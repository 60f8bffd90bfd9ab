// Backward attention by recomputation, FlashAttention-2 style, for every element policy
// (fa_traits.cuh: f16, bf16, and split f32 with three products per MMA).
//
//   bwd_preprocess_kernel   Dsum = rowsum(dO * O) from the caller's O and dO, lse2 = lse * log2(e),
//                           dQ accumulator = 0
//   bwd_kernel              a CTA owns BN keys of one kv head; it walks every query head of its
//                           GQA group and every query tile that sees its keys, recomputes
//                           P = exp(S - LSE), and accumulates dK, dV in registers. dQ goes to a
//                           float32 accumulator with atomics (or, when deterministic, is left to
//                           bwd_dq_kernel).
//   bwd_dq_kernel           deterministic dQ: a CTA owns BM query rows and walks the key tiles
//                           (no atomics; bit-identical run to run)
//   bwd_convert_dq_kernel   dQ = scale * accumulator, in the caller's layout and dtype
#pragma once
#include "fa_common.cuh"

namespace fa {

// Lanes per (packed row, head) in bwd_preprocess_kernel: enough for one 16-byte vector of O and
// of dO each (a power of two, at most a warp). One lane per element with 2-byte loads (sessions
// 1-7) kept few bytes in flight: 1.9 TB/s at D = 128, half that at D = 64 (run 64).
__host__ __device__ inline int dsum_lanes(int d_out, int elem_bytes) {
  const int vecs = (d_out * elem_bytes + 15) / 16;
  int l = 1;
  while (l < vecs && l < 32) l *= 2;
  return l;
}

// O and dO are the caller's (layout [total_q, H, d_out], type TO); a group of dsum_lanes lanes
// per (packed row, head), 16-byte loads when the rows allow them.
template <typename TO>
__global__ void __launch_bounds__(256) bwd_preprocess_kernel(FaArgs a, FaTensors t) {
  constexpr int VEC = 16 / sizeof(TO);
  const int lanes = dsum_lanes(a.d_out, sizeof(TO));
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / lanes;
  const int sub = threadIdx.x % lanes;
  // (no early return: the whole warp takes part in the shuffles below; lanes past the last item
  // read nothing and store nothing)
  const bool live = item < static_cast<int64_t>(a.total_q) * a.H;
  const int row = static_cast<int>(item / a.H), h = static_cast<int>(item % a.H);
  const int64_t base = (static_cast<int64_t>(row) * a.H + h) * a.d_out;
  const void* dout = t.dout_src ? t.dout_src : t.dout;
  const TO* O = static_cast<const TO*>(t.o) + base;
  const TO* dO = static_cast<const TO*>(dout) + base;
  const bool vec = a.d_out % VEC == 0 && ((reinterpret_cast<uintptr_t>(t.o) | reinterpret_cast<uintptr_t>(dout)) & 15) == 0;
  float acc = 0.f;
  if (live && vec) {
    for (int c = sub * VEC; c < a.d_out; c += lanes * VEC) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(O + c)), y = __ldg(reinterpret_cast<const uint4*>(dO + c));
      const TO* xs = reinterpret_cast<const TO*>(&x);
      const TO* ys = reinterpret_cast<const TO*>(&y);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc += to_f32(xs[e]) * to_f32(ys[e]);
    }
  } else if (live) {
    for (int c = sub; c < a.d_out; c += lanes) acc += to_f32(O[c]) * to_f32(dO[c]);
  }
  for (int w = lanes / 2; w > 0; w >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, w, lanes);
  if (!live) return;
  if (!a.deterministic && a.dq_accum && !a.dq_tiled) {  // (the tiled accumulator is cleared whole)
    float* dq = a.dq_accum + (static_cast<int64_t>(row) * a.H + h) * a.d;
    for (int c = sub; c < a.d; c += lanes) dq[c] = 0.f;
  }
  if (sub == 0) {
    int64_t idx;
    if (a.varlen) {
      idx = static_cast<int64_t>(h) * a.total_q + row;
    } else {
      const int b = row / a.max_tq, i = row % a.max_tq;
      idx = (static_cast<int64_t>(b) * a.H + h) * a.max_tq + i;
    }
    const float l = t.lse[idx];
    a.dsum[static_cast<int64_t>(h) * a.total_q + row] = acc;
    a.lse2[static_cast<int64_t>(h) * a.total_q + row] = l == -INFINITY ? INFINITY : l * kLog2e;
  }
}
// Its launch (256 threads a block).
template <typename TO>
cudaError_t launch_bwd_preprocess(const FaArgs& a, const FaTensors& t, cudaStream_t st) {
  const int64_t threads = static_cast<int64_t>(a.total_q) * a.H * dsum_lanes(a.d_out, sizeof(TO));
  if (threads > 0) bwd_preprocess_kernel<TO><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, st>>>(a, t);
  return cudaGetLastError();
}

template <typename E, typename Tr>
__global__ void __launch_bounds__(Tr::NW * 32, 1) bwd_kernel(FaArgs a, FaTensors t) {
  // ---- roles and sizes --------------------------------------------------------------------
  using T = typename E::T;
  constexpr int NP = E::NP;
  constexpr int D = Tr::D, BM = Tr::BM, BN = Tr::BN, NW = Tr::NW, WK = Tr::WK, WX = NW / WK, NT = NW * 32;
  static_assert(BN == 16 * WK, "one warp row per 16 keys");
  constexpr int BMW = BM / WX;    // queries per warp in S^T and dP^T
  constexpr int DW = D / WX;      // head dims per warp in dK and dV
  constexpr int NTQ = BMW / 8;
  constexpr int NTDW = DW / 8;
  constexpr int KSD = D / 16;
  constexpr int QRB = BM / 16, QCB = NW / QRB, DQW = D / QCB, NTDQ = DQW / 8;
  static_assert(NTQ % 2 == 0 && NTDW % 2 == 0 && NTDQ % 2 == 0 && QCB * QRB == NW, "warp tiling");

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);  // [NP][BN][D]
  T* sV = sK + NP * BN * D;                // [NP][BN][D]
  T* sQ = sV + NP * BN * D;                // [2][NP][BM][D]
  T* sdO = sQ + 2 * NP * BM * D;           // [2][NP][BM][D]
  T* sP = sdO + 2 * NP * BM * D;           // [NP][BN][BM]
  T* sdS = sP + NP * BN * BM;              // [NP][BN][BM]
  float* sLse = reinterpret_cast<float*>(sdS + NP * BN * BM);  // [2][BM]
  float* sDs = sLse + 2 * BM;                                  // [2][BM]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int kg = warp % WK, xg = warp / WK;
  const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int n0 = n_block * BN;
  if (n0 >= s.tk) return;
  const int G = a.H / a.Hkv;
  const int64_t ldq = static_cast<int64_t>(a.H) * a.d, ldk = static_cast<int64_t>(a.Hkv) * a.d;
  int mb_lo, mb_hi;
  query_block_range(a, s, n0, BN, BM, &mb_lo, &mb_hi);
  const int nm = mb_hi - mb_lo, total_it = nm * G;
  const SplitScales ss = split_scales<E>(a);
  const float scale_log2 = a.scale * kLog2e * ss.qk;

  const T* Kg[NP];
  const T* Vg[NP];
  const T* Qg[NP];
  const T* dOg[NP];
  Kg[0] = static_cast<const T*>(t.k);
  Vg[0] = static_cast<const T*>(t.v);
  Qg[0] = static_cast<const T*>(t.q);
  dOg[0] = static_cast<const T*>(t.dout);
  if constexpr (NP == 2) {
    Kg[1] = static_cast<const T*>(t.k_lo);
    Vg[1] = static_cast<const T*>(t.v_lo);
    Qg[1] = static_cast<const T*>(t.q_lo);
    dOg[1] = static_cast<const T*>(t.dout_lo);
  }
  const int64_t koff = (s.k0 + n0) * ldk + static_cast<int64_t>(hk) * a.d;
#pragma unroll
  for (int p = 0; p < NP; ++p) {
    load_tile<BN, D, NT>(sK + p * BN * D, Kg[p] + koff, ldk, s.tk - n0, a.d, tid);
    load_tile<BN, D, NT>(sV + p * BN * D, Vg[p] + koff, ldk, s.tk - n0, a.d, tid);
  }

  auto load_q = [&](int it, int buf) {
    const int h = hk * G + it / nm, m0 = (mb_lo + it % nm) * BM;
    const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      load_tile<BM, D, NT>(sQ + (buf * NP + p) * BM * D, Qg[p] + qoff, ldq, s.tq - m0, a.d, tid);
      load_tile<BM, D, NT>(sdO + (buf * NP + p) * BM * D, dOg[p] + qoff, ldq, s.tq - m0, a.d, tid);
    }
    if (tid < 2 * BM) {
      const int r = tid % BM;
      const bool ok = m0 + r < s.tq;
      const float* src = (tid < BM ? a.lse2 : a.dsum) + static_cast<int64_t>(h) * a.total_q + s.q0 + m0 + (ok ? r : 0);
      cp_async4((tid < BM ? sLse : sDs) + buf * BM + r, src, ok);
    }
  };
  if (total_it > 0) load_q(0, 0);
  cp_async_commit();

  float dk[NTDW][4], dv[NTDW][4];
#pragma unroll
  for (int i = 0; i < NTDW; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

  for (int it = 0; it < total_it; ++it) {
    const int buf = it & 1;
    if (it + 1 < total_it) load_q(it + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const int h = hk * G + it / nm, m0 = (mb_lo + it % nm) * BM;
    const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
    const bool plain = a.softcap <= 0.f && slope == 0.f;
    const T* sQb = sQ + buf * NP * BM * D;
    const T* sdOb = sdO + buf * NP * BM * D;
    const float* lse = sLse + buf * BM;
    const float* dsm = sDs + buf * BM;

    // ---- S^T = K Q^T and dP^T = V dO^T (16 keys x BMW queries per warp) ----------------------
    float st[NTQ][4], dp[NTQ][4];
#pragma unroll
    for (int i = 0; i < NTQ; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[i][e] = dp[i][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSD; ++ks) {
      uint32_t ak[NP][4], av[NP][4];
#pragma unroll
      for (int p = 0; p < NP; ++p) {
        ldsm_x4(ak[p][0], ak[p][1], ak[p][2], ak[p][3], sK + p * BN * D + swz<D>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
        ldsm_x4(av[p][0], av[p][1], av[p][2], av[p][3], sV + p * BN * D + swz<D>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
      }
#pragma unroll
      for (int n2 = 0; n2 < NTQ / 2; ++n2) {
        const int r = xg * BMW + n2 * 16 + (lane & 7) + ((lane >> 4) << 3), c = ks * 16 + ((lane >> 3) & 1) * 8;
        uint32_t bq[NP][4], bo[NP][4];
#pragma unroll
        for (int p = 0; p < NP; ++p) {
          ldsm_x4(bq[p][0], bq[p][1], bq[p][2], bq[p][3], sQb + p * BM * D + swz<D>(r, c));
          ldsm_x4(bo[p][0], bo[p][1], bo[p][2], bo[p][3], sdOb + p * BM * D + swz<D>(r, c));
        }
        mma_e<E>(st[2 * n2], ak, bq, 0);
        mma_e<E>(st[2 * n2 + 1], ak, bq, 1);
        mma_e<E>(dp[2 * n2], av, bo, 0);
        mma_e<E>(dp[2 * n2 + 1], av, bo, 1);
      }
    }

    // ---- P = exp(S - LSE), dS = P (dP - Dsum) (times the soft-cap derivative) -------------
    const bool masked = tile_needs_mask(a, s, m0, BM, n0, BN);
    const int j_lo = n0 + kg * 16 + (lane >> 2);
#pragma unroll
    for (int n = 0; n < NTQ; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int il = xg * BMW + n * 8 + 2 * (lane & 3) + (e & 1);
        const int i = m0 + il, j = j_lo + (e >> 1) * 8;
        float dcap = 1.f;
        float v = plain ? st[n][e] : score_log2(a, st[n][e] * ss.qk, slope, i, j, s.off, &dcap);
        float p = ex2(fmaf(v, plain ? scale_log2 : 1.f, -lse[il]));
        float ds = p * fmaf(dp[n][e], ss.dp, -dsm[il]) * dcap;
        if (masked && !visible(a, s, i, j)) p = ds = 0.f;  // masked keys never leak NaN
        st[n][e] = p;
        dp[n][e] = ds;
      }
#pragma unroll
    for (int n = 0; n < NTQ; ++n)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int kr = kg * 16 + (lane >> 2) + rr * 8, qc = xg * BMW + n * 8 + 2 * (lane & 3);
        uint32_t h0, l0, h1, l1;
        pack_e<E>(st[n][2 * rr], st[n][2 * rr + 1], kPScale, h0, l0);
        pack_e<E>(dp[n][2 * rr], dp[n][2 * rr + 1], ss.ds, h1, l1);
        *reinterpret_cast<uint32_t*>(sP + swz<BM>(kr, qc)) = h0;
        *reinterpret_cast<uint32_t*>(sdS + swz<BM>(kr, qc)) = h1;
        if constexpr (NP == 2) {
          *reinterpret_cast<uint32_t*>(sP + BN * BM + swz<BM>(kr, qc)) = l0;
          *reinterpret_cast<uint32_t*>(sdS + BN * BM + swz<BM>(kr, qc)) = l1;
        }
      }
    __syncthreads();

    // ---- dV += P^T dO, dK += dS^T Q (16 keys x DW dims per warp) ---------------------------
#pragma unroll
    for (int ks = 0; ks < BM / 16; ++ks) {
      uint32_t ap[NP][4], as[NP][4];
#pragma unroll
      for (int p = 0; p < NP; ++p) {
        ldsm_x4(ap[p][0], ap[p][1], ap[p][2], ap[p][3], sP + p * BN * BM + swz<BM>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
        ldsm_x4(as[p][0], as[p][1], as[p][2], as[p][3], sdS + p * BN * BM + swz<BM>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
      }
#pragma unroll
      for (int d2 = 0; d2 < NTDW / 2; ++d2) {
        const int r = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = xg * DW + d2 * 16 + (lane >> 4) * 8;
        uint32_t bo[NP][4], bq[NP][4];
#pragma unroll
        for (int p = 0; p < NP; ++p) {
          ldsm_x4_t(bo[p][0], bo[p][1], bo[p][2], bo[p][3], sdOb + p * BM * D + swz<D>(r, c));
          ldsm_x4_t(bq[p][0], bq[p][1], bq[p][2], bq[p][3], sQb + p * BM * D + swz<D>(r, c));
        }
        mma_e<E>(dv[2 * d2], ap, bo, 0);
        mma_e<E>(dv[2 * d2 + 1], ap, bo, 1);
        mma_e<E>(dk[2 * d2], as, bq, 0);
        mma_e<E>(dk[2 * d2 + 1], as, bq, 1);
      }
    }

    // ---- dQ += dS K into the float32 accumulator (atomics; scaled units) ------------------------
    if (!a.deterministic) {
      const int qr = warp % QRB, qc = warp / QRB;
      float dq[NTDQ][4];
#pragma unroll
      for (int i = 0; i < NTDQ; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[i][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) {
        uint32_t af[NP][4];
#pragma unroll
        for (int p = 0; p < NP; ++p)
          ldsm_x4_t(af[p][0], af[p][1], af[p][2], af[p][3], sdS + p * BN * BM + swz<BM>(ks * 16 + (lane & 7) + ((lane >> 4) << 3), qr * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
        for (int d2 = 0; d2 < NTDQ / 2; ++d2) {
          uint32_t bk[NP][4];
#pragma unroll
          for (int p = 0; p < NP; ++p)
            ldsm_x4_t(bk[p][0], bk[p][1], bk[p][2], bk[p][3], sK + p * BN * D + swz<D>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, qc * DQW + d2 * 16 + (lane >> 4) * 8));
          mma_e<E>(dq[2 * d2], af, bk, 0);
          mma_e<E>(dq[2 * d2 + 1], af, bk, 1);
        }
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int i = m0 + qr * 16 + (lane >> 2) + rr * 8;
        if (i < s.tq) {
          float* dst = a.dq_accum + (static_cast<int64_t>(s.q0 + i) * a.H + h) * a.d;
#pragma unroll
          for (int n = 0; n < NTDQ; ++n) {
            const int c = qc * DQW + n * 8 + 2 * (lane & 3);
            if (c < a.d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
              atomicAdd(reinterpret_cast<float2*>(dst + c), make_float2(dq[n][2 * rr], dq[n][2 * rr + 1]));
#else
              atomicAdd(dst + c, dq[n][2 * rr]);
              atomicAdd(dst + c + 1, dq[n][2 * rr + 1]);
#endif
            }
          }
        }
      }
    }
    __syncthreads();  // sP, sdS and this buffer of Q/dO may be overwritten now
  }
  cp_async_wait<0>();

  // ---- epilogue: dK = scale * sum dS^T Q, dV ------------------------------------------------
  store_dkdv_rows<E, NTDW>(a, t, s, hk, n0 + kg * 16 + (lane >> 2), xg * DW, lane, &dk[0][0], &dv[0][0], a.scale * ss.dk, ss.dv);
}

// Deterministic dQ: per query tile, walk the key tiles; dS never leaves registers.
template <typename E, int D>
__global__ void __launch_bounds__(DqTraits<D, E::SPLIT>::NW * 32, 1) bwd_dq_kernel(FaArgs a, FaTensors t) {
  using T = typename E::T;
  using TO = typename E::TO;
  constexpr int NP = E::NP;
  using Tr = DqTraits<D, E::SPLIT>;
  constexpr int BM = Tr::BM, BN = Tr::BN, NW = Tr::NW, NT = NW * 32;
  constexpr int NTN = BN / 8, NTD = D / 8, KSD = D / 16, KSN = BN / 16;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [NP][BM][D]
  T* sdO = sQ + NP * BM * D;               // [NP][BM][D]
  T* sK = sdO + NP * BM * D;               // [2][NP][BN][D]
  T* sV = sK + 2 * NP * BN * D;            // [2][NP][BN][D]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * BM;
  if (m0 >= s.tq) return;
  const int hk = h / (a.H / a.Hkv);
  const int64_t ldq = static_cast<int64_t>(a.H) * a.d, ldk = static_cast<int64_t>(a.Hkv) * a.d;
  const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
  const int64_t koff = s.k0 * ldk + static_cast<int64_t>(hk) * a.d;
  const T* Qg[NP];
  const T* dOg[NP];
  const T* Kg[NP];
  const T* Vg[NP];
  Qg[0] = static_cast<const T*>(t.q) + qoff;
  dOg[0] = static_cast<const T*>(t.dout) + qoff;
  Kg[0] = static_cast<const T*>(t.k) + koff;
  Vg[0] = static_cast<const T*>(t.v) + koff;
  if constexpr (NP == 2) {
    Qg[1] = static_cast<const T*>(t.q_lo) + qoff;
    dOg[1] = static_cast<const T*>(t.dout_lo) + qoff;
    Kg[1] = static_cast<const T*>(t.k_lo) + koff;
    Vg[1] = static_cast<const T*>(t.v_lo) + koff;
  }
  const SplitScales ss = split_scales<E>(a);
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  const bool plain = a.softcap <= 0.f && slope == 0.f;
  const float scale_log2 = a.scale * kLog2e * ss.qk;
  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);
  auto load_kv = [&](int nb, int buf) {
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      load_tile<BN, D, NT>(sK + (buf * NP + p) * BN * D, Kg[p] + nb * BN * ldk, ldk, s.tk - nb * BN, a.d, tid);
      load_tile<BN, D, NT>(sV + (buf * NP + p) * BN * D, Vg[p] + nb * BN * ldk, ldk, s.tk - nb * BN, a.d, tid);
    }
  };

#pragma unroll
  for (int p = 0; p < NP; ++p) {
    load_tile<BM, D, NT>(sQ + p * BM * D, Qg[p], ldq, s.tq - m0, a.d, tid);
    load_tile<BM, D, NT>(sdO + p * BM * D, dOg[p], ldq, s.tq - m0, a.d, tid);
  }
  if (nb_lo < nb_hi) load_kv(nb_lo, 0);
  cp_async_commit();

  const int r_lo = m0 + warp * 16 + (lane >> 2);
  float lse_r[2], ds_r[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int i = r_lo + rr * 8;
    const int64_t idx = static_cast<int64_t>(h) * a.total_q + s.q0 + i;
    lse_r[rr] = i < s.tq ? a.lse2[idx] : INFINITY;
    ds_r[rr] = i < s.tq ? a.dsum[idx] : 0.f;
  }
  float dq[NTD][4];
#pragma unroll
  for (int i = 0; i < NTD; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[i][e] = 0.f;

  for (int nb = nb_lo; nb < nb_hi; ++nb) {
    const int buf = (nb - nb_lo) & 1;
    const T* sKb = sK + buf * NP * BN * D;
    const T* sVb = sV + buf * NP * BN * D;
    if (nb + 1 < nb_hi) load_kv(nb + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    float sc[NTN][4], dp[NTN][4];
#pragma unroll
    for (int i = 0; i < NTN; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[i][e] = dp[i][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSD; ++ks) {
      uint32_t aq[NP][4], ao[NP][4];
#pragma unroll
      for (int p = 0; p < NP; ++p) {
        ldsm_x4(aq[p][0], aq[p][1], aq[p][2], aq[p][3], sQ + p * BM * D + swz<D>(warp * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
        ldsm_x4(ao[p][0], ao[p][1], ao[p][2], ao[p][3], sdO + p * BM * D + swz<D>(warp * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
      }
#pragma unroll
      for (int n2 = 0; n2 < NTN / 2; ++n2) {
        const int r = n2 * 16 + (lane & 7) + ((lane >> 4) << 3), c = ks * 16 + ((lane >> 3) & 1) * 8;
        uint32_t bk[NP][4], bv[NP][4];
#pragma unroll
        for (int p = 0; p < NP; ++p) {
          ldsm_x4(bk[p][0], bk[p][1], bk[p][2], bk[p][3], sKb + p * BN * D + swz<D>(r, c));
          ldsm_x4(bv[p][0], bv[p][1], bv[p][2], bv[p][3], sVb + p * BN * D + swz<D>(r, c));
        }
        mma_e<E>(sc[2 * n2], aq, bk, 0);
        mma_e<E>(sc[2 * n2 + 1], aq, bk, 1);
        mma_e<E>(dp[2 * n2], ao, bv, 0);
        mma_e<E>(dp[2 * n2 + 1], ao, bv, 1);
      }
    }
    const int n0 = nb * BN;
    const bool masked = tile_needs_mask(a, s, m0, BM, n0, BN);
#pragma unroll
    for (int n = 0; n < NTN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = r_lo + (e >> 1) * 8, j = n0 + n * 8 + 2 * (lane & 3) + (e & 1);
        float dcap = 1.f;
        float v = plain ? sc[n][e] : score_log2(a, sc[n][e] * ss.qk, slope, i, j, s.off, &dcap);
        const float p = ex2(fmaf(v, plain ? scale_log2 : 1.f, -lse_r[e >> 1]));
        float ds = p * fmaf(dp[n][e], ss.dp, -ds_r[e >> 1]) * dcap;
        if (masked && !visible(a, s, i, j)) ds = 0.f;
        dp[n][e] = ds;
      }
    // dQ += dS K
#pragma unroll
    for (int ks = 0; ks < KSN; ++ks) {
      uint32_t af[NP][4];
      pack_e<E>(dp[2 * ks][0], dp[2 * ks][1], ss.ds, af[0][0], af[NP - 1][0]);
      pack_e<E>(dp[2 * ks][2], dp[2 * ks][3], ss.ds, af[0][1], af[NP - 1][1]);
      pack_e<E>(dp[2 * ks + 1][0], dp[2 * ks + 1][1], ss.ds, af[0][2], af[NP - 1][2]);
      pack_e<E>(dp[2 * ks + 1][2], dp[2 * ks + 1][3], ss.ds, af[0][3], af[NP - 1][3]);
#pragma unroll
      for (int d2 = 0; d2 < NTD / 2; ++d2) {
        uint32_t bk[NP][4];
#pragma unroll
        for (int p = 0; p < NP; ++p)
          ldsm_x4_t(bk[p][0], bk[p][1], bk[p][2], bk[p][3], sKb + p * BN * D + swz<D>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, d2 * 16 + (lane >> 4) * 8));
        mma_e<E>(dq[2 * d2], af, bk, 0);
        mma_e<E>(dq[2 * d2 + 1], af, bk, 1);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  const float mul = a.scale * ss.dq;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int i = r_lo + rr * 8;
    if (i >= s.tq) continue;
    TO* dQ = static_cast<TO*>(t.dq) + (static_cast<int64_t>(s.q0 + i) * a.H + h) * a.d_out;
    store_row<NTD>(dQ, 0, lane, a.d_out, [&](int n, int j) { return dq[n][2 * rr + j] * mul; });
  }
}

// dQ = scale * unscale * accumulator: kernel layout [total_q, H, d] to the caller's [total_q, H, d_out].
template <typename E>
__global__ void bwd_convert_dq_kernel(FaArgs a, FaTensors t) {
  using TO = typename E::TO;
  const float mul = a.scale * split_scales<E>(a).dq;
  TO* out = static_cast<TO*>(t.dq);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (a.d_out == a.d) {  // same layout: two elements per thread step
    const int64_t n = static_cast<int64_t>(a.total_q) * a.H * a.d;
    for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 2; i < n; i += stride * 2) {
      const float2 v = *reinterpret_cast<const float2*>(a.dq_accum + i);
      Out<TO>::two(out + i, v.x * mul, v.y * mul);
    }
  } else {
    const int64_t n = static_cast<int64_t>(a.total_q) * a.H * a.d_out;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      const int64_t row = i / a.d_out;
      const int c = static_cast<int>(i - row * a.d_out);
      Out<TO>::one(out + i, a.dq_accum[row * a.d + c] * mul);
    }
  }
}

}  // namespace fa
