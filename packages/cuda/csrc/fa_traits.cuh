// The one table of kernel shapes: the element policy of each dtype, and the tile traits of every
// kernel per head-dim bucket (64, 128, 256) and policy (16-bit, or split f32). Shared-memory
// sizes follow from these in fa_smem.cuh; which kernel family runs, from runs_wgmma_fwd/bwd.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fa {

// ---------------------------------------------------------------------------------------------
// Element policies: how a dtype's operands reach the tensor cores.
//   T      the 16-bit type in shared memory and in the MMAs
//   TO     the caller's dtype: the outputs (O, dQ, dK, dV) and the backward's inputs O and dO
//   SPLIT  each operand is a pair of T planes (hi, lo) with x·2^e ≈ hi + lo, and each product
//          runs as hi·hi + hi·lo + lo·hi with float32 accumulation (fa_prep.cuh, KERNEL_NOTES.md)
// ---------------------------------------------------------------------------------------------
template <typename T_, typename TO_, bool SPLIT_>
struct Elem {
  using T = T_;
  using TO = TO_;
  static constexpr bool SPLIT = SPLIT_;
  static constexpr int NP = SPLIT_ ? 2 : 1;  // planes per operand tile
};
using ElemBF16 = Elem<__nv_bfloat16, __nv_bfloat16, false>;
using ElemF16 = Elem<__half, __half, false>;
using ElemF32 = Elem<__half, float, true>;

// ---------------------------------------------------------------------------------------------
// Which kernel family a call runs: the Hopper wgmma kernels on sm_90 for the 64 and 128 head-dim
// buckets, mma.sync elsewhere. One definition for the launchers (fa_launch.cuh), the split-KV
// heuristic and smem_needs() (fa_api.cu). FA_NO_WGMMA_BWD builds without the wgmma backward.
// ---------------------------------------------------------------------------------------------
constexpr bool has_wgmma_fwd(int D) { return D == 64 || D == 128; }
constexpr bool has_wgmma_bwd(int D) {
#ifdef FA_NO_WGMMA_BWD
  return false;
#else
  return D == 64 || D == 128;
#endif
}
constexpr bool runs_wgmma_fwd(int arch, int D) { return arch == 90 && has_wgmma_fwd(D); }
constexpr bool runs_wgmma_bwd(int arch, int D, int no_wgmma_bwd) { return arch == 90 && has_wgmma_bwd(D) && !no_wgmma_bwd; }

// ---------------------------------------------------------------------------------------------
// mma.sync forward (fa_fwd.cuh): BM = 16 * NW * MT query rows per CTA (each warp owns MT row
// tiles of 16), BN keys per step; QREG keeps Q's fragments in registers (only with MT == 1).
// ---------------------------------------------------------------------------------------------
template <int D_, int BM_, int BN_, int NW_, int MT_, bool QREG_>
struct FwdCfg {
  static constexpr int D = D_, BM = BM_, BN = BN_, NW = NW_, MT = MT_;
  static constexpr bool QREG = QREG_;
  static_assert(BM == 16 * NW * MT, "rows per CTA");
};
template <int D, bool SPLIT>
struct FwdTraits;
template <> struct FwdTraits<64, false> : FwdCfg<64, 64, 128, 4, 1, true> {};
template <> struct FwdTraits<128, false> : FwdCfg<128, 128, 64, 8, 1, true> {};
template <> struct FwdTraits<256, false> : FwdCfg<256, 64, 32, 4, 1, false> {};
// split: two planes per tile, so smaller tiles (D = 128: 160 KiB, fits an A100) and Q from smem
template <> struct FwdTraits<64, true> : FwdCfg<64, 64, 64, 4, 1, false> {};
template <> struct FwdTraits<128, true> : FwdCfg<128, 64, 64, 4, 1, false> {};
template <> struct FwdTraits<256, true> : FwdCfg<256, 64, 32, 4, 1, false> {};

// ---------------------------------------------------------------------------------------------
// wgmma forward with cp.async loads (fa_fwd_wgmma.cuh; on sm_90 the split f32 path and the
// fallback of the TMA kernel): NWG warpgroups of 64 query rows, BN keys per step, STAGES K/V
// buffers.
// ---------------------------------------------------------------------------------------------
template <int D_, int BN_, int NWG_, int STAGES_ = 2>
struct FwdWgCfg {
  static constexpr int D = D_, BN = BN_, NWG = NWG_, BM = 64 * NWG_, STAGES = STAGES_;
};
template <int D, bool SPLIT>
struct FwdWgTraits;
template <> struct FwdWgTraits<64, false> : FwdWgCfg<64, 128, 2, 4> {};
template <> struct FwdWgTraits<128, false> : FwdWgCfg<128, 128, 2, 2> {};
// split: D = 64 160 KiB, D = 128 192 KiB (BN 64 keeps S, P and O in registers)
template <> struct FwdWgTraits<64, true> : FwdWgCfg<64, 128, 2, 2> {};
template <> struct FwdWgTraits<128, true> : FwdWgCfg<128, 64, 2, 2> {};

// ---------------------------------------------------------------------------------------------
// Warp-specialised TMA forward (fa_fwd_tma.cuh), Hopper, 16-bit operands: a producer warpgroup
// and two consumer warpgroups of 64 query rows (BM = 128), BN keys per tile, STAGES-deep K and V
// rings. PING: the consumers take turns issuing their products (ping-pong). Registers are moved
// from the producer to the consumers (setmaxnreg): 40 + 2 x 232 per thread-slot of 128 fits the
// 64K register file with 384 threads.
// ---------------------------------------------------------------------------------------------
// PERSIST: one CTA per SM taking tiles from a counter (FaArgs::tile_counter) instead of one CTA a tile.
// PARTS (dev harness only, 0 in the library): 1 leaves the masks out, 2 the O store (wrong results).
// ORDER 1: without a mask, the tile list runs over one head's query tiles before the next head's
// (0: heads fastest, as under a mask).
// STORE: whole tiles leave through shared memory and TMA stores (an O tile of BM x D 16-bit
// elements more shared memory), the others by the threads' own stores.
template <int D_, int BN_, int STAGES_, bool PING_ = true, int NC_ = 2, bool PERSIST_ = true, int PARTS_ = 0, int ORDER_ = 1, bool STORE_ = true>
struct FwdTmaCfg {
  static constexpr int D = D_, BN = BN_, STAGES = STAGES_, NC = NC_, PARTS = PARTS_, ORDER = ORDER_;  // NC consumer warpgroups
  static constexpr bool STORE = STORE_;
  static constexpr int BM = 64 * NC, NT = 128 * (NC + 1);
  static constexpr bool PING = PING_, PERSIST = PERSIST_;
  // 64K registers: 40 + 2 x 232 (x 128 threads) with two consumers, 24 + 3 x 160 with three
  static constexpr int PRODUCER_REGS = NC == 2 ? 40 : 24, CONSUMER_REGS = NC == 2 ? 232 : 160;
  static_assert(NC == 2 || NC == 3, "two or three consumer warpgroups");
};
template <int D>
struct FwdTmaTraits;
template <> struct FwdTmaTraits<64> : FwdTmaCfg<64, 128, 4> {};    // 160 KiB with the O tile
template <> struct FwdTmaTraits<128> : FwdTmaCfg<128, 128, 2> {};  // 192 KiB with the O tile
template <> struct FwdTmaTraits<256> : FwdTmaCfg<256, 64, 2, true, 2, true, 0, 1, false> {};  // 192 KiB (O takes 128 registers; no room for an O tile)
// D = 64 without a mask (no causal, no window) and queries of 4K and more: three consumer
// warpgroups, 192 query rows (H200 runs 21 and 23: +5-12 % over two at T >= 4K; with a causal mask
// the 192-row diagonal tiles cost more than they give, and at T <= 2K the partial last tile does).
struct FwdTmaWide64 : FwdTmaCfg<64, 128, 4, true, 3> {};  // 176 KiB with the O tile
constexpr bool tma_fwd_wide(int D, int win_left, int win_right, int max_tq) {
  return D == 64 && win_left < 0 && win_right < 0 && max_tq >= 4096;
}
// Which calls run it: sm_90, f16/bf16 (split f32 keeps fa_fwd_wgmma.cuh), every head-dim bucket.
// FA_NO_TMA_FWD builds without it.
constexpr bool runs_tma_fwd(int arch, bool split) {
#ifdef FA_NO_TMA_FWD
  return false;
#else
  return arch == 90 && !split;
#endif
}

// ---------------------------------------------------------------------------------------------
// mma.sync backward (fa_bwd.cuh): a CTA owns BN keys; WK warps along keys (16 keys each), NW / WK
// along the query / head-dim direction. BM query rows per inner step.
// ---------------------------------------------------------------------------------------------
template <int D_, int BM_, int BN_, int NW_, int WK_>
struct BwdCfg {
  static constexpr int D = D_, BM = BM_, BN = BN_, NW = NW_, WK = WK_;
};
template <int D, bool SPLIT>
struct BwdTraits;
template <> struct BwdTraits<64, false> : BwdCfg<64, 64, 128, 8, 8> {};
template <> struct BwdTraits<128, false> : BwdCfg<128, 64, 128, 8, 8> {};
template <> struct BwdTraits<256, false> : BwdCfg<256, 64, 64, 8, 4> {};
template <> struct BwdTraits<64, true> : BwdCfg<64, 64, 64, 4, 4> {};
template <> struct BwdTraits<128, true> : BwdCfg<128, 32, 64, 8, 4> {};
template <> struct BwdTraits<256, true> : BwdCfg<256, 32, 32, 4, 2> {};

// ---------------------------------------------------------------------------------------------
// wgmma backward (fa_bwd_wgmma.cuh): BN keys per CTA in KG = BN / 64 key groups (64 keys = the
// wgmma M), BM queries per step; the NWG warpgroups split into KG key groups x QG query groups
// of QW = BM / QG queries. QG > 1 adds the warpgroups' partial dK, dV at the end.
// ---------------------------------------------------------------------------------------------
// UNSWITCH writes the P/dS loop twice in the source (plain scores, and soft-cap/ALiBi ones). nvcc
// unswitches it by itself for bf16 at D = 128 (and the explicit form there makes it unswitch on
// `deterministic` too: twice the code and spills); at D = 64 it did not, and the branchy loop cost
// 40% of the bf16 backward (H200 run 12: 142 against 233 TFLOP/s). Checked in the SASS: one copy
// of the loop with one exp2 per element, one with two.
template <int D_, int BN_, int BM_, int NWG_, bool UNSWITCH_ = true>
struct BwdWgCfg {
  static constexpr int D = D_, BN = BN_, BM = BM_, NWG = NWG_;
  static constexpr int KG = BN / 64, QG = NWG / KG, QW = BM / QG;
  static constexpr bool UNSWITCH = UNSWITCH_;
  static_assert(BN % 64 == 0 && NWG % KG == 0 && BM % QG == 0 && QW % 16 == 0, "warpgroup split");
};
template <int D, bool SPLIT>
struct BwdWgTraits;
template <> struct BwdWgTraits<64, false> : BwdWgCfg<64, 128, 64, 2> {};
template <> struct BwdWgTraits<128, false> : BwdWgCfg<128, 128, 64, 2, false> {};
// split: 64 keys shared by both warpgroups, 32 queries each (D = 128: 209 KiB)
template <> struct BwdWgTraits<64, true> : BwdWgCfg<64, 64, 64, 2> {};
template <> struct BwdWgTraits<128, true> : BwdWgCfg<128, 64, 64, 2> {};

// ---------------------------------------------------------------------------------------------
// Warp-specialised TMA backward (fa_bwd_tma.cuh), Hopper, 16-bit operands: a producer warpgroup
// and two consumer warpgroups of 64 keys (BN = 128), BM queries per step, STAGES-deep Q and dO
// rings. The consumers hold dK and dV (D floats per thread), S^T and dP^T (BM / 2 each) and the
// dQ product (32): 24 + 2 x 240 registers per thread-slot of 128 fits the 64K register file.
// ---------------------------------------------------------------------------------------------
// DQ_BULK: dQ goes through shared memory and one bulk reduction per warpgroup and step into the
// tiled accumulator (fa_dq_tiles.cuh); otherwise vector atomics into [total_q, H, d].
// PARTS (dev harness only, 0 in the library): parts of a step left out to time the rest
// (KERNEL_NOTES "Where a backward step's time goes"): 1 the dQ additions, 2 dS^T and the whole dQ,
// 4 the P/dS element math, 8 (DQ_BULK) the bulk reductions but not the hand-over, 16 the dV and
// dK products. Results are wrong whenever PARTS != 0.
// PERSIST: one CTA per SM taking tiles from a counter (FaArgs::tile_counter) instead of one CTA a tile.
// PLAIN_KERNEL: calls without soft-cap and ALiBi run an instance whose loop holds only the plain
// element math (the other instance keeps both copies, chosen per head at run time).
// STAGGER: a key block that sees at most STAGGER query tiles (0: none) starts its walk over them
// n tiles in (key block n; non-deterministic calls), so that the CTAs of one head do not read and
// add the same tile at the same moment (run 55: +5-15 % at T 1K-2K, +-3 % at 4K-16K: not there).
// EARLY_ROWS: the producer reads a step's LSE and Dsum rows (plain loads) before it waits for the
// ring slot they go to, not after.
// STSM: dS^T goes to shared memory by stmatrix (4 per k-step and warp) instead of 4-byte stores.
// ORDER k (masked calls that are not deterministic): the tile list ends with kv heads fastest over
// enough heads for k tiles an SM, so that the grid ends on short walks (fa_bwd_tma.cuh); 0: key
// blocks fastest throughout.
// DQ_WRITERS (DQ_BULK): dQ writer warps, taking steps in turn, each with its own dQ blocks in shared
// memory (D = 128 with two: 225 KiB).
template <int D_, int BM_, int STAGES_ = 2, bool DQ_BULK_ = true, int PARTS_ = 0, bool PERSIST_ = true, bool PLAIN_KERNEL_ = false,
          int STAGGER_ = 0, bool EARLY_ROWS_ = true, int DQ_WRITERS_ = 1, bool STSM_ = true>
struct BwdTmaCfg {
  static constexpr int D = D_, BN = 128, BM = BM_, STAGES = STAGES_, PARTS = PARTS_, STAGGER = STAGGER_, DQ_WRITERS = DQ_WRITERS_;
  static constexpr bool DQ_BULK = DQ_BULK_, PERSIST = PERSIST_, PLAIN_KERNEL = PLAIN_KERNEL_, EARLY_ROWS = EARLY_ROWS_, STSM = STSM_;
  static_assert(BM % 32 == 0, "the producer warp reads BM / 32 statistics a lane");
  static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240, ORDER = 2;
};
template <int D>
struct BwdTmaTraits;
template <> struct BwdTmaTraits<64> : BwdTmaCfg<64, 64, 2, true, 0, true, false, 32, true, 2> {};   // 129 KiB
template <> struct BwdTmaTraits<128> : BwdTmaCfg<128, 64, 2, true, 0, true, true, 32, true, 2> {};  // 225 KiB
constexpr bool has_tma_bwd(int D) { return D == 64 || D == 128; }
// Which calls run it: sm_90, f16/bf16 (split f32 keeps fa_bwd_wgmma.cuh), D = 64 and 128, unless
// the call asks for the mma.sync backward. FA_NO_TMA_BWD builds without it.
constexpr bool runs_tma_bwd(int arch, bool split, int D, int no_wgmma_bwd) {
#ifdef FA_NO_TMA_BWD
  return false;
#else
  return arch == 90 && !split && has_tma_bwd(D) && !no_wgmma_bwd;
#endif
}

// ---------------------------------------------------------------------------------------------
// The deterministic dQ kernel (fa_bwd.cuh): a CTA owns BM query rows (16 per warp) and walks the
// key tiles, BN keys at a time.
// ---------------------------------------------------------------------------------------------
template <int BM_, int BN_, int NW_>
struct DqCfg {
  static constexpr int BM = BM_, BN = BN_, NW = NW_;
  static_assert(BM == 16 * NW, "16 query rows per warp");
};
template <int D, bool SPLIT>
struct DqTraits;
template <> struct DqTraits<64, false> : DqCfg<64, 64, 4> {};
template <> struct DqTraits<128, false> : DqCfg<64, 64, 4> {};
template <> struct DqTraits<256, false> : DqCfg<64, 32, 4> {};
template <> struct DqTraits<64, true> : DqCfg<64, 64, 4> {};
template <> struct DqTraits<128, true> : DqCfg<64, 32, 4> {};
template <> struct DqTraits<256, true> : DqCfg<32, 32, 2> {};

// ---------------------------------------------------------------------------------------------
// FFMA f32 kernels (fa_ffma.cuh): any head dim d <= 256, NW warps of ROWS query (or key) rows,
// BN keys (or queries) per step; one lane per key for the dot products, one lane per column for
// the accumulators.
// ---------------------------------------------------------------------------------------------
struct FfmaTraits {
  static constexpr int NW = 4, ROWS = 4, BM = NW * ROWS, BN = 32, MC = 8;  // MC: columns per lane (d <= 32 MC)
};

}  // namespace fa
