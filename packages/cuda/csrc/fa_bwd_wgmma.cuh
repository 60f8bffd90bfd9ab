// Backward attention on Hopper warpgroup MMA (sm_90a). Same schedule as bwd_kernel (fa_bwd.cuh):
// a CTA owns BN keys of one kv head, walks every query head of its GQA group and every query
// tile (BM rows) that sees its keys, and keeps dK, dV in registers. The NWG warpgroups split into
// KG = BN / 64 key groups x QG query groups (BwdWgCfg, fa_traits.cuh); warpgroup (key group kg,
// query group qg) owns keys 64·kg.. and queries QW·qg.. (QW = BM / QG) of each step:
//   S^T  = K_kg Q_qg^T     SS-wgmma m64nQW   (K-major A and B)
//   dP^T = V_kg dO_qg^T    SS-wgmma m64nQW
//   P^T = exp2(S^T - lse), dS^T = P^T (dP^T - Dsum)  in registers
//   dV  += P^T dO_qg       RS-wgmma m64nD    (P^T from registers, dO transposed via the descriptor)
//   dK  += dS^T Q_qg       RS-wgmma m64nD
//   dS^T -> shared memory; dQ[:, 64w:64w+64] = dS K  SS-wgmma m64n64 over all BN keys, both
//   operands transposed, added to the float32 accumulator with vector atomics (skipped when
//   deterministic).
// With QG > 1 the warpgroups of one key group hold partial dK, dV; they are added through shared
// memory at the end. The split f32 policy issues three wgmmas per product (hi·lo, lo·hi, hi·hi)
// on two-plane tiles and splits P^T and dS^T in registers.
// Tiles use the 128B-swizzled column-block layout (swz128, fa_tile.cuh).
#pragma once

#include "fa_bwd_keys.cuh"

namespace fa {

template <typename E, typename Tr>
__global__ void __launch_bounds__(Tr::NWG * 128, 1) bwd_wgmma_kernel(FaArgs a, FaTensors t) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::T;
  constexpr int NP = E::NP;
  constexpr int D = Tr::D, BM = Tr::BM, BN = Tr::BN, NWG = Tr::NWG, NT = NWG * 128;
  constexpr int KG = Tr::KG, QG = Tr::QG, QW = Tr::QW;
  using Keys = WgBwdKeys<E, D, BN, BM, QW>;
  constexpr int NS = Keys::NS, NG = Keys::NG;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);  // [NP][BN][D]
  T* sV = sK + NP * BN * D;                // [NP][BN][D]
  T* sQ = sV + NP * BN * D;                // [2][NP][BM][D]
  T* sdO = sQ + 2 * NP * BM * D;           // [2][NP][BM][D]
  T* sdS = sdO + 2 * NP * BM * D;          // [NP][BN keys][BM queries]
  float* sLse = reinterpret_cast<float*>(sdS + NP * BN * BM);  // [2][BM]
  float* sDs = sLse + 2 * BM;                                  // [2][BM]

  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int wgk = QG == 1 ? wgi : wgi % KG, wgq = QG == 1 ? 0 : wgi / KG;  // (compile-time for QG = 1)
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
    load_tile128<BN, D, NT>(sK + p * BN * D, Kg[p] + koff, ldk, s.tk - n0, a.d, tid);
    load_tile128<BN, D, NT>(sV + p * BN * D, Vg[p] + koff, ldk, s.tk - n0, a.d, tid);
  }

  auto load_q = [&](int it, int buf) {
    const int h = hk * G + it / nm, m0 = (mb_lo + it % nm) * BM;
    const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      load_tile128<BM, D, NT>(sQ + (buf * NP + p) * BM * D, Qg[p] + qoff, ldq, s.tq - m0, a.d, tid);
      load_tile128<BM, D, NT>(sdO + (buf * NP + p) * BM * D, dOg[p] + qoff, ldq, s.tq - m0, a.d, tid);
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

  float dk[NG], dv[NG];
#pragma unroll
  for (int i = 0; i < NG; ++i) dk[i] = dv[i] = 0.f;
  const uint32_t k_addr = smem_u32(sK) + wgk * 64 * 128;  // this warpgroup's 64 key rows
  const uint32_t v_addr = smem_u32(sV) + wgk * 64 * 128;
  const int kr = wgk * 64 + warp * 16 + (lane >> 2);      // local key row of c0/c1
  Keys keys(a, s, n0, kr, wgq * QW, lane);

  for (int it = 0; it < total_it; ++it) {
    const int buf = it & 1;
    if (it + 1 < total_it) load_q(it + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    wg::fence_proxy_async();
    __syncthreads();

    const int h = hk * G + it / nm, m0 = (mb_lo + it % nm) * BM;
    const uint32_t q_addr = smem_u32(sQ + buf * NP * BM * D), do_addr = smem_u32(sdO + buf * NP * BM * D);
    const float* lse = sLse + buf * BM;
    const float* dsm = sDs + buf * BM;

    // ---- S^T = K Q^T, dP^T = V dO^T (this warpgroup's QW queries) ----------------------------
    float st[NS], dp[NS];
    keys.head(b, h);
    keys.issue_kq(st, k_addr, q_addr);
    keys.issue_kq(dp, v_addr, do_addr);
    wg::commit();
    wg::wait<0>();
    wg::fence_operands<NS>(st);
    wg::fence_operands<NS>(dp);

    // ---- P^T, dS^T; dS^T to shared memory for dQ = dS K -----------------------------------------
    keys.template p_ds<Tr::UNSWITCH>(st, dp, m0, lse, dsm);
    typename Keys::Frag pf, sf;
    keys.pack(st, dp, pf, sf);
    if (!a.deterministic) keys.store_ds(sf, sdS);

    // ---- dV += P^T dO, dK += dS^T Q ---------------------------------------------------------------
    wg::fence_operands<NG>(dv);
    wg::fence_operands<NG>(dk);
    keys.issue_acc(dv, pf, do_addr);
    keys.issue_acc(dk, sf, q_addr);
    wg::commit();

    // ---- dQ[:, 64w : 64w+64] += dS K ----------------------------------------------------------------
    if (!a.deterministic) {
      wg::fence_proxy_async();
      __syncthreads();  // dS^T of every warpgroup is in shared memory
      if (NWG * 64 <= D || wgi * 64 < D) {  // (D = 64: only warpgroup 0 has dQ columns)
        float dq[Keys::NQ];
        Keys::issue_dq(dq, smem_u32(sdS), smem_u32(sK) + wgi * BN * 128);
        wg::commit();
        wg::wait<0>();
        wg::fence_operands<Keys::NQ>(dq);
        keys.add_dq(dq, m0, h, warp, wgi * 64);
      } else {
        wg::wait<0>();
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
  if constexpr (QG > 1) {
    // Query groups qg > 0 hand their partial dK, dV to query group 0 of the same key group
    // through the (now idle) Q/dO buffers: element i of thread x at [i][x] (conflict-free).
    static_assert(2 * (QG - 1) * KG * NG * 128 * 4 <= 2 * 2 * NP * BM * D * 2, "dK/dV partials fit the Q/dO buffers");
    float* red = reinterpret_cast<float*>(sQ);
    __syncthreads();
    const int x = tid % 128;
    if (wgq > 0) {
      float* dst = red + ((wgq - 1) * KG + wgk) * 2 * NG * 128;
#pragma unroll
      for (int i = 0; i < NG; ++i) {
        dst[i * 128 + x] = dk[i];
        dst[(NG + i) * 128 + x] = dv[i];
      }
    }
    __syncthreads();
    if (wgq == 0) {
#pragma unroll 1
      for (int g = 1; g < QG; ++g) {
        const float* src = red + ((g - 1) * KG + wgk) * 2 * NG * 128;
#pragma unroll
        for (int i = 0; i < NG; ++i) {
          dk[i] += src[i * 128 + x];
          dv[i] += src[(NG + i) * 128 + x];
        }
      }
    }
  }
  if (wgq == 0) store_dkdv_rows<E, NG / 4>(a, t, s, hk, n0 + kr, 0, lane, dk, dv, a.scale * ss.dk, ss.dv);
#else
  __trap();
#endif
}

}  // namespace fa
