// KV-cache attention (issue 12): the in-place append, and flash-decoding over a contiguous or
// paged cache, on mma.sync tensor cores.
//
// Decode reads the cache once and does little arithmetic, so the kernel is built for bandwidth:
//  - GQA packing: a CTA owns one kv head g of one sequence and 16 query rows of the M tile formed
//    by the H/Hkv query heads that share g times the Tq queries (row r = query r / G, head
//    g·G + r % G). Each key row is read once for all of them.
//  - Each warp streams its own key tiles (BNW keys) through its own ST-stage cp.async ring in
//    shared memory (16-byte copies, swizzled rows), with no CTA barrier in the main loop, and
//    keeps its own online-softmax state; the NW warps' partial rows are merged once at the end.
//  - Paged reads: lane k of a warp resolves key k of a tile through the block table (the entry
//    for the tile after next is loaded one iteration ahead), and the row offsets are shuffled to
//    the lanes that copy that row, so any block size (1 included) costs one table read per key.
//  - Split-KV when B·Hkv·(M tiles) is small: the key tiles are cut into num_splits parts whose
//    partial (O, LSE) go to float32 workspace and are merged by fwd_combine_kernel (fa_fwd.cuh),
//    the split-KV combine of the dense forward, through the LSE.
// Scores follow fa_common.cuh (scale -> softcap -> ALiBi -> mask, log2 units); rows that see no
// key give out 0 and LSE -inf; NaN in a key the row sees propagates. f16/bf16 with d a multiple of
// 8 only (16-byte row copies); f32 and other head dims run kv_ffma_kernel (fa_kvcache_ffma.cuh).
#pragma once
#include "fa_kvcache_common.cuh"

namespace fa {

// NW warps per CTA; each streams BNW-key tiles through ST stages. MIN_BLOCKS: CTAs per SM the
// register budget is set for (__launch_bounds__).
template <int D_, int NW_, int BNW_, int ST_, int MIN_BLOCKS_>
struct KvCfg {
  static constexpr int D = D_, NW = NW_, BNW = BNW_, ST = ST_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int ROWS = 16;  // query rows per CTA: one m16 tile of the GQA-packed M
  static_assert(BNW % 16 == 0 && BNW <= 32, "a warp tile is 16 or 32 keys: lane k resolves key k");
  static_assert(D % 64 == 0, "rows are swizzled in 128-byte groups");
};
// The configuration per head dim: KvTraits where a block may use 128 KiB of shared memory (sm_80,
// sm_90), KvTraitsSmall elsewhere (sm_86/89: 99 KiB). On the H200 (KERNEL_NOTES.md, "KV cache"),
// 8 warps x 2 stages beat 4 warps x 3 stages (2 CTAs per SM) by up to 25% at B = 1.
template <int D>
struct KvTraits;
template <>
struct KvTraits<64> : KvCfg<64, 8, 32, 2, 1> {};    // 8 KB per warp stage, 128 KB per CTA
template <>
struct KvTraits<128> : KvCfg<128, 8, 16, 2, 1> {};  // 8 KB per warp stage, 128 KB per CTA
template <>
struct KvTraits<256> : KvCfg<256, 4, 16, 2, 1> {};  // 16 KB per warp stage, 128 KB per CTA
template <int D>
struct KvTraitsSmall;
template <>
struct KvTraitsSmall<64> : KvCfg<64, 4, 32, 3, 2> {};    // 96 KB per CTA
template <>
struct KvTraitsSmall<128> : KvCfg<128, 4, 16, 3, 2> {};  // 96 KB per CTA
template <>
struct KvTraitsSmall<256> : KvCfg<256, 2, 16, 2, 2> {};  // 64 KB per CTA

// Epilogue scratch (floats), laid over the pipeline's shared memory: per-warp partial rows
// [NW][16][D + 8] (padded against bank conflicts), then per-warp max, sum and weight [NW][16],
// then per-row LSE and "sees nothing" [16] each.
template <typename Tr>
constexpr int kv_epilogue_floats() { return Tr::NW * 16 * (Tr::D + 8) + 3 * Tr::NW * 16 + 2 * 16; }

template <typename Tr>
constexpr size_t kv_attn_smem_bytes() {
  const size_t pipe = static_cast<size_t>(Tr::NW) * Tr::ST * 2 * Tr::BNW * Tr::D * 2;
  const size_t epi = static_cast<size_t>(kv_epilogue_floats<Tr>()) * sizeof(float);
  return pipe > epi ? pipe : epi;
}

// Whether a GPU whose blocks may use `smem_optin` bytes of shared memory (0: unknown, assume
// enough) runs KvTraitsSmall<D>: the one rule for the launcher, the split choice and smem_needs.
template <int D>
constexpr bool kv_runs_small(size_t smem_optin) {
  return smem_optin != 0 && smem_optin < kv_attn_smem_bytes<KvTraits<D>>();
}

template <typename T, typename Tr>
__global__ void __launch_bounds__(Tr::NW * 32, Tr::MIN_BLOCKS) kv_attn_kernel(KvArgs a, KvTensors t) {
  constexpr int D = Tr::D, NW = Tr::NW, BNW = Tr::BNW, ST = Tr::ST, NT = NW * 32;
  constexpr int NTN = BNW / 8;    // n8 tiles of S per warp tile
  constexpr int NTD = D / 8;      // n8 tiles of O
  constexpr int KSD = D / 16;     // k16 steps over the head dim
  constexpr int KSN = BNW / 16;   // k16 steps over the keys of a warp tile
  constexpr int CPR = D / 8;      // 16-byte chunks per key row
  constexpr int RPI = 32 / CPR;   // key rows one load step covers (one chunk per lane)
  constexpr int LOADS = BNW / RPI;
  static_assert(CPR <= 32 && 32 % CPR == 0, "a load step covers whole rows");
  using M = Mma<T>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = static_cast<int>(blockIdx.x % a.num_splits), mt = static_cast<int>(blockIdx.x / a.num_splits);
  const int g = blockIdx.y, b = blockIdx.z;
  const int G = a.H / a.Hkv;
  const int rows = G * a.tq;  // the M of this (sequence, kv head); the binding keeps H·tq < 2^31
  const int m0 = mt * 16;
  const int tk = kv_keys(a, b);
  const int off = tk - a.tq;  // bottom-right alignment: query i sits at key position i + off

  // ---- this thread's two rows (lane / 4 and lane / 4 + 8 of the tile) and the CTA's key range ----
  int lo[2], hi[2], qi[2];
  float slope[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = m0 + (lane >> 2) + rr * 8;
    qi[rr] = r / G;
    const bool real = r < rows;
    lo[rr] = real ? kv_key_lo(a, qi[rr], off, tk) : 0;
    hi[rr] = real ? kv_key_hi(a, qi[rr], off, tk) : -1;
    slope[rr] = real && a.alibi ? a.alibi[static_cast<int64_t>(b) * a.H + g * G + r % G] : 0.f;
  }
  const int i_lo = m0 / G, i_hi = (min(m0 + 16, rows) - 1) / G;
  const int klo = kv_key_lo(a, i_lo, off, tk), khi = kv_key_hi(a, i_hi, off, tk);  // keys some row sees
  const int kin_lo = kv_key_lo(a, i_hi, off, tk), kin_hi = kv_key_hi(a, i_lo, off, tk);  // keys every row sees

  // ---- this split's warp tiles, and this warp's share (tiles s_lo + warp, + NW, ...) ----------
  const KvWarpKeys<NW, BNW> keys(a, split, b, g, warp, lane, klo, khi);

  const T* Kc = static_cast<const T*>(t.k_cache);
  const T* Vc = static_cast<const T*>(t.v_cache);
  T* sWarp = reinterpret_cast<T*>(smem_raw) + warp * ST * 2 * BNW * D;  // [ST][K, V][BNW][D]

  // Copies warp tile n (K and V rows of kv head g) into stage n % ST; keys outside [klo, khi] are
  // zero-filled and never read from the cache. One commit group per call, also when empty.
  auto issue = [&](int n, int blk) {
    if (n < keys.cnt) {
      const long long ro = keys.row_offset(n, blk, a.d);  // lane's key row, or -1: zero-fill
      T* sK = sWarp + (n % ST) * 2 * BNW * D;
      T* sV = sK + BNW * D;
      const int c = (lane % CPR) * 8;
#pragma unroll
      for (int it = 0; it < LOADS; ++it) {
        const int r = it * RPI + lane / CPR;
        const long long o = __shfl_sync(0xffffffffu, ro, r);
        const bool ok = o >= 0 && c < a.d;
        cp_async16(sK + swz<D>(r, c), ok ? static_cast<const void*>(Kc + o + c) : static_cast<const void*>(Kc), ok);
        cp_async16(sV + swz<D>(r, c), ok ? static_cast<const void*>(Vc + o + c) : static_cast<const void*>(Vc), ok);
      }
    }
    cp_async_commit();
  };

  // ---- prologue: the first ST - 1 tiles in flight, then Q's fragments straight from global ----
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) issue(s, keys.fetch(s));
  int pending = keys.fetch(ST - 1);

  uint32_t qf[KSD][4];  // A fragments of the 16 x D query tile (the mma.sync A layout)
  {
    const T* Q = static_cast<const T*>(t.q);
    auto qword = [&](int r, int c) -> uint32_t {
      if (r >= rows || c >= a.d) return 0u;
      const int64_t at = ((static_cast<int64_t>(b) * a.tq + r / G) * a.H + static_cast<int64_t>(g) * G + r % G) * a.d + c;
      return *reinterpret_cast<const uint32_t*>(Q + at);
    };
    const int rq = m0 + (lane >> 2);
#pragma unroll
    for (int ks = 0; ks < KSD; ++ks) {
      const int c = ks * 16 + 2 * (lane & 3);
      qf[ks][0] = qword(rq, c);
      qf[ks][1] = qword(rq + 8, c);
      qf[ks][2] = qword(rq, c + 8);
      qf[ks][3] = qword(rq + 8, c + 8);
    }
  }
  const bool plain = a.softcap <= 0.f && a.alibi == nullptr;
  const float scale_log2 = a.scale * kLog2e;

  float o[NTD][4];
#pragma unroll
  for (int i = 0; i < NTD; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  // ---- main loop: one warp tile per iteration, ST - 1 more in flight -------------------------
  for (int n = 0; n < keys.cnt; ++n) {
    issue(n + ST - 1, pending);
    pending = keys.fetch(n + ST);
    cp_async_wait<ST - 1>();  // this lane's copies of tile n have landed
    __syncwarp();             // ... and every lane's are visible
    const T* sKb = sWarp + (n % ST) * 2 * BNW * D;
    const T* sVb = sKb + BNW * D;

    // S = Q K^T (16 x BNW)
    float sc[NTN][4];
#pragma unroll
    for (int i = 0; i < NTN; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSD; ++ks) {
#pragma unroll
      for (int n2 = 0; n2 < KSN; ++n2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, sKb + swz<D>(n2 * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 16 + ((lane >> 3) & 1) * 8));
        M::run(sc[2 * n2], qf[ks], b0, b1);
        M::run(sc[2 * n2 + 1], qf[ks], b2, b3);
      }
    }

    // scores in log2 units, masked where some row does not see the whole tile
    const int j0 = keys.key0(n);
    if (plain) {
#pragma unroll
      for (int i = 0; i < NTN; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[i][e] *= scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < NTN; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[i][e] = score_log2(a, sc[i][e], slope[e >> 1], qi[e >> 1], j0 + i * 8 + 2 * (lane & 3) + (e & 1), off, nullptr);
    }
    if (!(j0 >= kin_lo && j0 + BNW - 1 <= kin_hi)) {
#pragma unroll
      for (int i = 0; i < NTN; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = j0 + i * 8 + 2 * (lane & 3) + (e & 1);
          if (j < lo[e >> 1] || j > hi[e >> 1]) sc[i][e] = -INFINITY;
        }
    }

    // online softmax (as fwd_kernel)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = row_max[rr];
#pragma unroll
      for (int i = 0; i < NTN; ++i) mx = fmaxf(mx, fmaxf(sc[i][2 * rr], sc[i][2 * rr + 1]));
      mx = quad_max(mx);
      const float m_use = mx == -INFINITY ? 0.f : mx;
      const float alpha = exp2f(row_max[rr] - m_use);
      row_max[rr] = mx;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < NTN; ++i) {
        sc[i][2 * rr] = exp2f(sc[i][2 * rr] - m_use);
        sc[i][2 * rr + 1] = exp2f(sc[i][2 * rr + 1] - m_use);
        sum += sc[i][2 * rr] + sc[i][2 * rr + 1];
      }
      row_sum[rr] = row_sum[rr] * alpha + sum;
#pragma unroll
      for (int i = 0; i < NTD; ++i) {
        o[i][2 * rr] *= alpha;
        o[i][2 * rr + 1] *= alpha;
      }
    }

    // O += P V
#pragma unroll
    for (int ks = 0; ks < KSN; ++ks) {
      uint32_t pf[4];
      pf[0] = M::pack(sc[2 * ks][0], sc[2 * ks][1]);
      pf[1] = M::pack(sc[2 * ks][2], sc[2 * ks][3]);
      pf[2] = M::pack(sc[2 * ks + 1][0], sc[2 * ks + 1][1]);
      pf[3] = M::pack(sc[2 * ks + 1][2], sc[2 * ks + 1][3]);
#pragma unroll
      for (int d2 = 0; d2 < NTD / 2; ++d2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, sVb + swz<D>(ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, d2 * 16 + (lane >> 4) * 8));
        M::run(o[2 * d2], pf, b0, b1);
        M::run(o[2 * d2 + 1], pf, b2, b3);
      }
    }
    __syncwarp();  // every lane has read this stage before it is refilled
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- epilogue: merge the NW warps' rows (LSE weights), then write O and LSE or the partials ----
  constexpr int LDO = D + 8;
  float* sO = reinterpret_cast<float*>(smem_raw);  // [NW][16][LDO]
  float* sM = sO + NW * 16 * LDO;                  // [NW][16] row max (log2 units)
  float* sL = sM + NW * 16;                        // [NW][16] row sum
  float* sW = sL + NW * 16;                        // [NW][16] weight of each warp's row
  float* sLse = sW + NW * 16;                      // [16]
  float* sEmpty = sLse + 16;                       // [16] 1: the row sees no key
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const float l = quad_sum(row_sum[rr]);
    const int r = (lane >> 2) + rr * 8;
    if ((lane & 3) == 0) {
      sM[warp * 16 + r] = row_max[rr];
      sL[warp * 16 + r] = l;
    }
#pragma unroll
    for (int i = 0; i < NTD; ++i)
      *reinterpret_cast<float2*>(sO + (warp * 16 + r) * LDO + i * 8 + 2 * (lane & 3)) = make_float2(o[i][2 * rr], o[i][2 * rr + 1]);
  }
  __syncthreads();
  if (tid < 16) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) mx = fmaxf(mx, sM[w * 16 + tid]);
    const float mu = mx == -INFINITY ? 0.f : mx;
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) l += sL[w * 16 + tid] * exp2f(sM[w * 16 + tid] - mu);
    const float inv = l == 0.f ? 0.f : 1.f / l;  // NaN stays NaN
#pragma unroll
    for (int w = 0; w < NW; ++w) sW[w * 16 + tid] = exp2f(sM[w * 16 + tid] - mu) * inv;
    sLse[tid] = l == 0.f ? -INFINITY : (mu + log2f(l)) * kLn2;
    sEmpty[tid] = l == 0.f ? 1.f : 0.f;
  }
  __syncthreads();
  const int64_t total_q = static_cast<int64_t>(a.B) * a.tq;
  for (int idx = tid; idx < 16 * D; idx += NT) {
    const int r = idx / D, c = idx % D, rg = m0 + r;
    if (rg >= rows || c >= a.d) continue;
    float acc = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) acc += sO[(w * 16 + r) * LDO + c] * sW[w * 16 + r];
    if (sEmpty[r] != 0.f) acc = 0.f;  // exactly 0, whatever masked rows held
    const int i = rg / G, h = g * G + rg % G;
    const int64_t qrow = static_cast<int64_t>(b) * a.tq + i;
    if (a.num_splits == 1) {
      static_cast<T*>(t.o)[(qrow * a.H + h) * a.d + c] = M::from_float(acc);
      if (c == 0) t.lse[(static_cast<int64_t>(b) * a.H + h) * a.tq + i] = sLse[r];
    } else {
      a.oaccum[((split * total_q + qrow) * a.H + h) * a.d + c] = acc;
      if (c == 0) a.lseaccum[(static_cast<int64_t>(split) * a.H + h) * total_q + qrow] = sLse[r];
    }
  }
}

// CTAs of config Tr one SM holds, from shared memory (registers are set by __launch_bounds__).
template <typename Tr>
inline int kv_ctas_per_sm() {
  return kv_ctas_per_sm(kv_attn_smem_bytes<Tr>(), Tr::NW, Tr::MIN_BLOCKS);
}

}  // namespace fa
