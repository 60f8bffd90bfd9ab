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
#include "fa_fwd_softmax.cuh"

namespace fa {

// The loop over the key tiles j = 0..n-1 of one CTA (software-pipelined): per tile, issue
// S_j = Q K_j^T and O += P_{j-1} V_{j-1} together; wait for S_j only; run the softmax of S_j
// while the PV product of the previous tile is still on the tensor cores; then wait for it and
// rescale O by alpha_j. One barrier per tile. P_{j-1} stays in registers until its product
// retires. The order of the arithmetic is that of the plain loop:
// O_j = alpha_j (O_{j-1} + P_{j-1} V_{j-1}). Loads run ST - 1 tiles ahead for K and ST - 2 for V:
// at tile j the kernel loads K_{j+ST-1} into the buffer of K_{j-1} and V_{j+ST-2} into that of
// V_{j-2}, both retired before the barrier that starts tile j. (The plain loop with three
// barriers per tile, W0, was 11-13 % slower: KERNEL_NOTES.md.)
template <typename E, typename Tr>
__global__ void __launch_bounds__(Tr::NWG * 128, 1) fwd_wgmma_kernel(FaArgs a, FaTensors t) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // ---- roles and sizes --------------------------------------------------------------------
  using T = typename E::T;
  constexpr int NP = E::NP;
  constexpr int D = Tr::D, BN = Tr::BN, NWG = Tr::NWG, BM = Tr::BM, NT = NWG * 128;
  constexpr int NS = BN / 2, NO = D / 2;  // S and O accumulator floats per thread

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // [NP][BM][D]
  T* sK = sQ + NP * BM * D;                // [STAGES][NP][BN][D]
  T* sV = sK + Tr::STAGES * NP * BN * D;   // [STAGES][NP][BN][D]

  const int tid = threadIdx.x, wgi = tid / 128;
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
  using Rows = WgFwdRows<E, D, BN, BM>;
  Rows rows(a, s, b, h, m0, wgi * 64, tid % 128);

  int nb_lo, nb_hi;
  key_block_range(a, s, m0, BM, BN, &nb_lo, &nb_hi);
  split_key_range(a, split, &nb_lo, &nb_hi);

  constexpr int ST = Tr::STAGES;
  const int n_tiles = nb_hi - nb_lo;
  auto tile_of = [&](int idx) { return nb_lo + idx; };
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
  // this warpgroup's 64 rows in column block 0 of plane 0
  const uint32_t q_addr = smem_u32(sQ) + wgi * 64 * 64 * 2;
  auto issue_qk = [&](float* sc, int buf) { Rows::issue_qk(sc, q_addr, smem_u32(sK + buf * NP * BN * D)); };
  auto issue_pv = [&](typename Rows::PFrag& pf, int buf) { Rows::issue_pv(o, pf, smem_u32(sV + buf * NP * BN * D)); };

  typename Rows::PFrag pf;
  float sc[NS], alpha[2];
  {
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
      issue_qk(sc, idx % ST);
      if (idx > 0) {
        issue_pv(pf, (idx - 1) % ST);
        wg::wait<1>();  // S_idx is done; P_{idx-1} V_{idx-1} may still run
      } else {
        wg::wait<0>();
      }
      wg::fence_operands<NS>(sc);
      rows.prepare(sc, tile_of(idx));
      rows.step(sc, alpha);
      wg::wait<0>();
      wg::fence_operands<NO>(o);
      Rows::fence_p(pf);
      Rows::rescale_o(o, alpha);
      Rows::pack_p(sc, pf);
    }
    cp_async_wait<0>();
    if (n_tiles > 0) {  // the last tile's P V
      wg::fence_proxy_async();
      __syncthreads();
      wg::fence_operands<NO>(o);
      issue_pv(pf, (n_tiles - 1) % ST);
      wg::wait<0>();
      wg::fence_operands<NO>(o);
    }
  }

  // ---- epilogue -----------------------------------------------------------------------------
  rows.store(t, b, h, split, o);
#else
  __trap();
#endif
}

}  // namespace fa
