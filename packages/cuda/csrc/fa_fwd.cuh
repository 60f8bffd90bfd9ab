// Forward attention, FlashAttention-2 style, on mma.sync tensor cores.
//
// A CTA owns BM query rows of one (sequence, head); each warp owns 16 of them. The CTA walks
// the key/value tiles that its rows may see (BN keys each), double-buffered with cp.async into
// swizzled shared memory, and keeps the running max, the running sum and the output
// accumulator in registers (float32). With num_splits > 1 (flash-decoding) the key range is
// cut into splits whose partial results are merged by fwd_combine_kernel through their LSE.
#pragma once
#include "fa_common.cuh"

namespace fa {

template <typename T, typename Tr>
__global__ void __launch_bounds__(Tr::NW * 32, 1) fwd_kernel(FaArgs a, FaTensors t) {
  // ---- roles and sizes --------------------------------------------------------------------
  constexpr int D = Tr::D, BM = Tr::BM, BN = Tr::BN, NW = Tr::NW, MT = Tr::MT, NT = NW * 32;
  constexpr bool QREG = Tr::QREG;
  static_assert(!QREG || MT == 1, "Q in registers only with one row tile per warp");
  constexpr int NTN = BN / 8;   // n8 tiles of S per row tile (16 x BN)
  constexpr int NTD = D / 8;    // n8 tiles of O per row tile (16 x D)
  constexpr int KSD = D / 16;   // k16 steps over the head dim
  constexpr int KSN = BN / 16;  // k16 steps over keys
  using M = Mma<T>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + BM * D;      // [2][BN][D]
  T* sV = sK + 2 * BN * D;  // [2][BN][D]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m_block = blockIdx.x, h = blockIdx.y;
  const int b = blockIdx.z / a.num_splits, split = blockIdx.z % a.num_splits;
  const SeqInfo s = seq_info(a, b);
  const int m0 = m_block * BM;
  if (m0 >= s.tq) return;
  const int hk = h / (a.H / a.Hkv);
  const int64_t ldq = static_cast<int64_t>(a.H) * a.d, ldk = static_cast<int64_t>(a.Hkv) * a.d;
  const T* Qg = static_cast<const T*>(t.q) + (s.q0 + m0) * ldq + static_cast<int64_t>(h) * a.d;
  const T* Kg = static_cast<const T*>(t.k) + s.k0 * ldk + static_cast<int64_t>(hk) * a.d;
  const T* Vg = static_cast<const T*>(t.v) + s.k0 * ldk + static_cast<int64_t>(hk) * a.d;
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  const bool plain = a.softcap <= 0.f && slope == 0.f;
  const float scale_log2 = a.scale * kLog2e;

  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);
  if (a.num_splits > 1) {
    const int per = (nb_hi - nb_lo + a.num_splits - 1) / a.num_splits;
    const int lo = nb_lo + split * per;
    nb_hi = min(nb_hi, lo + per);
    nb_lo = min(lo, nb_hi);
  }

  // ---- prologue: Q, then K/V of the first tile ----------------------------------------------
  load_tile<BM, D, NT>(sQ, Qg, ldq, s.tq - m0, a.d, tid);
  if (nb_lo < nb_hi) load_tile<BN, D, NT>(sK, Kg + nb_lo * BN * ldk, ldk, s.tk - nb_lo * BN, a.d, tid);
  cp_async_commit();
  if (nb_lo < nb_hi) load_tile<BN, D, NT>(sV, Vg + nb_lo * BN * ldk, ldk, s.tk - nb_lo * BN, a.d, tid);
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
    const T* sKb = sK + buf * BN * D;
    const T* sVb = sV + buf * BN * D;
    // Prefetch the next tile into the other buffer (freed by the barrier at the end of the last
    // iteration). Empty commit groups keep the wait counts uniform.
    if (nb + 1 < nb_hi) {
      const int n1 = (nb + 1) * BN;
      load_tile<BN, D, NT>(sK + (buf ^ 1) * BN * D, Kg + n1 * ldk, ldk, s.tk - n1, a.d, tid);
    }
    cp_async_commit();
    if (nb + 1 < nb_hi) {
      const int n1 = (nb + 1) * BN;
      load_tile<BN, D, NT>(sV + (buf ^ 1) * BN * D, Vg + n1 * ldk, ldk, s.tk - n1, a.d, tid);
    }
    cp_async_commit();
    cp_async_wait<3>();  // K of this tile (and Q) have landed
    __syncthreads();

    if (QREG && nb == nb_lo) {
#pragma unroll
      for (int ks = 0; ks < (QREG ? KSD : 1); ++ks)
        ldsm_x4(qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], sQ + swz<D>(warp * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
    }

    // ---- S = Q K^T (MT x 16 x BN per warp) -------------------------------------------------
    float sc[MT][NTN][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NTN; ++i) sc[mt][i][0] = sc[mt][i][1] = sc[mt][i][2] = sc[mt][i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSD; ++ks) {
      uint32_t af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (QREG) {
          af[mt][0] = qf[ks][0]; af[mt][1] = qf[ks][1]; af[mt][2] = qf[ks][2]; af[mt][3] = qf[ks][3];
        } else {
          ldsm_x4(af[mt][0], af[mt][1], af[mt][2], af[mt][3], sQ + swz<D>((mt * NW + warp) * 16 + (lane & 15), ks * 16 + (lane >> 4) * 8));
        }
      }
#pragma unroll
      for (int n2 = 0; n2 < NTN / 2; ++n2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, sKb + swz<D>(n2 * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          M::run(sc[mt][2 * n2], af[mt], b0, b1);
          M::run(sc[mt][2 * n2 + 1], af[mt], b2, b3);
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
          for (int e = 0; e < 4; ++e) sc[mt][i][e] *= scale_log2;
      } else {
#pragma unroll
        for (int i = 0; i < NTN; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            sc[mt][i][e] = score_log2(a, sc[mt][i][e], slope, r_lo + (e >> 1) * 8, n0 + i * 8 + 2 * (lane & 3) + (e & 1), s.off, nullptr);
      }
      if (need_mask) {
#pragma unroll
        for (int i = 0; i < NTN; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!visible(a, s, r_lo + (e >> 1) * 8, n0 + i * 8 + 2 * (lane & 3) + (e & 1))) sc[mt][i][e] = -INFINITY;
      }

      // ---- online softmax ---------------------------------------------------------------------
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float mx = row_max[mt][rr];
#pragma unroll
        for (int i = 0; i < NTN; ++i) mx = fmaxf(mx, fmaxf(sc[mt][i][2 * rr], sc[mt][i][2 * rr + 1]));
        mx = quad_max(mx);
        const float m_use = mx == -INFINITY ? 0.f : mx;
        const float alpha = exp2f(row_max[mt][rr] - m_use);  // 0 when the old max is -inf
        row_max[mt][rr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < NTN; ++i) {
          sc[mt][i][2 * rr] = exp2f(sc[mt][i][2 * rr] - m_use);
          sc[mt][i][2 * rr + 1] = exp2f(sc[mt][i][2 * rr + 1] - m_use);
          sum += sc[mt][i][2 * rr] + sc[mt][i][2 * rr + 1];
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
      uint32_t pf[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pf[mt][0] = M::pack(sc[mt][2 * ks][0], sc[mt][2 * ks][1]);
        pf[mt][1] = M::pack(sc[mt][2 * ks][2], sc[mt][2 * ks][3]);
        pf[mt][2] = M::pack(sc[mt][2 * ks + 1][0], sc[mt][2 * ks + 1][1]);
        pf[mt][3] = M::pack(sc[mt][2 * ks + 1][2], sc[mt][2 * ks + 1][3]);
      }
#pragma unroll
      for (int d2 = 0; d2 < NTD / 2; ++d2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, sVb + swz<D>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, d2 * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          M::run(o[mt][2 * d2], pf[mt], b0, b1);
          M::run(o[mt][2 * d2 + 1], pf[mt], b2, b3);
        }
      }
    }
    __syncthreads();  // this tile's buffers may be refilled now
  }
  cp_async_wait<0>();

  // ---- epilogue -----------------------------------------------------------------------------
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    store_forward_rows<T, NTD>(a, t, s, b, h, split, ldq, m0 + (mt * NW + warp) * 16 + (lane >> 2), lane, &o[mt][0][0], row_max[mt], row_sum[mt]);
}

// Merges split-KV partial results: one warp per (packed row, head).
template <typename T>
__global__ void fwd_combine_kernel(FaArgs a, FaTensors t) {
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
  for (int c = lane; c < a.d; c += 32) {
    float acc = 0.f;
    for (int sp = 0; sp < S; ++sp) {
      const float l = a.lseaccum[(static_cast<int64_t>(sp) * a.H + h) * a.total_q + row];
      const float w = (sum == 0.f) ? 0.f : expf(l - lse);
      const float ov = a.oaccum[((static_cast<int64_t>(sp) * a.total_q + row) * a.H + h) * a.d + c];
      if (w != 0.f || ov != ov) acc += w * ov;  // skips 0 * (empty split) but keeps NaN
    }
    static_cast<T*>(t.o)[(static_cast<int64_t>(row) * a.H + h) * a.d + c] = Mma<T>::from_float(acc);
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
