// Forward attention on Hopper, warp-specialised (sm_90a, f16/bf16): the FlashAttention-3 layout.
//
// Roles (one CTA = BM = 64 x NC query rows of one head, NC + 1 warpgroups):
//   producer   warpgroup 0, registers cut to PRODUCER_REGS. One thread issues every TMA load: Q
//              once, then K and V tiles into ST-stage rings, each stage guarded by a "full"
//              mbarrier (the copy engine completes it) and an "empty" one (the consumers release
//              it). The other warps of the group only idle.
//   consumers  warpgroups 1..NC (NC = 2, or 3 for short head dims), registers raised to
//              CONSUMER_REGS, 64 query rows each: the
//              products on wgmma and the online softmax (WgFwdRows, fa_fwd_softmax.cuh).
// Schedules, stacked:
//   intra-warpgroup  S_j = Q K_j^T and O += P_{j-1} V_{j-1} issue together; the softmax of S_j
//                    runs while P_{j-1} V_{j-1} is still on the tensor cores (as fa_fwd_wgmma.cuh)
//   ping-pong        (PING) the consumer warpgroups take turns issuing their products, in a ring
//                    of named barriers, so one's softmax overlaps the others' products
// Grid: (heads, query tiles, batch x splits) with the query tiles walked from the last: under a
// causal mask the longest rows start first, and every head's tiles launch before any head's short ones.
//
// Rows past the sequence inside the tensor (the next sequence of a packed batch): a Q row there
// only makes a row that is never stored; a K row only scores that are masked to -inf; a V row
// would meet P = 0, and 0 times a NaN or an infinity of another sequence is NaN, so a V tile that
// reaches past its sequence's end (but not past the tensor's, where TMA writes zeros) is copied by
// the producer warp with plain loads instead, zero-filled.
#pragma once
#include "fa_common.cuh"
#include "fa_fwd_softmax.cuh"
#include "fa_tma.cuh"

namespace fa {

template <typename E, typename Tr>
__global__ void __launch_bounds__(Tr::NT, 1)
    fwd_tma_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                   FaArgs a, FaTensors t) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::T;
  static_assert(!E::SPLIT, "16-bit operands only");
  constexpr int D = Tr::D, BN = Tr::BN, BM = Tr::BM, ST = Tr::STAGES, NC = Tr::NC;
  constexpr int NS = BN / 2, NO = D / 2;
  constexpr int CB = D / 64;  // 64-column boxes per tile row
  constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
  using Rows = WgFwdRows<E, D, BN, BM>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [BM][D]
  T* sK = sQ + BM * D;                     // [ST][BN][D]
  T* sV = sK + ST * BN * D;                // [ST][BN][D]
  uint64_t* bars = reinterpret_cast<uint64_t*>(sV + ST * BN * D);
  uint64_t* q_full = bars;
  uint64_t* k_full = bars + 1;
  uint64_t* v_full = k_full + ST;
  uint64_t* k_empty = v_full + ST;
  uint64_t* v_empty = k_empty + ST;

  const int tid = threadIdx.x, wgi = tid / 128;
  const int h = blockIdx.x, m_block = gridDim.y - 1 - blockIdx.y;
  const int b = blockIdx.z / a.num_splits, split = blockIdx.z % a.num_splits;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * BM;
  if (m0 >= s.tq) return;  // the whole CTA, before any barrier
  const int hk = h / (a.H / a.Hkv);
  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);
  split_key_range(a, split, &nb_lo, &nb_hi);
  const int n_tiles = nb_hi - nb_lo;

  if (tid == 0) {
    tma::bar_init(q_full, 1);
#pragma unroll
    for (int i = 0; i < ST; ++i) {
      tma::bar_init(k_full + i, 1);
      tma::bar_init(v_full + i, 1);
      tma::bar_init(k_empty + i, 4 * NC);  // one arrival per consumer warp
      tma::bar_init(v_empty + i, 4 * NC);
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
      tma::prefetch_map(&map_q);
      tma::prefetch_map(&map_k);
      tma::prefetch_map(&map_v);
      tma::arrive_expect(q_full, Q_BYTES);
#pragma unroll
      for (int c = 0; c < CB; ++c) tma::load_box(sQ + c * BM * 64, &map_q, q_full, c * 64, h, s.q0 + m0);
    }
    const bool v_tail_in_tensor = s.k0 + s.tk < a.total_k;  // rows after this sequence hold data
    for (int idx = 0; idx < n_tiles; ++idx) {
      const int st = idx % ST, n1 = (nb_lo + idx) * BN;
      if (idx >= ST) tma::wait(k_empty + st, ((idx / ST) + 1) & 1);
      if (lane == 0) {
        tma::arrive_expect(k_full + st, KV_BYTES);
#pragma unroll
        for (int c = 0; c < CB; ++c) tma::load_box(sK + st * BN * D + c * BN * 64, &map_k, k_full + st, c * 64, hk, s.k0 + n1);
      }
      if (idx >= ST) tma::wait(v_empty + st, ((idx / ST) + 1) & 1);
      tma::load_tile<BN, D>(sV + st * BN * D, &map_v, static_cast<const T*>(t.v), v_full + st, s.k0 + n1, hk, a.Hkv, a.d, s.tk - n1, v_tail_in_tensor, lane);
    }
  } else {
    // ---- consumers -----------------------------------------------------------------------------
    tma::regs_inc<Tr::CONSUMER_REGS>();
    const int cw = wgi - 1, ctid = tid - 128, warp_lane = tid % 32;
    Rows rows(a, s, b, h, m0, cw * 64, ctid % 128);
    float o[NO];
#pragma unroll
    for (int i = 0; i < NO; ++i) o[i] = 0.f;
    const uint32_t q_addr = smem_u32(sQ) + cw * 64 * 64 * 2;
    // Ping-pong: warpgroup c issues its products after bar.sync on barrier 1 + c, then lets the
    // next one go (bar.arrive on barrier 1 + (c + 1) % NC). The last warpgroup opens the first
    // turn for warpgroup 0, and warpgroup 0 takes the last turn's arrival after its loop, so
    // every barrier ends balanced.
    auto turn_begin = [&] { if constexpr (Tr::PING) tma::named_sync(1 + cw, 256); };
    auto turn_end = [&] { if constexpr (Tr::PING) tma::named_arrive(1 + (cw + 1) % NC, 256); };
    auto release = [&](uint64_t* bar) { if (warp_lane == 0) tma::arrive(bar); };
    if (Tr::PING && cw == NC - 1 && n_tiles > 0) tma::named_arrive(1, 256);

    typename Rows::PFrag pf;
    float sc[NS], alpha[2];
    if (n_tiles > 0) tma::wait(q_full, 0);
    for (int idx = 0; idx < n_tiles; ++idx) {
      const int st = idx % ST, pst = (idx + ST - 1) % ST;
      tma::wait(k_full + st, (idx / ST) & 1);
      if (idx > 0) tma::wait(v_full + pst, ((idx - 1) / ST) & 1);  // (no waits between the wgmmas: ptxas would serialise them)
      turn_begin();
      Rows::issue_qk(sc, q_addr, smem_u32(sK + st * BN * D));
      if (idx > 0) Rows::issue_pv(o, pf, smem_u32(sV + pst * BN * D));
      if (idx > 0) wg::wait<1>(); else wg::wait<0>();  // S_idx is done; P V of idx - 1 may still run
      turn_end();  // (after the wait: a bar.arrive between the issue and the wait serialises the wgmmas, C7514)
      release(k_empty + st);
      wg::fence_operands<NS>(sc);
      rows.prepare(sc, nb_lo + idx);
      rows.step(sc, alpha);
      wg::wait<0>();
      if (idx > 0) release(v_empty + pst);
      wg::fence_operands<NO>(o);
      Rows::fence_p(pf);
      Rows::rescale_o(o, alpha);
      Rows::pack_p(sc, pf);
    }
    if (n_tiles > 0) {  // the last tile's P V
      const int pst = (n_tiles - 1) % ST;
      tma::wait(v_full + pst, ((n_tiles - 1) / ST) & 1);
      turn_begin();
      wg::fence_operands<NO>(o);
      Rows::issue_pv(o, pf, smem_u32(sV + pst * BN * D));
      turn_end();
      wg::wait<0>();
      wg::fence_operands<NO>(o);
      if (Tr::PING && cw == 0) tma::named_sync(1, 256);
    }
    rows.store(t, b, h, split, o);
  }
#else
  __trap();
#endif
}

}  // namespace fa
