// Forward attention, FlashAttention-2 style, on mma.sync tensor cores, for every element policy
// (fa_traits.cuh: f16, bf16, and split f32 with three products per MMA).
//
// A CTA owns BM query rows of one (sequence, head); each warp owns 16 of them. The CTA walks
// the key/value tiles that its rows may see (BN keys each), double-buffered with cp.async into
// swizzled shared memory, and keeps the running max, the running sum and the output
// accumulator in registers (float32). With num_splits > 1 (flash-decoding) the key range is
// cut into splits whose partial results are merged by fwd_combine_kernel through their LSE.
#pragma once
#include "fa_common.cuh"

namespace fa {

template <typename E, typename Tr>
__global__ void __launch_bounds__(Tr::NW * 32, 1) fwd_kernel(FaArgs a, FaTensors t) {
  // ---- roles and sizes --------------------------------------------------------------------
  using T = typename E::T;
  constexpr int NP = E::NP;
  constexpr int D = Tr::D, BM = Tr::BM, BN = Tr::BN, NW = Tr::NW, MT = Tr::MT, NT = NW * 32;
  constexpr bool QREG = Tr::QREG;
  static_assert(!QREG || (MT == 1 && NP == 1), "Q in registers only with one row tile per warp and one plane");
  constexpr int NTN = BN / 8;   // n8 tiles of S per row tile (16 x BN)
  constexpr int NTD = D / 8;    // n8 tiles of O per row tile (16 x D)
  constexpr int KSD = D / 16;   // k16 steps over the head dim
  constexpr int KSN = BN / 16;  // k16 steps over keys

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [NP][BM][D]
  T* sK = sQ + NP * BM * D;                // [2][NP][BN][D]
  T* sV = sK + 2 * NP * BN * D;            // [2][NP][BN][D]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
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
  const SplitScales sc = split_scales<E>(a);
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  const bool plain = a.softcap <= 0.f && slope == 0.f;
  const float scale_log2 = a.scale * kLog2e * sc.qk;

  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);
  if (a.num_splits > 1) {
    const int per = (nb_hi - nb_lo + a.num_splits - 1) / a.num_splits;
    const int lo = nb_lo + split * per;
    nb_hi = min(nb_hi, lo + per);
    nb_lo = min(lo, nb_hi);
  }
  auto load_kv = [&](const T* const* G, T* dst, int nb) {  // one tile of K or V, every plane
#pragma unroll
    for (int p = 0; p < NP; ++p) load_tile<BN, D, NT>(dst + p * BN * D, G[p] + nb * BN * ldk, ldk, s.tk - nb * BN, a.d, tid);
  };

  // ---- prologue: Q, then K/V of the first tile ----------------------------------------------
#pragma unroll
  for (int p = 0; p < NP; ++p) load_tile<BM, D, NT>(sQ + p * BM * D, Qg[p], ldq, s.tq - m0, a.d, tid);
  if (nb_lo < nb_hi) load_kv(Kg, sK, nb_lo);
  cp_async_commit();
  if (nb_lo < nb_hi) load_kv(Vg, sV, nb_lo);
  cp_async_commit();

  uint32_t qf[QREG ? KSD : 1][4];
  float o[MT][NTD][4];
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < NTD; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  // row tile mt of this warp starts at local row (mt * NW + warp) * 16

  for (int nb = nb_lo; nb < nb_hi; ++nb) {
    const int buf = (nb - nb_lo) & 1;
    const T* sKb = sK + buf * NP * BN * D;
    const T* sVb = sV + buf * NP * BN * D;
    // Prefetch the next tile into the other buffer (freed by the barrier at the end of the last
    // iteration). Empty commit groups keep the wait counts uniform.
    if (nb + 1 < nb_hi) load_kv(Kg, sK + (buf ^ 1) * NP * BN * D, nb + 1);
    cp_async_commit();
    if (nb + 1 < nb_hi) load_kv(Vg, sV + (buf ^ 1) * NP * BN * D, nb + 1);
    cp_async_commit();
    cp_async_wait<3>();  // K of this tile (and Q) have landed
    __syncthreads();

    if (QREG && nb == nb_lo) {
#pragma unroll
      for (int ks = 0; ks < (QREG ? KSD : 1); ++ks)
        ldsm_x4(qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], sQ + swz<D>(warp * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
    }

    // ---- S = Q K^T (MT x 16 x BN per warp) -------------------------------------------------
    float sc4[MT][NTN][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NTN; ++i) sc4[mt][i][0] = sc4[mt][i][1] = sc4[mt][i][2] = sc4[mt][i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSD; ++ks) {
      uint32_t af[MT][NP][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (QREG) {
          af[mt][0][0] = qf[ks][0]; af[mt][0][1] = qf[ks][1]; af[mt][0][2] = qf[ks][2]; af[mt][0][3] = qf[ks][3];
        } else {
#pragma unroll
          for (int p = 0; p < NP; ++p)
            ldsm_x4(af[mt][p][0], af[mt][p][1], af[mt][p][2], af[mt][p][3], sQ + p * BM * D + swz<D>((mt * NW + warp) * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
        }
      }
#pragma unroll
      for (int n2 = 0; n2 < NTN / 2; ++n2) {
        uint32_t bf[NP][4];
#pragma unroll
        for (int p = 0; p < NP; ++p)
          ldsm_x4(bf[p][0], bf[p][1], bf[p][2], bf[p][3], sKb + p * BN * D + swz<D>(n2 * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_e<E>(sc4[mt][2 * n2], af[mt], bf, 0);
          mma_e<E>(sc4[mt][2 * n2 + 1], af[mt], bf, 1);
        }
      }
    }

    // ---- scores in log2 units, masked ---------------------------------------------------------
    const int n0 = nb * BN;
    const bool need_mask = tile_needs_mask(a, s, m0, BM, n0, BN);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r_lo = m0 + (mt * NW + warp) * 16 + (lane >> 2);
      if (plain) {
#pragma unroll
        for (int i = 0; i < NTN; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc4[mt][i][e] *= scale_log2;
      } else {
#pragma unroll
        for (int i = 0; i < NTN; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            sc4[mt][i][e] = score_log2(a, sc4[mt][i][e] * sc.qk, slope, r_lo + (e >> 1) * 8, n0 + i * 8 + 2 * (lane & 3) + (e & 1), s.off, nullptr);
      }
      if (need_mask) {
#pragma unroll
        for (int i = 0; i < NTN; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!visible(a, s, r_lo + (e >> 1) * 8, n0 + i * 8 + 2 * (lane & 3) + (e & 1))) sc4[mt][i][e] = -INFINITY;
      }

      // ---- online softmax ---------------------------------------------------------------------
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float mx = row_max[mt][rr];
#pragma unroll
        for (int i = 0; i < NTN; ++i) mx = fmaxf(mx, fmaxf(sc4[mt][i][2 * rr], sc4[mt][i][2 * rr + 1]));
        mx = quad_max(mx);
        const float m_use = mx == -INFINITY ? 0.f : mx;
        const float alpha = exp2f(row_max[mt][rr] - m_use);  // 0 when the old max is -inf
        row_max[mt][rr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < NTN; ++i) {
          sc4[mt][i][2 * rr] = exp2f(sc4[mt][i][2 * rr] - m_use);
          sc4[mt][i][2 * rr + 1] = exp2f(sc4[mt][i][2 * rr + 1] - m_use);
          sum += sc4[mt][i][2 * rr] + sc4[mt][i][2 * rr + 1];
        }
        row_sum[mt][rr] = row_sum[mt][rr] * alpha + sum;
#pragma unroll
        for (int i = 0; i < NTD; ++i) {
          o[mt][i][2 * rr] *= alpha;
          o[mt][i][2 * rr + 1] *= alpha;
        }
      }
    }

    cp_async_wait<2>();  // V of this tile has landed
    __syncthreads();

    // ---- O += P V ---------------------------------------------------------------------------
#pragma unroll
    for (int ks = 0; ks < KSN; ++ks) {
      uint32_t pf[MT][NP][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pack_e<E>(sc4[mt][2 * ks][0], sc4[mt][2 * ks][1], kPScale, pf[mt][0][0], pf[mt][NP - 1][0]);
        pack_e<E>(sc4[mt][2 * ks][2], sc4[mt][2 * ks][3], kPScale, pf[mt][0][1], pf[mt][NP - 1][1]);
        pack_e<E>(sc4[mt][2 * ks + 1][0], sc4[mt][2 * ks + 1][1], kPScale, pf[mt][0][2], pf[mt][NP - 1][2]);
        pack_e<E>(sc4[mt][2 * ks + 1][2], sc4[mt][2 * ks + 1][3], kPScale, pf[mt][0][3], pf[mt][NP - 1][3]);
      }
#pragma unroll
      for (int d2 = 0; d2 < NTD / 2; ++d2) {
        uint32_t bf[NP][4];
#pragma unroll
        for (int p = 0; p < NP; ++p)
          ldsm_x4_t(bf[p][0], bf[p][1], bf[p][2], bf[p][3], sVb + p * BN * D + swz<D>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, d2 * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_e<E>(o[mt][2 * d2], pf[mt], bf, 0);
          mma_e<E>(o[mt][2 * d2 + 1], pf[mt], bf, 1);
        }
      }
    }
    __syncthreads();  // this tile's buffers may be refilled now
  }
  cp_async_wait<0>();

  // ---- epilogue -----------------------------------------------------------------------------
  const float unscale = E::SPLIT ? sc.pv : 1.f;  // the split P carries kPScale
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    store_forward_rows<E, NTD>(a, t, s, b, h, split, m0 + (mt * NW + warp) * 16 + (lane >> 2), lane, &o[mt][0][0], row_max[mt], row_sum[mt], unscale);
}

// Merges split-KV partial results (kernel layout) into O (caller's layout and dtype): one warp per
// (packed row, head).
template <typename E>
__global__ void fwd_combine_kernel(FaArgs a, FaTensors t) {
  using TO = typename E::TO;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= static_cast<int64_t>(a.total_q) * a.H) return;
  const int row = static_cast<int>(item / a.H), h = static_cast<int>(item % a.H);
  const int S = a.num_splits;
  float lmax = -INFINITY;
  for (int sp = 0; sp < S; ++sp) lmax = fmaxf(lmax, a.lseaccum[(static_cast<int64_t>(sp) * a.H + h) * a.total_q + row]);
  const float lm = lmax == -INFINITY ? 0.f : lmax;
  float sum = 0.f;
  for (int sp = 0; sp < S; ++sp) sum += expf(a.lseaccum[(static_cast<int64_t>(sp) * a.H + h) * a.total_q + row] - lm);
  const float lse = sum == 0.f ? -INFINITY : lm + logf(sum);
  for (int c = lane; c < a.d_out; c += 32) {
    float acc = 0.f;
    for (int sp = 0; sp < S; ++sp) {
      const float l = a.lseaccum[(static_cast<int64_t>(sp) * a.H + h) * a.total_q + row];
      const float w = (sum == 0.f) ? 0.f : expf(l - lse);
      const float ov = a.oaccum[((static_cast<int64_t>(sp) * a.total_q + row) * a.H + h) * a.d + c];
      if (w != 0.f || ov != ov) acc += w * ov;  // skips 0 * (empty split) but keeps NaN
    }
    Out<TO>::one(static_cast<TO*>(t.o) + (static_cast<int64_t>(row) * a.H + h) * a.d_out + c, acc);
  }
  if (lane == 0) {
    int64_t idx;
    if (a.varlen) {
      idx = static_cast<int64_t>(h) * a.total_q + row;
    } else {
      const int b = row / a.max_tq, i = row % a.max_tq;
      idx = (static_cast<int64_t>(b) * a.H + h) * a.max_tq + i;
    }
    t.lse[idx] = lse;
  }
}

}  // namespace fa
