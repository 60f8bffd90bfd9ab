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
// Tiles: under a mask t = (head fastest, then query tile from the last, then batch x split): the
// longest rows start first; without one (Tr::ORDER 1) query tiles fastest, then heads: the CTAs
// running together share one head's K and V in L2 (fwd_tile_of).
// Persistent (Tr::PERSIST with a counter in FaArgs::tile_counter): one CTA per SM, each taking its
// next tile from the counter as it finishes one (tma::TileRing): the producer loads the next
// tile's Q and first K/V while the consumers finish the last P V and store O, which is what short
// (and causal) tiles lost to each CTA's start. Otherwise one CTA a tile, t = blockIdx.x.
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

// Tile t of the forward's list.
struct FwdTile {
  int h, m_block, b, split;
};
template <int ORDER>
__device__ __forceinline__ FwdTile fwd_tile_of(const FaArgs& a, int t, int nq) {
  FwdTile f;
  int z;
  if (ORDER == 1 && a.win_left < 0 && a.win_right < 0) {  // query tiles fastest: one head's K and V at a time
    f.m_block = nq - 1 - t % nq;
    const int r = t / nq;
    f.h = r % a.H;
    z = r / a.H;
  } else {
    f.h = t % a.H;
    const int r = t / a.H;
    f.m_block = nq - 1 - r % nq;
    z = r / nq;
  }
  f.b = z / a.num_splits;
  f.split = z % a.num_splits;
  return f;
}

template <typename E, typename Tr>
__global__ void __launch_bounds__(Tr::NT, 1)
    fwd_tma_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                   const __grid_constant__ CUtensorMap map_o, bool o_by_tma, FaArgs a, FaTensors t) {
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
  T* sO = sV + ST * BN * D;                // STORE: [NC][64][D], each warpgroup's rows for its TMA stores
  uint64_t* bars = reinterpret_cast<uint64_t*>(sO + (Tr::STORE ? BM * D : 0));
  uint64_t* q_full = bars;
  uint64_t* q_empty = bars + 1;  // the consumers' last Q K^T of a tile has retired
  uint64_t* k_full = bars + 2;
  uint64_t* v_full = k_full + ST;
  uint64_t* k_empty = v_full + ST;
  uint64_t* v_empty = k_empty + ST;
  const tma::TileRing ring{v_empty + ST, reinterpret_cast<volatile int*>(v_empty + ST + tma::TileRing::kBars)};  // read by the consumer warps

  const int tid = threadIdx.x, wgi = tid / 128;
  const int nq = (a.max_tq + BM - 1) / BM;
  const int total = a.H * nq * a.B * a.num_splits;
  // A tile's work: its sequence, query rows and key blocks (the same answer in every role).
  struct Work {
    FwdTile f;
    SeqInfo s;
    int m0, hk, nb_lo, n_tiles;
  };
  auto work_of = [&](int tile, Work* w) -> bool {  // false: no rows here (past the sequence)
    w->f = fwd_tile_of<Tr::ORDER>(a, tile, nq);
    w->s = seq_info(a, w->f.b);
    w->m0 = w->f.m_block * BM;
    if (w->m0 >= w->s.tq) return false;
    w->hk = w->f.h / (a.H / a.Hkv);
    int nb_hi;
    key_block_range(a, w->s, w->m0, BM, BN, &w->nb_lo, &nb_hi);
    split_key_range(a, w->f.split, &w->nb_lo, &nb_hi);
    w->n_tiles = nb_hi - w->nb_lo;
    return true;
  };

  if (tid == 0) {
    tma::bar_init(q_full, 1);
    tma::bar_init(q_empty, 4 * NC);  // one arrival per consumer warp
    ring.init(4 * NC);
#pragma unroll
    for (int i = 0; i < ST; ++i) {
      tma::bar_init(k_full + i, 1);
      tma::bar_init(v_full + i, 1);
      tma::bar_init(k_empty + i, 4 * NC);
      tma::bar_init(v_empty + i, 4 * NC);
    }
    tma::fence_bar_init();
  }
  __syncthreads();

  if (wgi == 0) {
    // ---- producer ------------------------------------------------------------------------------
    tma::regs_dec<Tr::PRODUCER_REGS>();
    if (tid >= 32) return;
    const int lane = tid;
    if (lane == 0) {
      tma::prefetch_map(&map_q);
      tma::prefetch_map(&map_k);
      tma::prefetch_map(&map_v);
    }
    int kv = 0, nq_loaded = 0;  // K/V tiles and Q tiles loaded so far (ring positions and phases)
    for (int i = 0;; ++i) {
      const int tile = ring.publish<Tr::PERSIST>(i, total, a.tile_counter);
      if (tile >= total) break;
      Work w;
      if (!work_of(tile, &w) || w.n_tiles == 0) continue;  // (nothing to load: the consumers write zeros)
      if (lane == 0) {
        if (nq_loaded > 0) tma::wait(q_empty, (nq_loaded - 1) & 1);
        tma::arrive_expect(q_full, Q_BYTES);
#pragma unroll
        for (int c = 0; c < CB; ++c) tma::load_box(sQ + c * BM * 64, &map_q, q_full, c * 64, w.f.h, w.s.q0 + w.m0);
      }
      ++nq_loaded;
      const bool v_tail_in_tensor = w.s.k0 + w.s.tk < a.total_k;  // rows after this sequence hold data
      for (int idx = 0; idx < w.n_tiles; ++idx, ++kv) {
        const int st = kv % ST, n1 = (w.nb_lo + idx) * BN;
        if (kv >= ST) tma::wait(k_empty + st, ((kv / ST) + 1) & 1);
        if (lane == 0) {
          tma::arrive_expect(k_full + st, KV_BYTES);
#pragma unroll
          for (int c = 0; c < CB; ++c) tma::load_box(sK + st * BN * D + c * BN * 64, &map_k, k_full + st, c * 64, w.hk, w.s.k0 + n1);
        }
        if (kv >= ST) tma::wait(v_empty + st, ((kv / ST) + 1) & 1);
        tma::load_tile<BN, D>(sV + st * BN * D, &map_v, static_cast<const T*>(t.v), v_full + st, w.s.k0 + n1, w.hk, a.Hkv, a.d, w.s.tk - n1,
                              v_tail_in_tensor, lane);
      }
    }
  } else {
    // ---- consumers -----------------------------------------------------------------------------
    tma::regs_inc<Tr::CONSUMER_REGS>();
    const int cw = wgi - 1, ctid = tid - 128, warp_lane = tid % 32;
    const uint32_t q_addr = smem_u32(sQ) + cw * 64 * 64 * 2;
    // Ping-pong: warpgroup c issues its products after bar.sync on barrier 1 + c, then lets the
    // next one go (bar.arrive on barrier 1 + (c + 1) % NC). Every warpgroup takes the same number
    // of turns per tile (its key tiles and the last P V), so the ring runs on from tile to tile:
    // the last warpgroup opens the first turn once, and warpgroup 0 takes the last turn's arrival
    // (or that opening, if there were no turns) when the CTA is done. A warpgroup never arrives
    // twice on a barrier before the other side's sync: its next arrival there needs that side's turn.
    auto turn_begin = [&] { if constexpr (Tr::PING) tma::named_sync(1 + cw, 256); };
    auto turn_end = [&] { if constexpr (Tr::PING) tma::named_arrive(1 + (cw + 1) % NC, 256); };
    auto release = [&](uint64_t* bar) { if (warp_lane == 0) tma::arrive(bar); };
    if (Tr::PING && cw == NC - 1) tma::named_arrive(1, 256);

    int kv = 0, nq_used = 0;
    for (int i = 0;; ++i) {
      const int tile = ring.read(i);
      if (tile >= total) break;
      Work w;
      if (!work_of(tile, &w)) continue;
      const int n_tiles = w.n_tiles;
      Rows rows(a, w.s, w.f.b, w.f.h, w.m0, cw * 64, ctid % 128);
      float o[NO];
#pragma unroll
      for (int j = 0; j < NO; ++j) o[j] = 0.f;
      if (n_tiles > 0) {
        typename Rows::PFrag pf;
        float sc[NS], alpha[2];
        tma::wait(q_full, nq_used & 1);
        for (int idx = 0; idx < n_tiles; ++idx) {
          const int kvi = kv + idx, st = kvi % ST, pst = (kvi + ST - 1) % ST;
          tma::wait(k_full + st, (kvi / ST) & 1);
          if (idx > 0) tma::wait(v_full + pst, ((kvi - 1) / ST) & 1);  // (no waits between the wgmmas: ptxas would serialise them)
          turn_begin();
          Rows::issue_qk(sc, q_addr, smem_u32(sK + st * BN * D));
          if (idx > 0) Rows::issue_pv(o, pf, smem_u32(sV + pst * BN * D));
          if (idx > 0) wg::wait<1>(); else wg::wait<0>();  // S_idx is done; P V of idx - 1 may still run
          turn_end();  // (after the wait: a bar.arrive between the issue and the wait serialises the wgmmas, C7514)
          release(k_empty + st);
          if (idx == n_tiles - 1) release(q_empty);  // the producer may load the next tile's Q
          wg::fence_operands<NS>(sc);
          rows.template prepare<!(Tr::PARTS & 1)>(sc, w.nb_lo + idx);
          rows.step(sc, alpha);
          wg::wait<0>();
          if (idx > 0) release(v_empty + pst);
          wg::fence_operands<NO>(o);
          Rows::fence_p(pf);
          Rows::rescale_o(o, alpha);
          Rows::pack_p(sc, pf);
        }
        // the last tile's P V
        const int pst = (kv + n_tiles - 1) % ST;
        tma::wait(v_full + pst, ((kv + n_tiles - 1) / ST) & 1);
        turn_begin();
        wg::fence_operands<NO>(o);
        Rows::issue_pv(o, pf, smem_u32(sV + pst * BN * D));
        turn_end();
        wg::wait<0>();
        wg::fence_operands<NO>(o);
        release(v_empty + pst);
        kv += n_tiles;
        ++nq_used;
      }
      if constexpr (Tr::PARTS & 2) {
      } else if (Tr::STORE && o_by_tma && w.m0 + BM <= w.s.tq) {
        // A whole tile (no rows of another sequence): O through shared memory and a TMA store per
        // 64-column box, issued by the warpgroup's first thread, so the warpgroup goes on at once.
        // The previous tile's stores must have read this warpgroup's O tile first: its issuer
        // waits, then the warpgroup's named barrier (4 + cw) lets everyone write.
        T* sOw = sO + cw * 64 * D;
        const bool issuer = ctid % 128 == 0;
        if (issuer) tma::bulk_wait_read<0>();
        tma::named_sync(4 + cw, 128);
        rows.store_smem(t, w.f.b, w.f.h, (ctid % 128 / 32) * 16 + warp_lane / 4, o, sOw);
        wg::fence_proxy_async();  // the stores above, for the copy engine
        tma::named_sync(4 + cw, 128);
        if (issuer) {
#pragma unroll
          for (int c = 0; c < CB; ++c) tma::store_box(&map_o, sOw + c * 64 * 64, c * 64, w.f.h, w.s.q0 + w.m0 + cw * 64);
          tma::bulk_commit();
        }
      } else {
        rows.store(t, w.f.b, w.f.h, w.f.split, o);
      }
    }
    if (Tr::STORE && ctid % 128 == 0) tma::bulk_wait_all<0>();  // the O stores are done before the CTA exits
    if (Tr::PING && cw == 0) tma::named_sync(1, 256);
  }
#else
  __trap();
#endif
}

}  // namespace fa
