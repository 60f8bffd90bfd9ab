// Backward attention on Hopper warpgroup MMA (sm_90a). Same schedule as bwd_kernel (fa_bwd.cuh):
// a CTA owns BN = 128 keys of one kv head (two warpgroups x 64 keys), walks every query head of
// its GQA group and every query tile (BM = 64 rows) that sees its keys, and keeps dK, dV in
// registers. Per query tile, per warpgroup:
//   S^T  = K_w Q^T      SS-wgmma m64n64   (K-major A and B)
//   dP^T = V_w dO^T     SS-wgmma m64n64
//   P^T = exp2(S^T - lse), dS^T = P^T (dP^T - Dsum)  in registers
//   dV  += P^T dO       RS-wgmma m64nD    (P^T from registers, dO transposed via the descriptor)
//   dK  += dS^T Q       RS-wgmma m64nD
//   dS^T -> shared memory; dQ[:, 64w:64w+64] = dS K  SS-wgmma m64n64, both operands transposed,
//   added to the float32 accumulator with vector atomics (skipped when deterministic).
// Tiles use the 128B-swizzled column-block layout of fa_fwd_wgmma.cuh.
#pragma once
#include "fa_fwd_wgmma.cuh"

namespace fa {

template <int D_>
struct BwdWgCfg {
  static constexpr int D = D_, BM = 64, BN = 128, NWG = 2;
};

template <typename T, typename Tr>
__global__ void __launch_bounds__(Tr::NWG * 128, 1) bwd_wgmma_kernel(FaArgs a, FaTensors t) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Tr::D, BM = Tr::BM, BN = Tr::BN, NWG = Tr::NWG, NT = NWG * 128;
  static_assert(BN == 64 * NWG && BM == 64, "64 keys per warpgroup, 64 queries per step");
  constexpr int NS = BM / 2;  // S^T / dP^T accumulator floats per thread (64 x BM)
  constexpr int NG = D / 2;   // dK / dV accumulator floats per thread (64 x D)
  constexpr int NQ = 32;      // dQ accumulator floats per thread (64 x 64)
  using M = Mma<T>;
  using Op64 = wg::Op<T, 64>;
  using OpD = wg::Op<T, D>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + BN * D;
  T* sQ = sV + BN * D;       // [2][BM][D]
  T* sdO = sQ + 2 * BM * D;  // [2][BM][D]
  T* sdS = sdO + 2 * BM * D; // [BN keys][BM queries]
  float* sLse = reinterpret_cast<float*>(sdS + BN * BM);  // [2][BM]
  float* sDs = sLse + 2 * BM;                             // [2][BM]

  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
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
  load_tile128<BN, D, NT>(sK, static_cast<const T*>(t.k) + koff, ldk, s.tk - n0, a.d, tid);
  load_tile128<BN, D, NT>(sV, static_cast<const T*>(t.v) + koff, ldk, s.tk - n0, a.d, tid);

  auto load_q = [&](int it, int buf) {
    const int h = hk * G + it / nm, m0 = (mb_lo + it % nm) * BM;
    const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
    load_tile128<BM, D, NT>(sQ + buf * BM * D, static_cast<const T*>(t.q) + qoff, ldq, s.tq - m0, a.d, tid);
    load_tile128<BM, D, NT>(sdO + buf * BM * D, static_cast<const T*>(t.dout) + qoff, ldq, s.tq - m0, a.d, tid);
    if (tid < 2 * BM) {
      const int r = tid % BM;
      const bool ok = m0 + r < s.tq;
      const float* src = (tid < BM ? a.lse2 : a.dsum) + static_cast<int64_t>(h) * a.total_q + s.q0 + m0 + (ok ? r : 0);
      cp_async4((tid < BM ? sLse : sDs) + buf * BM + r, src, ok);
    }
  };
  if (total_it > 0) load_q(0, 0);
  cp_async_commit();

  float dk[NG], dv[NG];
#pragma unroll
  for (int i = 0; i < NG; ++i) dk[i] = dv[i] = 0.f;
  const uint32_t k_addr = smem_u32(sK) + wgi * 64 * 128;  // this warpgroup's 64 key rows
  const uint32_t v_addr = smem_u32(sV) + wgi * 64 * 128;
  const int kr = wgi * 64 + warp * 16 + (lane >> 2);      // local key row of c0/c1

  for (int it = 0; it < total_it; ++it) {
    const int buf = it & 1;
    if (it + 1 < total_it) load_q(it + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    wg::fence_proxy_async();
    __syncthreads();

    const int h = hk * G + it / nm, m0 = (mb_lo + it % nm) * BM;
    const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
    const bool plain = a.softcap <= 0.f && slope == 0.f;
    const uint32_t q_addr = smem_u32(sQ + buf * BM * D), do_addr = smem_u32(sdO + buf * BM * D);
    const float* lse = sLse + buf * BM;
    const float* dsm = sDs + buf * BM;

    // ---- S^T = K Q^T, dP^T = V dO^T ----------------------------------------------------------
    float st[NS], dp[NS];
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t cb = (ks >> 2), ko = (ks & 3) * 32;
      Op64::ss(st, wg::desc(k_addr + cb * BN * 128 + ko, 16, 1024), wg::desc(q_addr + cb * BM * 128 + ko, 16, 1024), ks > 0);
    }
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t cb = (ks >> 2), ko = (ks & 3) * 32;
      Op64::ss(dp, wg::desc(v_addr + cb * BN * 128 + ko, 16, 1024), wg::desc(do_addr + cb * BM * 128 + ko, 16, 1024), ks > 0);
    }
    wg::commit();
    wg::wait<0>();
    wg::fence_operands<NS>(st);
    wg::fence_operands<NS>(dp);

    // ---- P^T, dS^T ------------------------------------------------------------------------------
    const bool masked = tile_needs_mask(a, s, m0, BM, n0, BN);
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      const int il = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
      const int q = m0 + il, j = n0 + kr + ((i >> 1) & 1) * 8;
      float dcap = 1.f;
      const float v = plain ? st[i] : score_log2(a, st[i], slope, q, j, s.off, &dcap);
      float p = ex2(fmaf(v, plain ? scale_log2 : 1.f, -lse[il]));
      float ds = p * (dp[i] - dsm[il]) * dcap;
      if (masked && !visible(a, s, q, j)) p = ds = 0.f;
      st[i] = p;
      dp[i] = ds;
    }
    uint32_t pf[BM / 16][4], sf[BM / 16][4];
#pragma unroll
    for (int ks = 0; ks < BM / 16; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        pf[ks][r] = M::pack(st[8 * ks + 2 * r], st[8 * ks + 2 * r + 1]);
        sf[ks][r] = M::pack(dp[8 * ks + 2 * r], dp[8 * ks + 2 * r + 1]);
      }
    }
    if (!a.deterministic) {
      // dS^T to shared memory ([key][query], swizzled) for dQ = dS K
#pragma unroll
      for (int ks = 0; ks < BM / 16; ++ks)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          // register r of k-step ks holds (row kr + 8*(r&1), cols 16ks + 8*(r>>1) + 2*(lane&3) + 0..1)
          const int row = kr + (r & 1) * 8, col = ks * 16 + (r >> 1) * 8 + 2 * (lane & 3);
          *reinterpret_cast<uint32_t*>(sdS + swz128<BN>(row, col)) = sf[ks][r];
        }
    }

    // ---- dV += P^T dO, dK += dS^T Q ---------------------------------------------------------------
    wg::fence_operands<NG>(dv);
    wg::fence_operands<NG>(dk);
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < BM / 16; ++ks) OpD::rs(dv, pf[ks], wg::desc(do_addr + ks * 16 * 128, BM * 128, 1024), 1);
#pragma unroll
    for (int ks = 0; ks < BM / 16; ++ks) OpD::rs(dk, sf[ks], wg::desc(q_addr + ks * 16 * 128, BM * 128, 1024), 1);
    wg::commit();

    // ---- dQ[:, 64w : 64w+64] += dS K ----------------------------------------------------------------
    if (!a.deterministic) {
      wg::fence_proxy_async();
      __syncthreads();  // dS^T of both warpgroups is in shared memory
      float dq[NQ];
      const uint32_t ds_addr = smem_u32(sdS), kb_addr = smem_u32(sK) + wgi * BN * 128;
      wg::fence();
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks)
        Op64::ss_tt(dq, wg::desc(ds_addr + ks * 16 * 128, BN * 128, 1024), wg::desc(kb_addr + ks * 16 * 128, BN * 128, 1024), ks > 0);
      wg::commit();
      wg::wait<0>();
      wg::fence_operands<NQ>(dq);
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int i = m0 + warp * 16 + (lane >> 2) + rr * 8;
        if (i < s.tq) {
          float* dst = a.dq_accum + (static_cast<int64_t>(s.q0 + i) * a.H + h) * a.d;
#pragma unroll
          for (int n = 0; n < NQ / 4; ++n) {
            const int c = wgi * 64 + n * 8 + 2 * (lane & 3);
            if (c < a.d) atomicAdd(reinterpret_cast<float2*>(dst + c), make_float2(dq[4 * n + 2 * rr], dq[4 * n + 2 * rr + 1]));
          }
        }
      }
    } else {
      wg::wait<0>();
    }
    wg::fence_operands<NG>(dv);
    wg::fence_operands<NG>(dk);
    __syncthreads();  // sdS and this Q/dO buffer may be overwritten now
  }
  cp_async_wait<0>();

  // ---- epilogue -----------------------------------------------------------------------------------
  store_dkdv_rows<T, NG / 4>(a, t, s, hk, ldk, n0 + kr, 0, lane, dk, dv);
#else
  __trap();
#endif
}

}  // namespace fa
