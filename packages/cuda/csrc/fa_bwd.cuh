// Backward attention by recomputation, FlashAttention-2 style.
//
//   bwd_preprocess_kernel   Dsum = rowsum(dO * O), lse2 = lse * log2(e), dQ accumulator = 0
//   bwd_kernel              a CTA owns BN keys of one kv head; it walks every query head of its
//                           GQA group and every query tile that sees its keys, recomputes
//                           P = exp(S - LSE), and accumulates dK, dV in registers. dQ goes to a
//                           float32 accumulator with atomics (or, when deterministic, is left to
//                           bwd_dq_kernel).
//   bwd_dq_kernel           deterministic dQ: a CTA owns BM query rows and walks the key tiles
//                           (no atomics; bit-identical run to run)
//   bwd_convert_dq_kernel   dQ = scale * accumulator, rounded to the input dtype
#pragma once
#include "fa_common.cuh"

namespace fa {

// One warp per (packed row, head).
template <typename T>
__global__ void bwd_preprocess_kernel(FaArgs a, FaTensors t) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= static_cast<int64_t>(a.total_q) * a.H) return;
  const int row = static_cast<int>(item / a.H), h = static_cast<int>(item % a.H);
  const int64_t base = (static_cast<int64_t>(row) * a.H + h) * a.d;
  const T* O = static_cast<const T*>(t.o) + base;
  const T* dO = static_cast<const T*>(t.dout) + base;
  float acc = 0.f;
  for (int c = lane * 2; c < a.d; c += 64) {
    const float2 o2 = make_float2(Mma<T>::to_float(O[c]), Mma<T>::to_float(O[c + 1]));
    acc += o2.x * Mma<T>::to_float(dO[c]) + o2.y * Mma<T>::to_float(dO[c + 1]);
  }
#pragma unroll
  for (int w = 16; w > 0; w >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, w);
  if (!a.deterministic)
    for (int c = lane; c < a.d; c += 32) a.dq_accum[base + c] = 0.f;
  if (lane == 0) {
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

template <typename T, typename Tr>
__global__ void __launch_bounds__(Tr::NW * 32, 1) bwd_kernel(FaArgs a, FaTensors t) {
  // ---- roles and sizes --------------------------------------------------------------------
  constexpr int D = Tr::D, BM = Tr::BM, BN = Tr::BN, NW = Tr::NW, WK = Tr::WK, WX = NW / WK, NT = NW * 32;
  static_assert(BN == 16 * WK, "one warp row per 16 keys");
  constexpr int BMW = BM / WX;    // queries per warp in S^T and dP^T
  constexpr int DW = D / WX;      // head dims per warp in dK and dV
  constexpr int NTQ = BMW / 8;
  constexpr int NTDW = DW / 8;
  constexpr int KSD = D / 16;
  constexpr int QRB = BM / 16, QCB = NW / QRB, DQW = D / QCB, NTDQ = DQW / 8;
  using M = Mma<T>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + BN * D;
  T* sQ = sV + BN * D;       // [2][BM][D]
  T* sdO = sQ + 2 * BM * D;  // [2][BM][D]
  T* sP = sdO + 2 * BM * D;  // [BN][BM]
  T* sdS = sP + BN * BM;     // [BN][BM]
  float* sLse = reinterpret_cast<float*>(sdS + BN * BM);  // [2][BM]
  float* sDs = sLse + 2 * BM;                             // [2][BM]

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
  const float scale_log2 = a.scale * kLog2e;

  const int64_t koff = (s.k0 + n0) * ldk + static_cast<int64_t>(hk) * a.d;
  load_tile<BN, D, NT>(sK, static_cast<const T*>(t.k) + koff, ldk, s.tk - n0, a.d, tid);
  load_tile<BN, D, NT>(sV, static_cast<const T*>(t.v) + koff, ldk, s.tk - n0, a.d, tid);

  auto load_q = [&](int it, int buf) {
    const int h = hk * G + it / nm, m0 = (mb_lo + it % nm) * BM;
    const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
    load_tile<BM, D, NT>(sQ + buf * BM * D, static_cast<const T*>(t.q) + qoff, ldq, s.tq - m0, a.d, tid);
    load_tile<BM, D, NT>(sdO + buf * BM * D, static_cast<const T*>(t.dout) + qoff, ldq, s.tq - m0, a.d, tid);
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
    const T* sQb = sQ + buf * BM * D;
    const T* sdOb = sdO + buf * BM * D;
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
      uint32_t ak[4], av[4];
      ldsm_x4(ak[0], ak[1], ak[2], ak[3], sK + swz<D>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
      ldsm_x4(av[0], av[1], av[2], av[3], sV + swz<D>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int n2 = 0; n2 < NTQ / 2; ++n2) {
        const int r = xg * BMW + n2 * 16 + (lane & 7) + ((lane >> 4) << 3), c = ks * 16 + ((lane >> 3) & 1) * 8;
        uint32_t b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, sQb + swz<D>(r, c));
        M::run(st[2 * n2], ak, b0, b1);
        M::run(st[2 * n2 + 1], ak, b2, b3);
        ldsm_x4(b0, b1, b2, b3, sdOb + swz<D>(r, c));
        M::run(dp[2 * n2], av, b0, b1);
        M::run(dp[2 * n2 + 1], av, b2, b3);
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
        float v = plain ? st[n][e] : score_log2(a, st[n][e], slope, i, j, s.off, &dcap);
        float p = ex2(fmaf(v, plain ? scale_log2 : 1.f, -lse[il]));
        float ds = p * (dp[n][e] - dsm[il]) * dcap;
        if (masked && !visible(a, s, i, j)) p = ds = 0.f;  // masked keys never leak NaN
        st[n][e] = p;
        dp[n][e] = ds;
      }
#pragma unroll
    for (int n = 0; n < NTQ; ++n)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int kr = kg * 16 + (lane >> 2) + rr * 8, qc = xg * BMW + n * 8 + 2 * (lane & 3);
        *reinterpret_cast<uint32_t*>(sP + swz<BM>(kr, qc)) = M::pack(st[n][2 * rr], st[n][2 * rr + 1]);
        *reinterpret_cast<uint32_t*>(sdS + swz<BM>(kr, qc)) = M::pack(dp[n][2 * rr], dp[n][2 * rr + 1]);
      }
    __syncthreads();

    // ---- dV += P^T dO, dK += dS^T Q (16 keys x DW dims per warp) ---------------------------
#pragma unroll
    for (int ks = 0; ks < BM / 16; ++ks) {
      uint32_t ap[4], as[4];
      ldsm_x4(ap[0], ap[1], ap[2], ap[3], sP + swz<BM>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
      ldsm_x4(as[0], as[1], as[2], as[3], sdS + swz<BM>(kg * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int d2 = 0; d2 < NTDW / 2; ++d2) {
        const int r = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = xg * DW + d2 * 16 + (lane >> 4) * 8;
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, sdOb + swz<D>(r, c));
        M::run(dv[2 * d2], ap, b0, b1);
        M::run(dv[2 * d2 + 1], ap, b2, b3);
        ldsm_x4_t(b0, b1, b2, b3, sQb + swz<D>(r, c));
        M::run(dk[2 * d2], as, b0, b1);
        M::run(dk[2 * d2 + 1], as, b2, b3);
      }
    }

    // ---- dQ += dS K into the float32 accumulator (atomics) -------------------------------------
    if (!a.deterministic) {
      const int qr = warp % QRB, qc = warp / QRB;
      float dq[NTDQ][4];
#pragma unroll
      for (int i = 0; i < NTDQ; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[i][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) {
        uint32_t af[4];
        ldsm_x4_t(af[0], af[1], af[2], af[3], sdS + swz<BM>(ks * 16 + (lane & 7) + ((lane >> 4) << 3), qr * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
        for (int d2 = 0; d2 < NTDQ / 2; ++d2) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(b0, b1, b2, b3, sK + swz<D>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, qc * DQW + d2 * 16 + (lane >> 4) * 8));
          M::run(dq[2 * d2], af, b0, b1);
          M::run(dq[2 * d2 + 1], af, b2, b3);
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
  store_dkdv_rows<T, NTDW>(a, t, s, hk, ldk, n0 + kg * 16 + (lane >> 2), xg * DW, lane, &dk[0][0], &dv[0][0]);
}

// Deterministic dQ: per query tile, walk the key tiles; dS never leaves registers.
template <typename T, int D>
__global__ void __launch_bounds__(DqTraits<D>::NW * 32, 1) bwd_dq_kernel(FaArgs a, FaTensors t) {
  using Tr = DqTraits<D>;
  constexpr int BM = Tr::BM, BN = Tr::BN, NW = Tr::NW, NT = NW * 32;
  static_assert(BM == 16 * NW, "16 query rows per warp");
  constexpr int NTN = BN / 8, NTD = D / 8, KSD = D / 16, KSN = BN / 16;
  using M = Mma<T>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + BM * D;
  T* sK = sdO + BM * D;     // [2][BN][D]
  T* sV = sK + 2 * BN * D;  // [2][BN][D]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * BM;
  if (m0 >= s.tq) return;
  const int hk = h / (a.H / a.Hkv);
  const int64_t ldq = static_cast<int64_t>(a.H) * a.d, ldk = static_cast<int64_t>(a.Hkv) * a.d;
  const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
  const T* Kg = static_cast<const T*>(t.k) + s.k0 * ldk + static_cast<int64_t>(hk) * a.d;
  const T* Vg = static_cast<const T*>(t.v) + s.k0 * ldk + static_cast<int64_t>(hk) * a.d;
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  const bool plain = a.softcap <= 0.f && slope == 0.f;
  const float scale_log2 = a.scale * kLog2e;
  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);

  load_tile<BM, D, NT>(sQ, static_cast<const T*>(t.q) + qoff, ldq, s.tq - m0, a.d, tid);
  load_tile<BM, D, NT>(sdO, static_cast<const T*>(t.dout) + qoff, ldq, s.tq - m0, a.d, tid);
  if (nb_lo < nb_hi) {
    load_tile<BN, D, NT>(sK, Kg + nb_lo * BN * ldk, ldk, s.tk - nb_lo * BN, a.d, tid);
    load_tile<BN, D, NT>(sV, Vg + nb_lo * BN * ldk, ldk, s.tk - nb_lo * BN, a.d, tid);
  }
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
    const T* sKb = sK + buf * BN * D;
    const T* sVb = sV + buf * BN * D;
    if (nb + 1 < nb_hi) {
      const int n1 = (nb + 1) * BN;
      load_tile<BN, D, NT>(sK + (buf ^ 1) * BN * D, Kg + n1 * ldk, ldk, s.tk - n1, a.d, tid);
      load_tile<BN, D, NT>(sV + (buf ^ 1) * BN * D, Vg + n1 * ldk, ldk, s.tk - n1, a.d, tid);
    }
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
      uint32_t aq[4], ao[4];
      ldsm_x4(aq[0], aq[1], aq[2], aq[3], sQ + swz<D>(warp * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
      ldsm_x4(ao[0], ao[1], ao[2], ao[3], sdO + swz<D>(warp * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int n2 = 0; n2 < NTN / 2; ++n2) {
        const int r = n2 * 16 + (lane & 7) + ((lane >> 4) << 3), c = ks * 16 + ((lane >> 3) & 1) * 8;
        uint32_t b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, sKb + swz<D>(r, c));
        M::run(sc[2 * n2], aq, b0, b1);
        M::run(sc[2 * n2 + 1], aq, b2, b3);
        ldsm_x4(b0, b1, b2, b3, sVb + swz<D>(r, c));
        M::run(dp[2 * n2], ao, b0, b1);
        M::run(dp[2 * n2 + 1], ao, b2, b3);
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
        float v = plain ? sc[n][e] : score_log2(a, sc[n][e], slope, i, j, s.off, &dcap);
        const float p = ex2(fmaf(v, plain ? scale_log2 : 1.f, -lse_r[e >> 1]));
        float ds = p * (dp[n][e] - ds_r[e >> 1]) * dcap;
        if (masked && !visible(a, s, i, j)) ds = 0.f;
        dp[n][e] = ds;
      }
    // dQ += dS K
#pragma unroll
    for (int ks = 0; ks < KSN; ++ks) {
      uint32_t af[4];
      af[0] = M::pack(dp[2 * ks][0], dp[2 * ks][1]);
      af[1] = M::pack(dp[2 * ks][2], dp[2 * ks][3]);
      af[2] = M::pack(dp[2 * ks + 1][0], dp[2 * ks + 1][1]);
      af[3] = M::pack(dp[2 * ks + 1][2], dp[2 * ks + 1][3]);
#pragma unroll
      for (int d2 = 0; d2 < NTD / 2; ++d2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, sKb + swz<D>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, d2 * 16 + (lane >> 4) * 8));
        M::run(dq[2 * d2], af, b0, b1);
        M::run(dq[2 * d2 + 1], af, b2, b3);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int i = r_lo + rr * 8;
    if (i >= s.tq) continue;
    T* dQ = static_cast<T*>(t.dq) + (static_cast<int64_t>(s.q0 + i) * a.H + h) * a.d;
#pragma unroll
    for (int n = 0; n < NTD; ++n) {
      const int c = n * 8 + 2 * (lane & 3);
      if (c < a.d) *reinterpret_cast<uint32_t*>(dQ + c) = M::pack(dq[n][2 * rr] * a.scale, dq[n][2 * rr + 1] * a.scale);
    }
  }
}

template <typename T>
__global__ void bwd_convert_dq_kernel(FaArgs a, FaTensors t) {
  const int64_t n = static_cast<int64_t>(a.total_q) * a.H * a.d;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 2; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x * 2) {
    const float2 v = *reinterpret_cast<const float2*>(a.dq_accum + i);
    *reinterpret_cast<uint32_t*>(static_cast<T*>(t.dq) + i) = Mma<T>::pack(v.x * a.scale, v.y * a.scale);
  }
}

}  // namespace fa
