// One warpgroup's share of the Hopper forward: 64 query rows (two per thread: r and r + 8) against
// one BN-key tile at a time. The online softmax lives here, for every wgmma forward kernel
// (fa_fwd_wgmma.cuh, fa_fwd_tma.cuh), with the two products that feed it:
//   S = Q K^T   SS-wgmma (Q and K from shared memory, K-major)
//   O += P V    RS-wgmma (P from registers: the S accumulator's layout is the A-fragment layout;
//               V from shared memory read transposed, MN-major)
// Tiles are 128B-swizzled 64-column blocks (swz128, fa_tile.cuh); with the split f32 policy every
// tile has NP = 2 planes (hi, lo) and each product issues three wgmmas into one accumulator
// (lo·hi, hi·lo, then hi·hi).
#pragma once
#include "fa_common.cuh"
#include "fa_wgmma.cuh"

namespace fa {

template <typename E, int D, int BN, int BM>
struct WgFwdRows {
  using T = typename E::T;
  static constexpr int NP = E::NP;
  static constexpr int NS = BN / 2;  // S accumulator floats per thread (64 x BN per warpgroup)
  static constexpr int NO = D / 2;   // O accumulator floats per thread (64 x D per warpgroup)
  static constexpr uint32_t QPLANE = BM * D * 2, KPLANE = BN * D * 2;  // bytes between planes
  using OpS = wg::Op<T, BN>;
  using OpO = wg::Op<T, D>;
  using PFrag = uint32_t[NP][BN / 16][4];

  const FaArgs& a;
  const SeqInfo& s;
  SplitScales ss;
  float slope, scale_log2, sfac;
  bool plain, fold;
  int m0, r_lo, lane;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  // wg_row0: the warpgroup's first query row within the CTA tile starting at m0.
  __device__ __forceinline__ WgFwdRows(const FaArgs& a_, const SeqInfo& s_, int b, int h, int m0_, int wg_row0, int tid_in_wg)
      : a(a_), s(s_), ss(split_scales<E>(a_)), m0(m0_), lane(tid_in_wg % 32) {
    slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
    plain = a.softcap <= 0.f && slope == 0.f;
    scale_log2 = a.scale * kLog2e * ss.qk;
    fold = plain && a.scale > 0.f;
    sfac = fold ? scale_log2 : 1.f;
    r_lo = m0 + wg_row0 + (tid_in_wg / 32) * 16 + (lane >> 2);
  }

  // Each product starts with wgmma.fence: the registers it reads (P, the O accumulator) were
  // written by ordinary instructions; without the fence ptxas injects one (warning C7519).
  // S = Q K^T, committed as one wgmma group. q_addr: this warpgroup's 64 rows in column block 0
  // of plane 0 of a BM-row Q tile; k_addr: plane 0 of a BN-row K tile.
  __device__ __forceinline__ static void issue_qk(float* sc, uint32_t q_addr, uint32_t k_addr) {
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t qo = (ks >> 2) * BM * 128 + (ks & 3) * 32, ko = (ks >> 2) * BN * 128 + (ks & 3) * 32;
      if constexpr (E::SPLIT) {
        OpS::ss(sc, wg::desc(q_addr + QPLANE + qo, 16, 1024), wg::desc(k_addr + ko, 16, 1024), ks > 0 ? 1 : 0);  // lo·hi
        OpS::ss(sc, wg::desc(q_addr + qo, 16, 1024), wg::desc(k_addr + KPLANE + ko, 16, 1024), 1);             // hi·lo
      }
      OpS::ss(sc, wg::desc(q_addr + qo, 16, 1024), wg::desc(k_addr + ko, 16, 1024), (E::SPLIT || ks > 0) ? 1 : 0);
    }
    wg::commit();
  }
  // O += P V, committed as one wgmma group; v_addr: plane 0 of a BN-row V tile.
  __device__ __forceinline__ static void issue_pv(float* o, const PFrag& pf, uint32_t v_addr) {
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
      const uint64_t db = wg::desc(v_addr + ks * 16 * 128, BN * 128, 1024);
      if constexpr (E::SPLIT) {
        OpO::rs(o, pf[NP - 1][ks], db, 1);                                                    // lo·hi
        OpO::rs(o, pf[0][ks], wg::desc(v_addr + KPLANE + ks * 16 * 128, BN * 128, 1024), 1);  // hi·lo
      }
      OpO::rs(o, pf[0][ks], db, 1);
    }
    wg::commit();
  }

  // Scores of key tile nb to log2 units, masked. Plain problems with scale > 0 stay raw: the
  // scale folds into the exponent's FFMA (max of raw scores = max of scaled ones). Masked entries
  // become -inf whatever the keys held (rows of another sequence included).
  template <bool MASK = true>  // (false: dev timing only, KERNEL_NOTES)
  __device__ __forceinline__ void prepare(float* sc, int nb) const {
    const int n0 = nb * BN;
    if (!fold) {
      if (plain) {
#pragma unroll
        for (int i = 0; i < NS; ++i) sc[i] *= scale_log2;
      } else {
#pragma unroll
        for (int i = 0; i < NS; ++i)
          sc[i] = score_log2(a, sc[i] * ss.qk, slope, r_lo + ((i >> 1) & 1) * 8, n0 + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1), s.off, nullptr);
      }
    }
    if (MASK && tile_needs_mask(a, s, m0, BM, n0, BN)) {
      const int cb = n0 + 2 * (lane & 3);  // element i is row r_lo + 8 ((i >> 1) & 1), key cb + 8 (i >> 2) + (i & 1)
      const VisibleSpan row[2] = {VisibleSpan::of_query(a, s, r_lo, cb), VisibleSpan::of_query(a, s, r_lo + 8, cb)};
#pragma unroll
      for (int i = 0; i < NS; ++i)
        if (!row[(i >> 1) & 1].has((i >> 2) * 8 + (i & 1))) sc[i] = -INFINITY;
    }
  }

  // The online-softmax update of packages/core/src/online-softmax.ts, in log2 units:
  //   m' = max(m, rowmax s);  alpha = 2^(m - m');  p = 2^(s - m');  l' = alpha l + sum p.
  // A row that has seen only masked keys keeps m = -inf and shifts by 0, so p = 0 and alpha = 0.
  // p overwrites s; O is rescaled by the caller (rescale_o), after any P V product still in
  // flight has retired.
  __device__ __forceinline__ void step(float* sc, float* alpha) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < NS / 4; ++i) mx = fmaxf(mx, fmaxf(sc[4 * i + 2 * rr], sc[4 * i + 2 * rr + 1]));
      mx = fmaxf(row_max[rr], quad_max(mx) * sfac);
      const float m_use = mx == -INFINITY ? 0.f : mx;
      alpha[rr] = ex2(row_max[rr] - m_use);
      row_max[rr] = mx;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < NS / 4; ++i) {
        sc[4 * i + 2 * rr] = ex2(fmaf(sc[4 * i + 2 * rr], sfac, -m_use));
        sc[4 * i + 2 * rr + 1] = ex2(fmaf(sc[4 * i + 2 * rr + 1], sfac, -m_use));
        sum += sc[4 * i + 2 * rr] + sc[4 * i + 2 * rr + 1];
      }
      row_sum[rr] = row_sum[rr] * alpha[rr] + sum;
    }
  }

  __device__ __forceinline__ static void rescale_o(float* o, const float* alpha) {
#pragma unroll
    for (int i = 0; i < NO / 4; ++i) {
      o[4 * i + 0] *= alpha[0];
      o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1];
      o[4 * i + 3] *= alpha[1];
    }
  }
  __device__ __forceinline__ static void pack_p(const float* sc, PFrag& pf) {
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks)
#pragma unroll
      for (int r = 0; r < 4; ++r) pack_e<E>(sc[8 * ks + 2 * r], sc[8 * ks + 2 * r + 1], kPScale, pf[0][ks][r], pf[NP - 1][ks][r]);
  }
  // Keeps the compiler from moving P's registers while a wgmma that reads them is in flight.
  __device__ __forceinline__ static void fence_p(PFrag& pf) {
#pragma unroll
    for (int p = 0; p < NP; ++p)
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) wg::fence_operands_u(pf[p][ks]);
  }

  // The same into a 64-row swizzled tile for a TMA store (16-bit outputs, no splits): r_loc is the
  // thread's first row within its warpgroup's 64.
  __device__ __forceinline__ void store_smem(const FaTensors& t, int b, int h, int r_loc, const float* o, T* sO) const {
    store_forward_rows_smem<E, NO / 4>(a, t, s, b, h, r_lo, r_loc, lane, o, row_max, row_sum, 1.f, sO);
  }
  // Normalises and writes this thread's two rows (O and LSE, or the split-KV partials).
  __device__ __forceinline__ void store(const FaTensors& t, int b, int h, int split, const float* o) const {
    store_forward_rows<E, NO / 4>(a, t, s, b, h, split, r_lo, lane, o, row_max, row_sum, E::SPLIT ? ss.pv : 1.f);
  }
};

// Key blocks [*lo, *hi) of split `split` of a CTA's range (split-KV: num_splits equal shares).
__device__ __forceinline__ void split_key_range(const FaArgs& a, int split, int* lo, int* hi) {
  if (a.num_splits > 1) {
    const int per = (*hi - *lo + a.num_splits - 1) / a.num_splits;
    const int l = *lo + split * per;
    *hi = min(*hi, l + per);
    *lo = min(l, *hi);
  }
}

}  // namespace fa
