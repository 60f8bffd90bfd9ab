// Backward attention on Hopper, warp-specialised (sm_90a, f16/bf16): the decomposition of
// bwd_wgmma_kernel (a CTA owns BN = 128 keys of one kv head and walks every query head of its GQA
// group and every BM-query tile that sees its keys, dK and dV in f32 registers throughout) with
// the forward's roles (fa_fwd_tma.cuh):
//   producer   warpgroup 0, registers cut to PRODUCER_REGS. Warp 0 loads K and V once (TMA, one
//              mbarrier), then Q and dO tiles into STAGES-deep rings, each stage guarded by a
//              "full" mbarrier (TMA bytes, plus the warp's own stores of the tile's LSE·log2 e
//              and Dsum rows) and an "empty" one (one arrival per consumer warp).
//              Warps 1..DQ_WRITERS (DQ_BULK) take the steps in turn and add each step's dQ blocks
//              to the tiled accumulator (fa_dq_tiles.cuh): one bulk reduction per block, handed
//              over on named barriers, each writer with its own blocks.
//   consumers  warpgroups 1 and 2 (key groups of 64 keys), registers raised to CONSUMER_REGS, the
//              per-step math of WgBwdKeys (fa_bwd_keys.cuh). No CTA barrier in the loop: the two
//              consumers meet once per step on a named barrier, where dS^T is published for dQ.
// One step of a consumer (the products' commit groups, oldest first):
//   S^T = K Q^T, dP^T = V dO^T               [wait all]  P^T, dS^T in registers, dS^T -> smem
//   dV += P^T dO                              named barrier: both halves of dS^T are in smem
//   dQ = dS K  (64 of D columns per warpgroup) [wait: dV retired -> release the dO stage]
//   dK += dS^T Q                              [wait: dQ retired -> dQ to smem (or atomics), dK still running]
//                                             [wait all -> release the Q stage]
// dS^T is double-buffered, so a warpgroup may write step i+1's dS^T while the other still reads
// step i's in its dQ product; the barrier of step i+1 keeps step i+2 from overwriting step i's.
// A key block with few query tiles (Tr::STAGGER) walks them starting at its own block index
// (Work::mb), so the CTAs of one head spread over the tiles instead of meeting on each.
// Deterministic calls: with DQ_BULK the writer adds a tile only after the key blocks that precede
// its own in a fixed order have (a counter per tile and head, FaArgs::dq_sem: acquire, add, wait
// for completion, release), so each dQ element is summed in one order run to run. The order is
// ascending key blocks, or descending when the first query tile of a key block grows with it
// (win_right >= 0: causal, windows bounded on the right), so that the blocks waited for are those
// that reach the tile first. Without
// DQ_BULK (or without counters) they skip dS^T and dQ, and bwd_post's dQ kernel computes it.
//
// Rows past the sequence inside the tensor (the next sequence of a packed batch) would meet
// masked P^T and dS^T entries that are 0, but 0 times a NaN or infinity of another sequence is NaN
// in dV += P^T dO, dK += dS^T Q (Q and dO rows) and in dQ = dS K (K rows): a Q, dO or K tile that
// reaches past its sequence's end (but not past the tensor's, where TMA writes zeros) is copied by
// the producer warp with plain loads instead, zero-filled (copy_tile128_warp). V rows only meet
// dP^T rows of keys that are never stored.
#pragma once
#include "fa_bwd_keys.cuh"
#include "fa_dq_tiles.cuh"
#include "fa_tma.cuh"

namespace fa {

template <typename E, typename Tr, bool MODS = true>  // MODS: the call may have soft-cap or ALiBi
__global__ void __launch_bounds__(384, 1)
    bwd_tma_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                   const __grid_constant__ CUtensorMap map_do, FaArgs a, FaTensors t) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::T;
  static_assert(!E::SPLIT, "16-bit operands only");
  constexpr int D = Tr::D, BN = Tr::BN, BM = Tr::BM, ST = Tr::STAGES;
  static_assert(BN == 128 && BM == 64, "two consumer warpgroups of 64 keys; dQ = dS K is one m64 product per step");
  constexpr int CB = D / 64;  // 64-column boxes per tile row
  constexpr uint32_t KV_BYTES = BN * D * 2;
  using Keys = WgBwdKeys<E, D, BN, BM, BM, Tr::STSM>;
  constexpr int NS = Keys::NS, NG = Keys::NG, NQ = Keys::NQ;
  constexpr int kDsReady = 1;  // named barrier: both warpgroups' dS^T are in shared memory
  constexpr int PARTS = Tr::PARTS;  // (dev timing only: parts left out)
  constexpr bool kAddDq = !(PARTS & 1), kDq = !(PARTS & 2), kMath = !(PARTS & 4), kDkDv = !(PARTS & 16);
  // DQ_BULK: per warpgroup with dQ columns (NH of them) and per writer warp (NW: steps alternate
  // between them), a BM x 64 float block in shared memory, "full" (consumer -> writer warp) and
  // "empty" (writer -> consumer) named barriers of 160 threads: block (p, w) of step parity p.
  constexpr bool kBulk = Tr::DQ_BULK;
  constexpr int NH = D / 64, NW = Tr::DQ_WRITERS, kDqBar = 128 + 32;
  static_assert(NW == 1 || NW == 2, "one or two dQ writer warps");
  auto dq_full = [](int p, int w) { return 2 + p * NH + w; };
  auto dq_empty = [](int p, int w) { return 2 + NW * NH + p * NH + w; };
  static_assert(!kBulk || BM == DqTiles::BM, "the tiled dQ layout is 64 rows a tile");

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);  // [BN][D]
  T* sV = sK + BN * D;                     // [BN][D]
  T* sQ = sV + BN * D;                     // [ST][BM][D]
  T* sdO = sQ + ST * BM * D;               // [ST][BM][D]
  T* sdS = sdO + ST * BM * D;              // [2][BN keys][BM queries]
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * BN * BM);  // DQ_BULK: [NW][NH][DqTiles::BLOCK]
  float* sLse = sdQ + (kBulk ? NW * NH * DqTiles::BLOCK : 0);  // [ST][BM]
  float* sDs = sLse + ST * BM;                                // [ST][BM]
  uint64_t* bars = reinterpret_cast<uint64_t*>(sDs + ST * BM);
  uint64_t* kv_full = bars;
  uint64_t* q_full = bars + 1;
  uint64_t* do_full = q_full + ST;
  uint64_t* q_empty = do_full + ST;
  uint64_t* do_empty = q_empty + ST;

  uint64_t* kv_empty = do_empty + ST;  // the consumers are done with a tile's K and V
  const tma::TileRing ring{kv_empty + 1, reinterpret_cast<volatile int*>(kv_empty + 1 + tma::TileRing::kBars)};  // read by the consumer warps and the dQ writer

  const int tid = threadIdx.x, wgi = tid / 128;
  const int G = a.H / a.Hkv;
  // Tiles: t = (key block fastest, then kv head, then sequence; but see the tail below), one CTA a
  // tile or (persistent, a counter in FaArgs::tile_counter) one CTA per SM taking the next tile when
  // it finishes one: the producer loads the next K and V while the consumers store dK and dV. A
  // deterministic call that orders its dQ adds by descending key block (causal, windows: see the
  // writer) walks its key blocks in that order too, so a tile only ever waits for tiles taken
  // before it (running or done): no deadlock, whatever fits on the GPU.
  const bool reversed = kBulk && a.deterministic && a.dq_tiled && a.win_right >= 0;
  const int nkb = (a.max_tk + BN - 1) / BN;
  const int total = nkb * a.Hkv * a.B;
  // The tail (Tr::ORDER = k > 0; masked calls that are not deterministic): key blocks have walks of
  // different lengths (causal: key block 0 the longest), and with key blocks fastest the grid ended
  // on the last head's long walk while the other SMs idled (~6 % at 4K causal, by a model of the
  // counter). So the last tail_heads (kv head, sequence) pairs, enough for k tiles an SM, walk kv
  // heads fastest: every one of their first key blocks before any second, and the grid ends on short
  // walks. Only the last ones: kv heads fastest throughout lost up to 14 % (run 64: the CTAs running
  // together then spread over every head, and Q, dO and dQ no longer stay in L2 between them).
  const int heads = a.Hkv * a.B;
  const bool masked = a.win_left >= 0 || a.win_right >= 0;
  const int tail_heads = Tr::ORDER > 0 && masked && !a.deterministic ? min(heads, (Tr::ORDER * max(a.num_sms, 1) + nkb - 1) / nkb) : 0;
  const int tail0 = (heads - tail_heads) * nkb;  // the tail's first tile
  // STAGGER (calls that are not deterministic, key blocks with few query tiles): key block n walks
  // its query tiles starting n tiles into its range (wrapping)
  const bool stagger = Tr::STAGGER > 0 && !a.deterministic;
  struct Work {
    SeqInfo s;
    int n_block, hk, b, n0, mb_lo, nm, total_it, shift;
    __device__ __forceinline__ int mb(int it) const {  // query tile of step it (heads of the group outermost)
      int r = it % nm + shift;
      return mb_lo + (r >= nm ? r - nm : r);
    }
  };
  auto work_of = [&](int tile, Work* w) -> bool {  // false: no keys here (past the sequence)
    int nb, r;  // key block, (kv head, sequence) pair
    if (tile < tail0) {
      nb = tile % nkb;
      r = tile / nkb;
    } else {
      const int th = max(tail_heads, 1);  // (tail_heads > 0 here)
      nb = (tile - tail0) / th;
      r = heads - th + (tile - tail0) % th;
    }
    w->n_block = reversed ? nkb - 1 - nb : nb;
    w->hk = r % a.Hkv;
    w->b = r / a.Hkv;
    w->s = seq_info(a, w->b);
    w->n0 = w->n_block * BN;
    if (w->n0 >= w->s.tk) return false;
    int mb_hi;
    query_block_range(a, w->s, w->n0, BN, BM, &w->mb_lo, &mb_hi);
    w->nm = mb_hi - w->mb_lo;
    w->total_it = w->nm * G;
    w->shift = stagger && w->nm > 1 && w->nm <= Tr::STAGGER ? w->n_block % w->nm : 0;
    return true;
  };

  if (tid == 0) {
    tma::bar_init(kv_full, 1);
    tma::bar_init(kv_empty, 8);  // one arrival per consumer warp
    ring.init(8 + NW);  // the consumer warps and the dQ writer warps
#pragma unroll
    for (int i = 0; i < ST; ++i) {
      tma::bar_init(q_full + i, 1);
      tma::bar_init(do_full + i, 1);
      tma::bar_init(q_empty + i, 8);  // one arrival per consumer warp
      tma::bar_init(do_empty + i, 8);
    }
    tma::fence_bar_init();
  }
  __syncthreads();

  if (wgi == 0) {
    // ---- producer ------------------------------------------------------------------------------
    tma::regs_dec<Tr::PRODUCER_REGS>();
    if (tid >= 32 + 32 * NW) return;
    if (tid >= 32) {
      // ---- warps 1..NW: dQ blocks -> the tiled accumulator, writer p taking the steps of parity p
      // (two writers: a deterministic step's wait for its turn and for its adds' completion
      // overlaps the other writer's step) --------------------------------------------------------
      constexpr bool kWriter = kBulk && kDq && kAddDq;
      const bool writes = kWriter && !(a.deterministic && !a.dq_tiled);  // (no counters: the dQ kernel adds dQ)
      const int p = tid / 32 - 1, wl = tid % 32;
      const bool lead = wl == 0, ordered = a.deterministic;
      if (writes)
#pragma unroll
        for (int w = 0; w < NH; ++w) tma::named_arrive(dq_empty(p, w), kDqBar);  // the blocks start empty
      int qw = 0;  // steps so far (the consumers' qi)
      for (int i = 0;; ++i) {
        const int tile = ring.read(i);
        if (tile >= total) break;
        Work wk;
        if (!writes || !work_of(tile, &wk)) continue;
        const SeqInfo& s = wk.s;
        for (int it = 0; it < wk.total_it; ++it) {
          if (qw++ % NW != p) continue;
          const int h = wk.hk * G + it / wk.nm, mb = wk.mb(it);
          float* dst = a.dq_accum + DqTiles::tile_offset(s.q0, wk.b, mb, h, a.H, D);  // block w at + w * BLOCK
          int* sem = nullptr;
          if (ordered) {
            // the key blocks that add tile mb before ours: those below ours, or, when a block's
            // first query tile grows with its keys (causal, windows), those above: they reach the
            // tile first (block n meets tile m at step m - first(n)); waiting for the blocks below
            // would make block n wait about 2n steps for block 0 (2 query tiles per key block)
            const bool above = reversed;
            const int nblocks = min((s.tk + BN - 1) / BN, nkb);  // (a max_tk too small must not hang)
            int before = 0;
            for (int nb = wl; nb < nblocks; nb += 32) {
              int lo, hi;
              query_block_range(a, s, nb * BN, BN, BM, &lo, &hi);
              before += (above ? nb > wk.n_block : nb < wk.n_block) && lo <= mb && mb < hi;
            }
            before = __reduce_add_sync(0xffffffffu, before);
            sem = a.dq_sem + DqTiles::tile_index(s.q0, wk.b, mb, h, a.H);
            if (lead)
              while (tma::ld_acquire(sem) != before) __nanosleep(64);
            __syncwarp();
            tma::fence_proxy_async_global();  // the earlier blocks' sums, before our bulk reads them
          }
#pragma unroll
          for (int w = 0; w < NH; ++w) {
            tma::named_sync(dq_full(p, w), kDqBar);
            if (lead && !(PARTS & 8)) {
              tma::reduce_add_f32(dst + w * DqTiles::BLOCK, sdQ + (p * NH + w) * DqTiles::BLOCK, DqTiles::BLOCK * sizeof(float));
              tma::bulk_commit();
            }
          }
          if constexpr (NH == 2) {
            if (lead) tma::bulk_wait_read<1>();
            __syncwarp();
            tma::named_arrive(dq_empty(p, 0), kDqBar);
          }
          if (lead) tma::bulk_wait_read<0>();
          __syncwarp();
          tma::named_arrive(dq_empty(p, NH - 1), kDqBar);
          if (ordered && lead) {
            tma::bulk_wait_all<0>();  // our sums are in global memory
            tma::fence_proxy_async_global();
            tma::add_release(sem, 1);
          }
        }
      }
      if (lead) tma::bulk_wait_all<0>();
      return;
    }
    const int lane = tid;
    const int64_t ldk = static_cast<int64_t>(a.Hkv) * a.d;
    if (lane == 0) {
      tma::prefetch_map(&map_q);
      tma::prefetch_map(&map_k);
      tma::prefetch_map(&map_v);
      tma::prefetch_map(&map_do);
    }
    int qi = 0, nkv = 0;  // Q/dO ring position, K/V loads so far
    for (int i = 0;; ++i) {
      const int tile = ring.publish<Tr::PERSIST>(i, total, a.tile_counter, a.deterministic);
      if (tile >= total) break;
      Work wk;
      if (!work_of(tile, &wk) || wk.total_it == 0) continue;  // (no query sees these keys: the consumers write zeros)
      const SeqInfo& s = wk.s;
      const int n0 = wk.n0, hk = wk.hk;
      // K and V, once a tile, when the consumers are done with the last tile's. A K tile that runs
      // into the next sequence is copied and zero-filled.
      if (nkv > 0) tma::wait(kv_empty, (nkv - 1) & 1);
      ++nkv;
      const bool k_copy = n0 + BN > s.tk && s.k0 + s.tk < a.total_k;
      if (k_copy) {
        copy_tile128_warp<BN, D>(sK, static_cast<const T*>(t.k) + (s.k0 + n0) * ldk + static_cast<int64_t>(hk) * a.d, ldk, s.tk - n0, a.d, lane);
        wg::fence_proxy_async();  // the tensor cores read these stores through the async proxy
        __syncwarp();
      }
      if (lane == 0) {
        tma::arrive_expect(kv_full, k_copy ? KV_BYTES : 2 * KV_BYTES);
#pragma unroll
        for (int c = 0; c < CB; ++c) {
          if (!k_copy) tma::load_box(sK + c * BN * 64, &map_k, kv_full, c * 64, hk, s.k0 + n0);
          tma::load_box(sV + c * BN * 64, &map_v, kv_full, c * 64, hk, s.k0 + n0);
        }
      }
      const bool q_tail_in_tensor = s.q0 + s.tq < a.total_q;  // rows after this sequence hold data
      // One Q-side tile (Q or dO) and its per-row statistic (LSE·log2 e or Dsum) into ring slot qi.
      auto load = [&](uint64_t* full, uint64_t* empty, T* tile_buf, const CUtensorMap* map, const void* src, float* srow, const float* grow, int it) {
        const int st = qi % ST, h = hk * G + it / wk.nm, m0 = wk.mb(it) * BM;
        const float* g = grow + static_cast<int64_t>(h) * a.total_q + s.q0 + m0;
        auto stat = [&](int r) { return m0 + lane + 32 * r < s.tq ? g[lane + 32 * r] : 0.f; };
        float row[BM / 32];  // EARLY_ROWS: read before waiting for the slot, so the read's latency hides under the wait
        if constexpr (Tr::EARLY_ROWS)
#pragma unroll
          for (int r = 0; r < BM / 32; ++r) row[r] = stat(r);
        if (qi >= ST) tma::wait(empty + st, ((qi / ST) + 1) & 1);
#pragma unroll
        for (int r = 0; r < BM / 32; ++r) {
          if constexpr (!Tr::EARLY_ROWS) row[r] = stat(r);
          srow[st * BM + lane + 32 * r] = row[r];
        }
        // (load_tile's __syncwarp also orders the row statistics above before the arrival)
        tma::load_tile<BM, D>(tile_buf + st * BM * D, map, static_cast<const T*>(src), full + st, s.q0 + m0, h, a.H, a.d, s.tq - m0, q_tail_in_tensor, lane);
      };
      for (int it = 0; it < wk.total_it; ++it, ++qi) {
        load(q_full, q_empty, sQ, &map_q, t.q, sLse, a.lse2, it);
        load(do_full, do_empty, sdO, &map_do, t.dout, sDs, a.dsum, it);
      }
    }
  } else {
    // ---- consumers -----------------------------------------------------------------------------
    tma::regs_inc<Tr::CONSUMER_REGS>();
    const int cw = wgi - 1, warp = (tid % 128) / 32, lane = tid % 32;
    const int kr = cw * 64 + warp * 16 + (lane >> 2);  // local key row of c0/c1
    const uint32_t k_addr = smem_u32(sK) + cw * 64 * 128, v_addr = smem_u32(sV) + cw * 64 * 128;  // this warpgroup's 64 key rows
    const bool det = a.deterministic;
    const bool dq_here = kDq && (!det || (kBulk && a.dq_tiled));  // dQ in this kernel (deterministic: ordered bulk adds)
    const bool has_dq = dq_here && cw * 64 < D;   // (D = 64: only the first consumer has dQ columns)
    auto release = [&](uint64_t* bar) { if (lane == 0) tma::arrive(bar); };
    // Keeps a fragment's registers from being reused while a wgmma that reads them may run.
    auto fence_frag = [](typename Keys::Frag& f) {
#pragma unroll
      for (int ks = 0; ks < BM / 16; ++ks) wg::fence_operands_u(f[0][ks]);
    };

    int qi = 0, nkv = 0;  // Q/dO ring position (also dS^T's buffer), K/V tiles used so far
    for (int i = 0;; ++i) {
      const int tile = ring.read(i);
      if (tile >= total) break;
      Work wk;
      if (!work_of(tile, &wk)) continue;
      const SeqInfo& s = wk.s;
      const int n0 = wk.n0, hk = wk.hk, b = wk.b, nm = wk.nm, total_it = wk.total_it;
      Keys keys(a, s, n0, kr, 0, lane);
      float dk[NG], dv[NG];
#pragma unroll
      for (int j = 0; j < NG; ++j) dk[j] = dv[j] = 0.f;
      if (total_it > 0) tma::wait(kv_full, nkv & 1);
      for (int it = 0; it < total_it; ++it, ++qi) {
        const int st = qi % ST, ph = (qi / ST) & 1;
        const int h = hk * G + it / nm, m0 = wk.mb(it) * BM;
        keys.template head<MODS>(b, h);
        const uint32_t q_addr = smem_u32(sQ + st * BM * D), do_addr = smem_u32(sdO + st * BM * D);
        T* ds_buf = sdS + (qi & 1) * BN * BM;

        // ---- S^T = K Q^T, dP^T = V dO^T --------------------------------------------------------
        float sc[NS], dp[NS];
        tma::wait(q_full + st, ph);
        tma::wait(do_full + st, ph);  // (both before the first issue: a wait between wgmmas serialises them)
        keys.issue_kq(sc, k_addr, q_addr);
        keys.issue_kq(dp, v_addr, do_addr);
        wg::commit();
        wg::wait<0>();  // (S^T and dP^T in two groups, P^T computed under dP^T, was 21 % slower: KERNEL_NOTES)
        wg::fence_operands<NS>(sc);
        wg::fence_operands<NS>(dp);

        // ---- P^T, dS^T; dS^T to shared memory --------------------------------------------------
        if constexpr (kMath) keys.template p_ds<true, MODS>(sc, dp, m0, sLse + st * BM, sDs + st * BM);
        typename Keys::Frag pf, sf;
        keys.pack(sc, dp, pf, sf);
        if (dq_here) keys.store_ds(sf, ds_buf);

        // ---- dV += P^T dO; dQ = dS K; dK += dS^T Q ---------------------------------------------
        wg::fence_operands<NG>(dv);
        wg::fence_operands<NG>(dk);
        if constexpr (kDkDv) keys.issue_acc(dv, pf, do_addr);
        wg::commit();
        if (dq_here) {
          wg::fence_proxy_async();  // our dS^T stores, for the other warpgroup's tensor cores too
          tma::named_sync(kDsReady, 256);
        }
        if (has_dq) {
          float dq[NQ];
          Keys::issue_dq(dq, smem_u32(ds_buf), smem_u32(sK) + cw * BN * 128);
          wg::commit();
          wg::wait<1>();  // dV retired: dO and P^T are no longer read
          fence_frag(pf);
          release(do_empty + st);
          if constexpr (kDkDv) keys.issue_acc(dk, sf, q_addr);
          wg::commit();
          wg::wait<1>();  // dQ retired (dK may still run)
          wg::fence_operands<NQ>(dq);
          if constexpr (kAddDq && kBulk) {
            // this warpgroup's block: float4 n of thread t at n * 128 + t (fa_dq_tiles.cuh)
            const int p = qi % NW;  // the writer of this step
            float4* blk = reinterpret_cast<float4*>(sdQ + (p * NH + cw) * DqTiles::BLOCK);
            const int t4 = tid % 128;
            tma::named_sync(dq_empty(p, cw), kDqBar);  // the writer has read its previous step's block
#pragma unroll
            for (int n = 0; n < DqTiles::F4; ++n) blk[n * 128 + t4] = make_float4(dq[4 * n], dq[4 * n + 1], dq[4 * n + 2], dq[4 * n + 3]);
            // the bulk copy reads these stores through the async proxy; (the fence and arrival after
            // dK retired were 7 % slower: here they run under dK)
            wg::fence_proxy_async();
            tma::named_arrive(dq_full(p, cw), kDqBar);
          } else if constexpr (kAddDq) {
            keys.add_dq(dq, m0, h, warp, cw * 64);
          }
        } else {
          if constexpr (kDkDv) keys.issue_acc(dk, sf, q_addr);
          wg::commit();
          wg::wait<1>();
          fence_frag(pf);
          release(do_empty + st);
        }
        wg::wait<0>();
        wg::fence_operands<NG>(dv);
        wg::fence_operands<NG>(dk);
        fence_frag(sf);
        release(q_empty + st);
      }
      if (total_it > 0) {
        release(kv_empty);  // every product of this tile has retired: the producer may load the next K, V
        ++nkv;
      }
      store_dkdv_rows<E, NG / 4>(a, t, s, hk, n0 + kr, 0, lane, dk, dv, a.scale * keys.ss.dk, keys.ss.dv);
    }
  }
#else
  __trap();
#endif
}

}  // namespace fa
