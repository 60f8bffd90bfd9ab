// The deterministic dQ of the Hopper backward (sm_90a, f16/bf16), warp-specialised like the forward
// (fa_fwd_tma.cuh): a CTA owns BM = 128 query rows of one head and walks the key tiles in order, so
// every dQ element is one fixed sum, written once: bit-identical run to run, no atomics.
//
// Roles: warpgroup 0 is the producer (setmaxnreg.dec; one thread loads Q and dO once by TMA, then K
// and V tiles into ST-stage rings); warpgroups 1 and 2 are consumers of 64 query rows each:
//   S  = Q K_j^T      SS-wgmma        dP = dO V_j^T   SS-wgmma   (one commit group)
//   P  = 2^(S·scale·log2 e − lse),    dS = P (dP − Dsum)         (registers; masked entries 0)
//   dQ += dS K_j      RS-wgmma (dS from registers, K read transposed as the forward reads V)
// The products of tile j and dQ of tile j − 1 are issued together; the element math of tile j runs
// while dQ of j − 1 is still on the tensor cores (the forward's intra-warpgroup overlap). K is
// released after its dQ product, V after dP.
//
// Rows past the sequence inside the tensor (the next sequence of a packed batch) come in by TMA:
// harmless in Q and dO (their rows of dQ are never stored), and in V (their dP columns are masked:
// dS is set to 0, not multiplied), not in K (dS = 0 times a NaN or ∞ of another sequence is NaN):
// a K tile that reaches past its sequence but not past the tensor is copied with plain loads,
// zero-filled, as the forward copies V.
#pragma once
#include "fa_common.cuh"
#include "fa_fwd_softmax.cuh"
#include "fa_tma.cuh"

namespace fa {

template <typename E, typename Tr>
__global__ void __launch_bounds__(384, 1)
    bwd_dq_tma_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_do, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v, FaArgs a, FaTensors t) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::T;
  using TO = typename E::TO;
  static_assert(!E::SPLIT, "16-bit operands only");
  constexpr int D = Tr::D, BN = Tr::BN, BM = Tr::BM, ST = Tr::STAGES;
  constexpr int NS = BN / 2, NO = D / 2, CB = D / 64;
  constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
  using Rows = WgFwdRows<E, D, BN, BM>;  // its products: S-shaped (Q or dO against K or V) and P·V-shaped (dS·K)

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [BM][D]
  T* sdO = sQ + BM * D;                    // [BM][D]
  T* sK = sdO + BM * D;                    // [ST][BN][D]
  T* sV = sK + ST * BN * D;                // [ST][BN][D]
  uint64_t* bars = reinterpret_cast<uint64_t*>(sV + ST * BN * D);
  uint64_t* q_full = bars;  // Q and dO
  uint64_t* k_full = bars + 1;
  uint64_t* v_full = k_full + ST;
  uint64_t* k_empty = v_full + ST;
  uint64_t* v_empty = k_empty + ST;

  const int tid = threadIdx.x, wgi = tid / 128;
  const int h = blockIdx.x, m_block = gridDim.y - 1 - blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * BM;
  if (m0 >= s.tq) return;  // the whole CTA, before any barrier
  const int hk = h / (a.H / a.Hkv);
  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);
  const int n_tiles = nb_hi - nb_lo;

  if (tid == 0) {
    tma::bar_init(q_full, 1);
#pragma unroll
    for (int i = 0; i < ST; ++i) {
      tma::bar_init(k_full + i, 1);
      tma::bar_init(v_full + i, 1);
      tma::bar_init(k_empty + i, 8);  // one arrival per consumer warp
      tma::bar_init(v_empty + i, 8);
    }
    tma::fence_bar_init();
  }
  __syncthreads();

  if (wgi == 0) {
    // ---- producer ------------------------------------------------------------------------------
    tma::regs_dec<Tr::PRODUCER_REGS>();
    if (tid >= 32 || n_tiles == 0) return;  // (nothing to load: the consumers write zeros)
    const int lane = tid;
    if (lane == 0) {
      tma::arrive_expect(q_full, 2 * Q_BYTES);
#pragma unroll
      for (int c = 0; c < CB; ++c) {
        tma::load_box(sQ + c * BM * 64, &map_q, q_full, c * 64, h, s.q0 + m0);
        tma::load_box(sdO + c * BM * 64, &map_do, q_full, c * 64, h, s.q0 + m0);
      }
    }
    const bool k_tail_in_tensor = s.k0 + s.tk < a.total_k;  // rows after this sequence hold data
    for (int idx = 0; idx < n_tiles; ++idx) {
      const int st = idx % ST, n1 = (nb_lo + idx) * BN;
      if (idx >= ST) tma::wait(v_empty + st, ((idx / ST) + 1) & 1);
      if (lane == 0) {
        tma::arrive_expect(v_full + st, KV_BYTES);
#pragma unroll
        for (int c = 0; c < CB; ++c) tma::load_box(sV + st * BN * D + c * BN * 64, &map_v, v_full + st, c * 64, hk, s.k0 + n1);
      }
      if (idx >= ST) tma::wait(k_empty + st, ((idx / ST) + 1) & 1);
      tma::load_tile<BN, D>(sK + st * BN * D, &map_k, static_cast<const T*>(t.k), k_full + st, s.k0 + n1, hk, a.Hkv, a.d, s.tk - n1, k_tail_in_tensor, lane);
    }
  } else {
    // ---- consumers -----------------------------------------------------------------------------
    tma::regs_inc<Tr::CONSUMER_REGS>();
    const int cw = wgi - 1, lane = tid % 32, warp_lane = lane;
    const int r_lo = m0 + cw * 64 + ((tid % 128) / 32) * 16 + (lane >> 2);
    const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
    const bool plain = a.softcap <= 0.f && slope == 0.f;
    const float scale_log2 = a.scale * kLog2e;
    float lse_r[2], dsum_r[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int i = r_lo + rr * 8;
      const int64_t idx = static_cast<int64_t>(h) * a.total_q + s.q0 + i;
      lse_r[rr] = i < s.tq ? a.lse2[idx] : INFINITY;
      dsum_r[rr] = i < s.tq ? a.dsum[idx] : 0.f;
    }
    float dq[NO];
#pragma unroll
    for (int i = 0; i < NO; ++i) dq[i] = 0.f;
    const uint32_t q_addr = smem_u32(sQ) + cw * 64 * 64 * 2, do_addr = smem_u32(sdO) + cw * 64 * 64 * 2;
    auto release = [&](uint64_t* bar) { if (warp_lane == 0) tma::arrive(bar); };
    // Ping-pong (PING) as in fa_fwd_tma.cuh: warpgroup c issues after bar.sync on barrier 1 + c
    // and lets the other go (bar.arrive on 2 - c) after its wait; warpgroup 1 opens the first
    // turn, warpgroup 0 takes the last turn's arrival.
    auto turn_begin = [&] { if constexpr (Tr::PING) tma::named_sync(1 + cw, 256); };
    auto turn_end = [&] { if constexpr (Tr::PING) tma::named_arrive(2 - cw, 256); };
    if (Tr::PING && cw == 1 && n_tiles > 0) tma::named_arrive(1, 256);

    typename Rows::PFrag dsf;
    float sc[NS], dp[NS];
    if (n_tiles > 0) tma::wait(q_full, 0);
    for (int idx = 0; idx < n_tiles; ++idx) {
      const int st = idx % ST, pst = (idx + ST - 1) % ST;
      tma::wait(k_full + st, (idx / ST) & 1);
      tma::wait(v_full + st, (idx / ST) & 1);
      turn_begin();
      Rows::issue_qk(sc, q_addr, smem_u32(sK + st * BN * D));   // S = Q K^T
      Rows::issue_qk(dp, do_addr, smem_u32(sV + st * BN * D));  // dP = dO V^T
      if (idx > 0) Rows::issue_pv(dq, dsf, smem_u32(sK + pst * BN * D));  // dQ += dS_{j-1} K_{j-1}
      if (idx > 0) wg::wait<1>(); else wg::wait<0>();  // S and dP are done; dQ of j - 1 may still run
      turn_end();
      release(v_empty + st);
      wg::fence_operands<NS>(sc);
      wg::fence_operands<NS>(dp);
      const int n0 = (nb_lo + idx) * BN;
      const bool masked = tile_needs_mask(a, s, m0, BM, n0, BN);
#pragma unroll
      for (int i = 0; i < NS; ++i) {
        const int r = r_lo + ((i >> 1) & 1) * 8, j = n0 + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
        float dcap = 1.f;
        const float v = plain ? sc[i] : score_log2(a, sc[i], slope, r, j, s.off, &dcap);
        const float p = ex2(fmaf(v, plain ? scale_log2 : 1.f, -lse_r[(i >> 1) & 1]));
        float ds = p * (dp[i] - dsum_r[(i >> 1) & 1]) * dcap;
        if (masked && !visible(a, s, r, j)) ds = 0.f;
        dp[i] = ds;
      }
      wg::wait<0>();
      if (idx > 0) release(k_empty + pst);
      wg::fence_operands<NO>(dq);
      Rows::fence_p(dsf);
      Rows::pack_p(dp, dsf);
    }
    if (n_tiles > 0) {  // the last tile's dQ
      const int pst = (n_tiles - 1) % ST;
      turn_begin();
      wg::fence_operands<NO>(dq);
      Rows::issue_pv(dq, dsf, smem_u32(sK + pst * BN * D));
      wg::wait<0>();
      turn_end();
      wg::fence_operands<NO>(dq);
      if (Tr::PING && cw == 0) tma::named_sync(1, 256);
    }
    // dQ = scale · accumulator, in the caller's layout and dtype
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int i = r_lo + rr * 8;
      if (i >= s.tq) continue;
      TO* dst = static_cast<TO*>(t.dq) + (static_cast<int64_t>(s.q0 + i) * a.H + h) * a.d_out;
      store_row<NO / 4>(dst, 0, lane, a.d_out, [&](int n, int jj) { return dq[4 * n + 2 * rr + jj] * a.scale; });
    }
  }
#else
  __trap();
#endif
}

}  // namespace fa
