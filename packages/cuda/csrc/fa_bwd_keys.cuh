// One warpgroup's share of a Hopper backward step: its 64 keys (two rows per thread: kr and
// kr + 8 of the CTA's BN-key tile) against QW queries (columns q_lo.. of a BM-query tile). The
// per-element math and the five products live here, for every wgmma backward kernel
// (fa_bwd_wgmma.cuh, fa_bwd_tma.cuh):
//   S^T  = K Q^T     SS-wgmma m64nQW   (K-major A and B)          issue_kq
//   dP^T = V dO^T    SS-wgmma m64nQW                               issue_kq (V, dO)
//   P^T = exp2(S^T - lse), dS^T = P^T (dP^T - Dsum)  in registers  p_ds
//   dV  += P^T dO    RS-wgmma m64nD    (dO MN-major via the descriptor)   issue_acc (P^T, dO)
//   dK  += dS^T Q    RS-wgmma m64nD                                issue_acc (dS^T, Q)
//   dQ[:, 64w..64w+64] = dS K over all BN keys, SS-wgmma m64n64 with both operands MN-major,
//   dS^T read from shared memory (store_ds), K column block w       issue_dq, add_dq
// The accumulators have the mma.sync C layout repeated along N (fa_wgmma.cuh): st[4i + 2rr + j]
// is key row kr + 8rr, query column q_lo + 8i + 2(lane % 4) + j. With the split f32 policy every
// tile has NP = 2 planes and each product issues three wgmmas (lo·hi, hi·lo, hi·hi).
// Every issue_* opens with wgmma.fence (its registers were written by ordinary instructions;
// without it ptxas injects one, C7519) and leaves the commit to the caller, who groups them.
#pragma once
#include <type_traits>

#include "fa_common.cuh"
#include "fa_wgmma.cuh"

namespace fa {

template <typename E, int D, int BN, int BM, int QW, bool STSM = true>  // STSM: dS^T stored by stmatrix
struct WgBwdKeys {
  using T = typename E::T;
  static constexpr int NP = E::NP;
  static constexpr int NS = QW / 2;  // S^T / dP^T accumulator floats per thread (64 x QW)
  static constexpr int NG = D / 2;   // dK / dV accumulator floats per thread (64 x D)
  static constexpr int NQ = 32;      // dQ accumulator floats per thread (64 x 64)
  static constexpr uint32_t KPLANE = BN * D * 2, QPLANE = BM * D * 2, SPLANE = BN * BM * 2;  // bytes between planes
  using OpS = wg::Op<T, QW>;
  using Op64 = wg::Op<T, 64>;
  using OpD = wg::Op<T, D>;
  using Frag = uint32_t[NP][QW / 16][4];

  const FaArgs& a;
  const SeqInfo& s;
  SplitScales ss;
  float scale_log2;
  int n0, kr, q_lo, lane;
  float slope = 0.f;  // of the current query head
  bool plain = true;  // no soft-cap, no ALiBi for the current head

  // kr: the thread's first key row within the tile (warpgroup row 0 + 16·warp + lane / 4).
  __device__ __forceinline__ WgBwdKeys(const FaArgs& a_, const SeqInfo& s_, int n0_, int kr_, int q_lo_, int lane_)
      : a(a_), s(s_), ss(split_scales<E>(a_)), n0(n0_), kr(kr_), q_lo(q_lo_), lane(lane_) {
    scale_log2 = a.scale * kLog2e * ss.qk;
  }
  template <bool MODS = true>
  __device__ __forceinline__ void head(int b, int h) {
    if constexpr (MODS) {
      slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
      plain = a.softcap <= 0.f && slope == 0.f;
    }
  }

  // acc = K Q^T over D (or V dO^T): k_addr this warpgroup's 64 rows of plane 0 of a BN-row tile,
  // q_addr plane 0 of a BM-row tile.
  __device__ __forceinline__ void issue_kq(float* acc, uint32_t k_addr, uint32_t q_addr) const {
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t ko = (ks >> 2) * BN * 128 + (ks & 3) * 32, qo = (ks >> 2) * BM * 128 + q_lo * 128 + (ks & 3) * 32;
      if constexpr (E::SPLIT) {
        OpS::ss(acc, wg::desc(k_addr + KPLANE + ko, 16, 1024), wg::desc(q_addr + qo, 16, 1024), ks > 0);
        OpS::ss(acc, wg::desc(k_addr + ko, 16, 1024), wg::desc(q_addr + QPLANE + qo, 16, 1024), 1);
      }
      OpS::ss(acc, wg::desc(k_addr + ko, 16, 1024), wg::desc(q_addr + qo, 16, 1024), E::SPLIT || ks > 0);
    }
  }

  // P^T and dS^T in place of S^T and dP^T for the query tile at m0 (lse, dsm: its BM rows of
  // LSE·log2 e and Dsum). UNSWITCH: two copies of the loop, plain scores without the soft-cap and
  // ALiBi work (see BwdWgCfg); otherwise one loop that nvcc may split by itself. !MODS: the call has
  // neither (only the plain copy is compiled).
  template <bool UNSWITCH, bool MODS = true>
  __device__ __forceinline__ void p_ds(float* st, float* dp, int m0, const float* lse, const float* dsm) const {
    auto body = [&](auto plain_tag) {
      constexpr bool PLAIN = decltype(plain_tag)::value;
#pragma unroll
      for (int i = 0; i < NS; ++i) {
        const int il = q_lo + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
        const int q = m0 + il, j = n0 + kr + ((i >> 1) & 1) * 8;
        float dcap = 1.f;
        const bool pl = PLAIN || (!UNSWITCH && plain);
        const float v = pl ? st[i] : score_log2(a, st[i] * ss.qk, slope, q, j, s.off, &dcap);
        float p = ex2(fmaf(v, pl ? scale_log2 : 1.f, -lse[il]));
        float ds = p * (E::SPLIT ? fmaf(dp[i], ss.dp, -dsm[il]) : dp[i] - dsm[il]) * dcap;
        st[i] = p;
        dp[i] = ds;
      }
    };
    if constexpr (!MODS) body(std::true_type{});
    else if (UNSWITCH && plain) body(std::true_type{});
    else body(std::false_type{});
    if (tile_needs_mask(a, s, m0, BM, n0, BN)) {  // (assignments: NaN scores of other sequences vanish)
      const int qb = m0 + q_lo + 2 * (lane & 3);  // element i is key n0 + kr + 8 ((i >> 1) & 1), query qb + 8 (i >> 2) + (i & 1)
      const VisibleSpan key[2] = {VisibleSpan::of_key(a, s, n0 + kr, qb), VisibleSpan::of_key(a, s, n0 + kr + 8, qb)};
#pragma unroll
      for (int i = 0; i < NS; ++i)
        if (!key[(i >> 1) & 1].has((i >> 2) * 8 + (i & 1))) st[i] = dp[i] = 0.f;
    }
  }

  // P^T, dS^T to 16-bit A fragments (split: hi and lo planes).
  __device__ __forceinline__ void pack(const float* st, const float* dp, Frag& pf, Frag& sf) const {
#pragma unroll
    for (int ks = 0; ks < QW / 16; ++ks)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        pack_e<E>(st[8 * ks + 2 * r], st[8 * ks + 2 * r + 1], kPScale, pf[0][ks][r], pf[NP - 1][ks][r]);
        pack_e<E>(dp[8 * ks + 2 * r], dp[8 * ks + 2 * r + 1], ss.ds, sf[0][ks][r], sf[NP - 1][ks][r]);
      }
  }

  // dS^T to a [NP][BN keys][BM queries] swizzled tile for dQ = dS K: one stmatrix per k-step and
  // plane. Register r of a k-step is the 8 x 8 block (rows 8 (r & 1), columns 8 (r >> 1)) of the
  // warp's 16 x 16 fragment in the mma layout stmatrix expects; lane l gives the address of row
  // l & 7 of block l >> 3 (16 contiguous bytes of the swizzled row).
  __device__ __forceinline__ void store_ds(const Frag& sf, T* sdS) const {
    if constexpr (!STSM) {  // (dev harness: session 6's 4-byte stores)
#pragma unroll
      for (int p = 0; p < NP; ++p)
#pragma unroll
        for (int ks = 0; ks < QW / 16; ++ks)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = kr + (r & 1) * 8, col = q_lo + ks * 16 + (r >> 1) * 8 + 2 * (lane & 3);
            *reinterpret_cast<uint32_t*>(sdS + p * BN * BM + swz128<BN>(row, col)) = sf[p][ks][r];
          }
      return;
    }
    const int row = kr - (lane >> 2) + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int p = 0; p < NP; ++p)
#pragma unroll
      for (int ks = 0; ks < QW / 16; ++ks) {
        const int col = q_lo + ks * 16 + (lane >> 4) * 8;
        const uint32_t addr = smem_u32(sdS + p * BN * BM + swz128<BN>(row, col));
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(sf[p][ks][0]), "r"(sf[p][ks][1]),
                     "r"(sf[p][ks][2]), "r"(sf[p][ks][3])
                     : "memory");
      }
  }

  // acc += F^T-fragments · X: dV += P^T dO (x_addr: dO) or dK += dS^T Q (x_addr: Q), X read
  // MN-major from plane 0 of a BM-row tile.
  __device__ __forceinline__ void issue_acc(float* acc, const Frag& f, uint32_t x_addr) const {
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < QW / 16; ++ks) {
      const uint32_t o = (q_lo + ks * 16) * 128;
      if constexpr (E::SPLIT) {
        OpD::rs(acc, f[NP - 1][ks], wg::desc(x_addr + o, BM * 128, 1024), 1);
        OpD::rs(acc, f[0][ks], wg::desc(x_addr + QPLANE + o, BM * 128, 1024), 1);
      }
      OpD::rs(acc, f[0][ks], wg::desc(x_addr + o, BM * 128, 1024), 1);
    }
  }

  // dq = dS K[:, 64w..64w+64]: ds_addr plane 0 of the [BN][BM] dS^T tile, kb_addr column block w
  // of plane 0 of the K tile.
  __device__ __forceinline__ static void issue_dq(float* dq, uint32_t ds_addr, uint32_t kb_addr) {
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
      const uint64_t da = wg::desc(ds_addr + ks * 16 * 128, BN * 128, 1024), db = wg::desc(kb_addr + ks * 16 * 128, BN * 128, 1024);
      if constexpr (E::SPLIT) {
        Op64::ss_tt(dq, wg::desc(ds_addr + SPLANE + ks * 16 * 128, BN * 128, 1024), db, ks > 0);
        Op64::ss_tt(dq, da, wg::desc(kb_addr + KPLANE + ks * 16 * 128, BN * 128, 1024), 1);
      }
      Op64::ss_tt(dq, da, db, E::SPLIT || ks > 0);
    }
  }

  // Adds this thread's dQ rows (query m0 + 16·warp + lane / 4 + 8rr, columns c0..c0+64 of head h)
  // to the float32 accumulator with vector atomics.
  __device__ __forceinline__ void add_dq(const float* dq, int m0, int h, int warp, int c0) const {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int i = m0 + warp * 16 + (lane >> 2) + rr * 8;
      if (i < s.tq) {
        float* dst = a.dq_accum + (static_cast<int64_t>(s.q0 + i) * a.H + h) * a.d;
#pragma unroll
        for (int n = 0; n < NQ / 4; ++n) {
          const int c = c0 + n * 8 + 2 * (lane & 3);
          if (c < a.d) atomicAdd(reinterpret_cast<float2*>(dst + c), make_float2(dq[4 * n + 2 * rr], dq[4 * n + 2 * rr + 1]));
        }
      }
    }
  }
};

}  // namespace fa
