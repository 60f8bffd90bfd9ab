// Forward attention on Hopper warpgroup MMA (sm_90a): FlashAttention-3 style arithmetic without
// warp specialisation. A CTA has NWG warpgroups; each owns 64 query rows. S = Q K^T runs as
// wgmma with both operands in shared memory, the online softmax runs on the S accumulator in
// registers, and O += P V runs as wgmma with P from registers (the accumulator layout re-packs
// into the A-fragment layout) and V from shared memory read transposed (MN-major).
// Tiles are stored 128B-swizzled in column blocks of 64 elements (swz128, fa_tile.cuh).
// Same semantics, masking and epilogue as fwd_kernel (fa_fwd.cuh). With the split f32 policy every
// operand tile has two planes (hi, lo) and each product issues three wgmmas into one accumulator
// (hi·lo, lo·hi, then hi·hi); P is split in registers.
#pragma once
#include "fa_common.cuh"
#include "fa_wgmma.cuh"

namespace fa {

// Two loop schedules over the key tiles j = 0..n-1 of one CTA:
//
// plain (PIPE = false): per tile, S_j = Q K_j^T; wait; softmax; barrier; O += P_j V_j; wait;
//   barrier. The tensor cores idle while the softmax runs, and three barriers per tile.
//
// pipelined (PIPE = true): per tile, issue S_j = Q K_j^T and O += P_{j-1} V_{j-1} together; wait
//   for S_j only; run the softmax of S_j while the PV product of the previous tile is still on the
//   tensor cores; then wait for it and rescale O by alpha_j. One barrier per tile. P_{j-1} stays in
//   registers until its product retires. The order of the arithmetic is unchanged:
//   O_j = alpha_j (O_{j-1} + P_{j-1} V_{j-1}) is the same sum as before, rescaled at the same step.
//   Loads run ST - 1 tiles ahead for K and ST - 2 for V: at tile j the kernel loads K_{j+ST-1}
//   into the buffer of K_{j-1} and V_{j+ST-2} into that of V_{j-2}, both retired before the
//   barrier that starts tile j.
template <typename E, typename Tr>
__global__ void __launch_bounds__(Tr::NWG * 128, 1) fwd_wgmma_kernel(FaArgs a, FaTensors t) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // ---- roles and sizes --------------------------------------------------------------------
  using T = typename E::T;
  constexpr int NP = E::NP;
  constexpr int D = Tr::D, BN = Tr::BN, NWG = Tr::NWG, BM = Tr::BM, NT = NWG * 128;
  constexpr int NS = BN / 2;  // S accumulator floats per thread (64 x BN per warpgroup)
  constexpr int NO = D / 2;   // O accumulator floats per thread (64 x D per warpgroup)
  using OpS = wg::Op<T, BN>;
  using OpO = wg::Op<T, D>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [NP][BM][D]
  T* sK = sQ + NP * BM * D;                // [STAGES][NP][BN][D]
  T* sV = sK + Tr::STAGES * NP * BN * D;   // [STAGES][NP][BN][D]

  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m_block = blockIdx.x, h = blockIdx.y;
  const int b = blockIdx.z / a.num_splits, split = blockIdx.z % a.num_splits;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * BM;
  if (m0 >= s.tq) return;
  const int hk = h / (a.H / a.Hkv);
  const int64_t ldq = static_cast<int64_t>(a.H) * a.d, ldk = static_cast<int64_t>(a.Hkv) * a.d;
  const int64_t qoff = (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
  const int64_t koff = s.k0 * ldk + static_cast<int64_t>(hk) * a.d;
  const T* Qg[NP];
  const T* Kg[NP];
  const T* Vg[NP];
  Qg[0] = static_cast<const T*>(t.q) + qoff;
  Kg[0] = static_cast<const T*>(t.k) + koff;
  Vg[0] = static_cast<const T*>(t.v) + koff;
  if constexpr (NP == 2) {
    Qg[1] = static_cast<const T*>(t.q_lo) + qoff;
    Kg[1] = static_cast<const T*>(t.k_lo) + koff;
    Vg[1] = static_cast<const T*>(t.v_lo) + koff;
  }
  const SplitScales ss = split_scales<E>(a);
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  const bool plain = a.softcap <= 0.f && slope == 0.f;
  const float scale_log2 = a.scale * kLog2e * ss.qk;
  const bool fold = plain && a.scale > 0.f;
  const float sfac = fold ? scale_log2 : 1.f;

  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);
  if (a.num_splits > 1) {
    const int per = (nb_hi - nb_lo + a.num_splits - 1) / a.num_splits;
    const int lo = nb_lo + split * per;
    nb_hi = min(nb_hi, lo + per);
    nb_lo = min(lo, nb_hi);
  }

  // Key tiles are visited in the order nb_lo + (idx + rot) % n, idx = 0..n-1.
  constexpr int ST = Tr::STAGES;
  const int n_tiles = nb_hi - nb_lo;
  const int rot = (Tr::ROT && n_tiles > 0) ? m_block % n_tiles : 0;
  auto tile_of = [&](int idx) { return nb_lo + (idx + rot >= n_tiles ? idx + rot - n_tiles : idx + rot); };
  // One cp.async group per call (every plane), empty when idx is outside 0..n-1 (keeps the wait
  // counts fixed).
  auto load_k = [&](int idx) {
    if (idx >= 0 && idx < n_tiles) {
      const int n1 = tile_of(idx) * BN;
#pragma unroll
      for (int p = 0; p < NP; ++p) load_tile128<BN, D, NT>(sK + ((idx % ST) * NP + p) * BN * D, Kg[p] + n1 * ldk, ldk, s.tk - n1, a.d, tid);
    }
    cp_async_commit();
  };
  auto load_v = [&](int idx) {
    if (idx >= 0 && idx < n_tiles) {
      const int n1 = tile_of(idx) * BN;
#pragma unroll
      for (int p = 0; p < NP; ++p) load_tile128<BN, D, NT>(sV + ((idx % ST) * NP + p) * BN * D, Vg[p] + n1 * ldk, ldk, s.tk - n1, a.d, tid);
    }
    cp_async_commit();
  };
  auto load_q = [&]() {
#pragma unroll
    for (int p = 0; p < NP; ++p) load_tile128<BM, D, NT>(sQ + p * BM * D, Qg[p], ldq, s.tq - m0, a.d, tid);
  };

  float o[NO];
#pragma unroll
  for (int i = 0; i < NO; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const int r_lo = m0 + wgi * 64 + warp * 16 + (lane >> 2);
  // this warpgroup's 64 rows in column block 0 of plane 0; planes are BM * D * 2 bytes apart
  const uint32_t q_addr = smem_u32(sQ) + wgi * 64 * 64 * 2;
  constexpr uint32_t QPLANE = BM * D * 2, KPLANE = BN * D * 2;

  // ---- the tile steps shared by both schedules ----------------------------------------------
  auto issue_qk = [&](float* sc, int buf) {  // S = Q K^T, SS-wgmma, committed as one group
    const uint32_t k_addr = smem_u32(sK + buf * NP * BN * D);
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
  };
  auto issue_pv = [&](uint32_t (*pf)[BN / 16][4], int buf) {  // O += P V, RS-wgmma, one group
    const uint32_t v_addr = smem_u32(sV + buf * NP * BN * D);
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
      const uint64_t db = wg::desc(v_addr + ks * 16 * 128, BN * 128, 1024);
      if constexpr (E::SPLIT) {
        OpO::rs(o, pf[NP - 1][ks], db, 1);                                             // lo·hi
        OpO::rs(o, pf[0][ks], wg::desc(v_addr + KPLANE + ks * 16 * 128, BN * 128, 1024), 1);  // hi·lo
      }
      OpO::rs(o, pf[0][ks], db, 1);
    }
    wg::commit();
  };
  // Scores to log2 units and masked. Plain problems with scale > 0 stay raw: the scale folds
  // into the exponent's FFMA (max of raw scores = max of scaled ones).
  auto prepare_scores = [&](float* sc, int nb) {
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
    if (tile_needs_mask(a, s, m0, BM, n0, BN)) {
#pragma unroll
      for (int i = 0; i < NS; ++i)
        if (!visible(a, s, r_lo + ((i >> 1) & 1) * 8, n0 + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1))) sc[i] = -INFINITY;
    }
  };
  // The online-softmax update of packages/core/src/online-softmax.ts, in log2 units:
  //   m' = max(m, rowmax s);  alpha = 2^(m - m');  p = 2^(s - m');  l' = alpha l + sum p.
  // A row that has seen only masked keys keeps m = -inf and shifts by 0, so p = 0 and alpha = 0.
  // p overwrites s; O is rescaled by the caller (after the PV product that is still in flight).
  auto softmax_step = [&](float* sc, float* alpha) {
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
  };
  auto rescale_o = [&](const float* alpha) {
#pragma unroll
    for (int i = 0; i < NO / 4; ++i) {
      o[4 * i + 0] *= alpha[0];
      o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1];
      o[4 * i + 3] *= alpha[1];
    }
  };
  auto pack_p = [&](const float* sc, uint32_t (*pf)[BN / 16][4]) {  // accumulator layout = A-fragment layout
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks)
#pragma unroll
      for (int r = 0; r < 4; ++r) pack_e<E>(sc[8 * ks + 2 * r], sc[8 * ks + 2 * r + 1], kPScale, pf[0][ks][r], pf[NP - 1][ks][r]);
  };
  auto fence_p = [&](uint32_t (*pf)[BN / 16][4]) {
#pragma unroll
    for (int p = 0; p < NP; ++p)
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) wg::fence_operands_u(pf[p][ks]);
  };

  uint32_t pf[NP][BN / 16][4];
  float sc[NS], alpha[2];
  if constexpr (!Tr::PIPE) {
    constexpr int PF = ST - 1;
    auto load_kv = [&](int idx) { load_k(idx); load_v(idx); };
    load_q();
#pragma unroll
    for (int i = 0; i < PF; ++i) load_kv(i);
    for (int idx = 0; idx < n_tiles; ++idx) {
      const int buf = idx % ST;
      load_kv(idx + PF);  // into the buffer freed by the barrier that ended iteration idx - 1
      cp_async_wait<2 * PF + 1>();  // K of this tile (and Q) have landed
      wg::fence_proxy_async();
      __syncthreads();
      wg::fence();
      issue_qk(sc, buf);
      wg::wait<0>();
      wg::fence_operands<NS>(sc);
      prepare_scores(sc, tile_of(idx));
      softmax_step(sc, alpha);
      rescale_o(alpha);
      pack_p(sc, pf);
      cp_async_wait<2 * PF>();  // V of this tile has landed
      wg::fence_proxy_async();
      __syncthreads();
      wg::fence_operands<NO>(o);
      wg::fence();
      issue_pv(pf, buf);
      wg::wait<0>();
      wg::fence_operands<NO>(o);
      __syncthreads();
    }
    cp_async_wait<0>();
  } else {
    static_assert(ST >= 2, "the pipelined loop needs two K/V buffers");
    load_q();  // joins K_0's group
#pragma unroll
    for (int i = -(ST - 1); i < 0; ++i) { load_k(i + ST - 1); load_v(i + ST - 2); }
    for (int idx = 0; idx < n_tiles; ++idx) {
      cp_async_wait<2 * (ST - 2)>();  // K_idx and V_{idx-1} have landed
      wg::fence_proxy_async();
      __syncthreads();  // ... and every warpgroup has retired its products of tile idx - 1
      load_k(idx + ST - 1);
      load_v(idx + ST - 2);
      wg::fence();
      issue_qk(sc, idx % ST);
      if (idx > 0) {
        issue_pv(pf, (idx - 1) % ST);
        wg::wait<1>();  // S_idx is done; P_{idx-1} V_{idx-1} may still run
      } else {
        wg::wait<0>();
      }
      wg::fence_operands<NS>(sc);
      prepare_scores(sc, tile_of(idx));
      softmax_step(sc, alpha);
      wg::wait<0>();
      wg::fence_operands<NO>(o);
      fence_p(pf);
      rescale_o(alpha);
      pack_p(sc, pf);
    }
    cp_async_wait<0>();
    if (n_tiles > 0) {  // the last tile's P V
      wg::fence_proxy_async();
      __syncthreads();
      wg::fence_operands<NO>(o);
      wg::fence();
      issue_pv(pf, (n_tiles - 1) % ST);
      wg::wait<0>();
      wg::fence_operands<NO>(o);
    }
  }

  // ---- epilogue -----------------------------------------------------------------------------
  store_forward_rows<E, NO / 4>(a, t, s, b, h, split, r_lo, lane, o, row_max, row_sum, E::SPLIT ? ss.pv : 1.f);
#else
  __trap();
#endif
}

}  // namespace fa
