// KV-cache attention on FFMA (no tensor cores): f32 caches of every head dim, and f16/bf16 caches
// whose head dim is not a multiple of 8 (rows that 16-byte copies cannot address). The call is
// kv_attn_kernel's (fa_kvcache.cuh): a CTA owns ROWS rows of the GQA-packed M (row r = query
// r / G, head g·G + r % G) of one kv head of one sequence, each warp streams its own key tiles
// with its own online-softmax state, the warps' rows are merged once at the end, split-KV
// partials go to the same float32 workspace for fwd_combine_kernel, and every device length and
// block index is range-checked. What differs is how a tile arrives and is multiplied:
//  - Loads: each key row of d elements is copied in the widest chunks that divide it
//    (kv_vec_bytes: 16, 8 or 4 bytes), so any d reads correctly. f32 rows go by cp.async into
//    an ST-stage ring per warp; f16/bf16 rows (d % 8 != 0: 8-, 4- or 2-byte chunks) are read
//    with plain loads (4 chunks of K and of V in flight per lane) and converted to float on their
//    way to shared memory, so those tiles land synchronously (not pipelined across tiles: the
//    path exists for exactness at odd head dims, not for speed).
//  - Scores: KSL = DB / 32 lanes share one key, each forming the dot product over 32 of the
//    bucket's DB columns in float4 steps (the row stride is padded so that the 8 lanes of a
//    quarter-warp hit distinct banks), then log2(KSL) shuffles add the parts; a warp tile is
//    BNW = 32 / KSL keys. Q's rows sit in shared memory as float (broadcast reads).
//  - P·V: lane c owns output columns c, c + 32, ...; the tile's probabilities go through shared
//    memory [key][row] and are read four rows at a time.
// Columns d..DB-1 of every tile row and of Q are zero, so they add exactly 0; loops stop at the
// last column group holding data. Decode is memory-bound here too (KERNEL_NOTES.md, "KV cache on
// FFMA"): at G·Tq = 4 rows a key element costs ~0.1 SM cycles of FFMA/LDS work against ~0.2
// (f32) of HBM time.
#pragma once
#include "fa_kvcache_common.cuh"

namespace fa {

// DB: the head-dim bucket (32, 64, 128, 256); NW warps per CTA; ST stages per warp; ROWS query rows
// per CTA (a multiple of 4: P·V reads four rows at once); MIN_BLOCKS as in KvCfg.
template <int DB_, int NW_, int ST_, int ROWS_, int MIN_BLOCKS_>
struct KvFfmaCfg {
  static constexpr int DB = DB_, NW = NW_, ST = ST_, ROWS = ROWS_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int KSL = DB / 32;                // lanes per key in the dot products
  static constexpr int BNW = 32 / KSL;               // keys per warp tile
  static constexpr int MC = DB / 32;                 // output columns per lane
  static constexpr int LDK = DB + (4 * KSL) % 32;    // row stride (floats) of the K and V tiles
  static constexpr int STAGE = 2 * BNW * LDK;        // floats per stage: K rows, then V rows
  static constexpr int RING = ROWS * DB + NW * BNW * ROWS + 4 * ROWS;  // float offset of the rings (kv_ffma_smem_bytes)
  static_assert(DB % 32 == 0 && DB <= 256 && ROWS % 4 == 0, "bucket and rows");
};
// Every bucket's stage is 8-9 KiB. The default: 8 warps x 2 stages (137-162 KiB, one CTA per SM,
// like the tensor-core kernel's K3); GPUs with 99 KiB per block run 4 warps (69-82 KiB).
// ROWS x MC output registers per lane stay at <= 64.
template <int DB>
struct KvFfmaTraits;
template <>
struct KvFfmaTraits<32> : KvFfmaCfg<32, 8, 2, 16, 1> {};
template <>
struct KvFfmaTraits<64> : KvFfmaCfg<64, 8, 2, 16, 1> {};
template <>
struct KvFfmaTraits<128> : KvFfmaCfg<128, 8, 2, 16, 1> {};
template <>
struct KvFfmaTraits<256> : KvFfmaCfg<256, 8, 2, 8, 1> {};
template <int DB>
struct KvFfmaTraitsSmall;
template <>
struct KvFfmaTraitsSmall<32> : KvFfmaCfg<32, 4, 2, 16, 2> {};
template <>
struct KvFfmaTraitsSmall<64> : KvFfmaCfg<64, 4, 2, 16, 2> {};
template <>
struct KvFfmaTraitsSmall<128> : KvFfmaCfg<128, 4, 2, 16, 2> {};
template <>
struct KvFfmaTraitsSmall<256> : KvFfmaCfg<256, 4, 2, 8, 2> {};

// The bucket of head dim d (1..256).
inline int kv_ffma_bucket(int d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 256; }

// Shared memory (floats): Q [ROWS][DB], P [NW][BNW][ROWS], per-row lo, hi, query, slope [4][ROWS],
// then the rings [NW][ST][STAGE]; the epilogue's [NW][ROWS][DB + 4] partial rows, per-warp max,
// sum, weight [3][NW][ROWS] and per-row LSE and "sees nothing" [2][ROWS] overlay them.
template <typename Tr>
constexpr size_t kv_ffma_smem_bytes() {
  const size_t main = static_cast<size_t>(Tr::RING + Tr::NW * Tr::ST * Tr::STAGE);
  const size_t epi = static_cast<size_t>(Tr::NW * Tr::ROWS * (Tr::DB + 4) + 3 * Tr::NW * Tr::ROWS + 2 * Tr::ROWS);
  return (main > epi ? main : epi) * sizeof(float);
}
template <int DB>
constexpr bool kv_ffma_runs_small(size_t smem_optin) {
  return smem_optin != 0 && smem_optin < kv_ffma_smem_bytes<KvFfmaTraits<DB>>();
}

// f32: one chunk of vb bytes (kv_vec_bytes: 16, 8 or 4) of a key row into its float row in
// shared memory by cp.async, or zeros.
__device__ __forceinline__ void kv_ffma_copy_async(float* dst, const float* src, int vb, bool ok) {
  if (vb == 16) cp_async16(dst, src, ok);
  else if (vb == 8) cp_async8(dst, src, ok);
  else cp_async4(dst, src, ok);
}
// f16/bf16 (d % 8 != 0): a chunk of vb bytes (8, 4 or 2) read into a register, then converted
// into vb / 2 floats in shared memory.
template <typename T>
__device__ __forceinline__ uint2 kv_ffma_load(const T* src, int vb, bool ok) {
  uint2 u = make_uint2(0u, 0u);
  if (ok) {
    if (vb == 8) u = *reinterpret_cast<const uint2*>(src);
    else if (vb == 4) u.x = *reinterpret_cast<const uint32_t*>(src);
    else u.x = *reinterpret_cast<const uint16_t*>(src);
  }
  return u;
}
template <typename T>
__device__ __forceinline__ void kv_ffma_store(float* dst, uint2 u, int vb) {
  const T* e = reinterpret_cast<const T*>(&u);
  if (vb == 8) *reinterpret_cast<float4*>(dst) = make_float4(to_f32(e[0]), to_f32(e[1]), to_f32(e[2]), to_f32(e[3]));
  else if (vb == 4) *reinterpret_cast<float2*>(dst) = make_float2(to_f32(e[0]), to_f32(e[1]));
  else *dst = to_f32(e[0]);
}

template <typename T, typename Tr>
__global__ void __launch_bounds__(Tr::NW * 32, Tr::MIN_BLOCKS) kv_ffma_kernel(KvArgs a, KvTensors t) {
  constexpr int DB = Tr::DB, NW = Tr::NW, BNW = Tr::BNW, ST = Tr::ST, ROWS = Tr::ROWS, NT = NW * 32;
  constexpr int KSL = Tr::KSL, MC = Tr::MC, LDK = Tr::LDK;
  constexpr int TG = DB / (4 * KSL);  // float4 column groups per lane in a dot product (8)

  extern __shared__ __align__(16) float smf[];
  float* sQ = smf;                                        // [ROWS][DB]
  float* sP = sQ + ROWS * DB;                             // [NW][BNW][ROWS]
  int* sLo = reinterpret_cast<int*>(sP + NW * BNW * ROWS);  // [ROWS] first key the row sees
  int* sHi = sLo + ROWS;                                  // [ROWS] last key the row sees
  int* sQi = sHi + ROWS;                                  // [ROWS] the row's query index
  float* sSlope = reinterpret_cast<float*>(sQi + ROWS);   // [ROWS] the row's ALiBi slope
  float* ring = smf + Tr::RING;          // [NW][ST][STAGE]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = static_cast<int>(blockIdx.x % a.num_splits), mt = static_cast<int>(blockIdx.x / a.num_splits);
  const int g = blockIdx.y, b = blockIdx.z;
  const int G = a.H / a.Hkv, d = a.d;
  const int rows = G * a.tq;  // the M of this (sequence, kv head); the binding keeps H·tq < 2^31
  const int m0 = mt * ROWS;
  const int nr = min(ROWS, rows - m0);  // rows of this CTA (the grid makes it >= 1)
  const int tk = kv_keys(a, b);
  const int off = tk - a.tq;  // bottom-right alignment: query i sits at key position i + off

  // ---- the CTA's rows, its key range, Q as float, zeroed padding ------------------------------
  if (tid < ROWS) {
    const int r = m0 + tid;
    const bool real = tid < nr;
    sQi[tid] = r / G;
    sLo[tid] = real ? kv_key_lo(a, r / G, off, tk) : 0;
    sHi[tid] = real ? kv_key_hi(a, r / G, off, tk) : -1;
    sSlope[tid] = real && a.alibi ? a.alibi[static_cast<int64_t>(b) * a.H + g * G + r % G] : 0.f;
  }
  const int i_lo = m0 / G, i_hi = (m0 + nr - 1) / G;
  const int klo = kv_key_lo(a, i_lo, off, tk), khi = kv_key_hi(a, i_hi, off, tk);  // keys some row sees
  const int kin_lo = kv_key_lo(a, i_hi, off, tk), kin_hi = kv_key_hi(a, i_lo, off, tk);  // keys every row sees
  {
    const T* Q = static_cast<const T*>(t.q);
    for (int x = tid; x < ROWS * DB; x += NT) {
      const int r = x / DB, c = x % DB;
      float v = 0.f;
      if (r < nr && c < d) {
        const int rg = m0 + r;
        v = to_f32(Q[((static_cast<int64_t>(b) * a.tq + rg / G) * a.H + static_cast<int64_t>(g) * G + rg % G) * d + c]);
      }
      sQ[x] = v;
    }
    for (int x = tid; x < NW * BNW * ROWS; x += NT) sP[x] = 0.f;  // rows >= nr keep p = 0
    const int pad = DB - d;  // loads write columns < d only: the rest of every ring row stays 0
    if (pad > 0)
      for (int x = tid; x < NW * ST * 2 * BNW * pad; x += NT) ring[(x / pad) * LDK + d + x % pad] = 0.f;
  }
  __syncthreads();

  // ---- this split's warp tiles, and this warp's share (tiles s_lo + warp, + NW, ...) ----------
  const KvWarpKeys<NW, BNW> keys(a, split, b, g, warp, lane, klo, khi);

  const T* Kc = static_cast<const T*>(t.k_cache);
  const T* Vc = static_cast<const T*>(t.v_cache);
  float* sWarp = ring + warp * ST * Tr::STAGE;
  // row copies: ch chunks of vec elements per row; a load step covers rpi rows of chp lanes each
  const int vb = kv_vec_bytes(d, static_cast<int>(sizeof(T)));
  const int vec = vb / static_cast<int>(sizeof(T)), ch = d / vec;
  int lg = 0;
  while ((1 << lg) < ch && lg < 5) ++lg;
  const int chp = 1 << lg, rpi = 32 >> lg;

  // Copies warp tile n (K and V rows of kv head g) into stage n % ST; keys outside [klo, khi] are
  // zero-filled and never read from the cache. One commit group per call, also when empty.
  auto issue = [&](int n, int blk) {
    if (n < keys.cnt) {
      const long long ro = keys.row_offset(n, blk, d);  // lane's key row, or -1: zero-fill
      float* sK = sWarp + (n % ST) * Tr::STAGE;
      float* sV = sK + BNW * LDK;
      // lane's chunks: row r0 + (lane >> lg) for r0 = 0, rpi, ..., chunk (lane & (chp - 1)) + k·chp
      if constexpr (sizeof(T) == 4) {
        for (int r0 = 0; r0 < BNW; r0 += rpi) {
          const int r = r0 + (lane >> lg);
          const long long o = __shfl_sync(0xffffffffu, ro, r & (BNW - 1));
          if (r < BNW) {
            const bool ok = o >= 0;
            const long long at = ok ? o : 0;
            for (int c = lane & (chp - 1); c < ch; c += chp) {
              kv_ffma_copy_async(sK + r * LDK + c * vec, Kc + at + c * vec, vb, ok);
              kv_ffma_copy_async(sV + r * LDK + c * vec, Vc + at + c * vec, vb, ok);
            }
          }
        }
      } else {
        // plain loads: KB chunks of K and of V in flight per lane before any is stored
        constexpr int KB = 4;
        const int nk = (ch + chp - 1) / chp, nslots = ((BNW + rpi - 1) / rpi) * nk;
        for (int s0 = 0; s0 < nslots; s0 += KB) {
          uint2 ku[KB], vu[KB];
          int at[KB];  // shared-memory float offset of the chunk in its row block, or -1
#pragma unroll
          for (int u = 0; u < KB; ++u) {
            at[u] = -1;
            if (s0 + u < nslots) {  // uniform
              const int ri = (s0 + u) / nk, k = (s0 + u) - ri * nk;
              const int r = ri * rpi + (lane >> lg), c = (lane & (chp - 1)) + k * chp;
              const long long o = __shfl_sync(0xffffffffu, ro, r & (BNW - 1));
              const bool here = r < BNW && c < ch, ok = here && o >= 0;
              const long long src = (ok ? o : 0) + static_cast<long long>(c) * vec;
              ku[u] = kv_ffma_load(Kc + src, vb, ok);
              vu[u] = kv_ffma_load(Vc + src, vb, ok);
              if (here) at[u] = r * LDK + c * vec;
            }
          }
#pragma unroll
          for (int u = 0; u < KB; ++u) {
            if (at[u] >= 0) {
              kv_ffma_store<T>(sK + at[u], ku[u], vb);
              kv_ffma_store<T>(sV + at[u], vu[u], vb);
            }
          }
        }
      }
    }
    cp_async_commit();
  };

#pragma unroll
  for (int s = 0; s < ST - 1; ++s) issue(s, keys.fetch(s));
  int pending = keys.fetch(ST - 1);

  const bool plain = a.softcap <= 0.f && a.alibi == nullptr;
  const float scale_log2 = a.scale * kLog2e;
  const int kj = lane / KSL, ks = lane % KSL;  // lane's key in a tile, and its column slice
  const int tn = (d + 4 * KSL - 1) / (4 * KSL);  // column groups that hold data
  const int kn = (d + 31) / 32;                  // output column slots that hold data
  float* sPw = sP + warp * BNW * ROWS;

  float o[ROWS][MC], m[ROWS], l[ROWS];  // l: this lane's part of the row sum (lanes ks == 0)
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int k = 0; k < MC; ++k) o[r][k] = 0.f;
  }

  // ---- main loop: one warp tile per iteration, ST - 1 more in flight -------------------------
  for (int n = 0; n < keys.cnt; ++n) {
    issue(n + ST - 1, pending);
    pending = keys.fetch(n + ST);
    cp_async_wait<ST - 1>();  // this lane's copies of tile n have landed
    __syncwarp();             // ... and every lane's are visible
    const float* sK = sWarp + (n % ST) * Tr::STAGE;
    const float* sV = sK + BNW * LDK;

    // S: lane (kj, ks) sums q·k over its column groups ks, ks + KSL, ...
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
    const float* kr = sK + kj * LDK + 4 * ks;
#pragma unroll
    for (int tg = 0; tg < TG; ++tg) {
      if (tg < tn) {
        const float4 kv = *reinterpret_cast<const float4*>(kr + 4 * KSL * tg);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if (r < nr) {
            const float4 qv = *reinterpret_cast<const float4*>(sQ + r * DB + 4 * ks + 4 * KSL * tg);
            acc[r] = fmaf(qv.x, kv.x, acc[r]);
            acc[r] = fmaf(qv.y, kv.y, acc[r]);
            acc[r] = fmaf(qv.z, kv.z, acc[r]);
            acc[r] = fmaf(qv.w, kv.w, acc[r]);
          }
        }
      }
    }

    // scores in log2 units, masked where some row does not see the whole tile; online softmax
    const int j0 = keys.key0(n), j = j0 + kj;
    const bool inner = j0 >= kin_lo && j0 + BNW - 1 <= kin_hi;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (r < nr) {
        float x = acc[r];
#pragma unroll
        for (int w = KSL / 2; w > 0; w >>= 1) x += __shfl_xor_sync(0xffffffffu, x, w);
        float sc = plain ? x * scale_log2 : score_log2(a, x, sSlope[r], sQi[r], j, off, nullptr);
        if (!inner && (j < sLo[r] || j > sHi[r])) sc = -INFINITY;
        const float mx = fmaxf(m[r], warp_max(sc));
        const float m_use = mx == -INFINITY ? 0.f : mx;
        const float alpha = exp2f(m[r] - m_use);
        const float p = exp2f(sc - m_use);
        m[r] = mx;
        l[r] = l[r] * alpha + (ks == 0 ? p : 0.f);
#pragma unroll
        for (int k = 0; k < MC; ++k) o[r][k] *= alpha;
        if (ks == 0) sPw[kj * ROWS + r] = p;
      }
    }
    __syncwarp();

    // O += P V: lane's columns lane + 32k, four rows' probabilities per read
#pragma unroll 4
    for (int jk = 0; jk < BNW; ++jk) {
      float v[MC];
#pragma unroll
      for (int k = 0; k < MC; ++k) v[k] = k < kn ? sV[jk * LDK + lane + 32 * k] : 0.f;
      const float* pr = sPw + jk * ROWS;
#pragma unroll
      for (int r4 = 0; r4 < ROWS; r4 += 4) {
        if (r4 < nr) {
          const float4 p4 = *reinterpret_cast<const float4*>(pr + r4);
#pragma unroll
          for (int k = 0; k < MC; ++k) {
            if (k < kn) {
              o[r4][k] = fmaf(p4.x, v[k], o[r4][k]);
              o[r4 + 1][k] = fmaf(p4.y, v[k], o[r4 + 1][k]);
              o[r4 + 2][k] = fmaf(p4.z, v[k], o[r4 + 2][k]);
              o[r4 + 3][k] = fmaf(p4.w, v[k], o[r4 + 3][k]);
            }
          }
        }
      }
    }
    __syncwarp();  // every lane has read this stage and sPw before they are refilled
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- epilogue: merge the NW warps' rows (LSE weights), then write O and LSE or the partials ----
  constexpr int LDO = DB + 4;
  float* sO = smf;                      // [NW][ROWS][LDO]
  float* sM = sO + NW * ROWS * LDO;     // [NW][ROWS] row max (log2 units)
  float* sL = sM + NW * ROWS;           // [NW][ROWS] row sum
  float* sW = sL + NW * ROWS;           // [NW][ROWS] weight of each warp's row
  float* sLse = sW + NW * ROWS;         // [ROWS]
  float* sEmpty = sLse + ROWS;          // [ROWS] 1: the row sees no key
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float lsum = warp_sum(l[r]);
    if (lane == 0) {
      sM[warp * ROWS + r] = m[r];
      sL[warp * ROWS + r] = lsum;
    }
#pragma unroll
    for (int k = 0; k < MC; ++k) sO[(warp * ROWS + r) * LDO + lane + 32 * k] = o[r][k];
  }
  __syncthreads();
  if (tid < ROWS) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) mx = fmaxf(mx, sM[w * ROWS + tid]);
    const float mu = mx == -INFINITY ? 0.f : mx;
    float lt = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) lt += sL[w * ROWS + tid] * exp2f(sM[w * ROWS + tid] - mu);
    const float inv = lt == 0.f ? 0.f : 1.f / lt;  // NaN stays NaN
#pragma unroll
    for (int w = 0; w < NW; ++w) sW[w * ROWS + tid] = exp2f(sM[w * ROWS + tid] - mu) * inv;
    sLse[tid] = lt == 0.f ? -INFINITY : (mu + log2f(lt)) * kLn2;
    sEmpty[tid] = lt == 0.f ? 1.f : 0.f;
  }
  __syncthreads();
  const int64_t total_q = static_cast<int64_t>(a.B) * a.tq;
  for (int x = tid; x < ROWS * DB; x += NT) {
    const int r = x / DB, c = x % DB, rg = m0 + r;
    if (r >= nr || c >= d) continue;
    float acc = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) acc += sO[(w * ROWS + r) * LDO + c] * sW[w * ROWS + r];
    if (sEmpty[r] != 0.f) acc = 0.f;  // exactly 0, whatever masked rows held
    const int i = rg / G, h = g * G + rg % G;
    const int64_t qrow = static_cast<int64_t>(b) * a.tq + i;
    if (a.num_splits == 1) {
      Out<T>::one(static_cast<T*>(t.o) + (qrow * a.H + h) * d + c, acc);
      if (c == 0) t.lse[(static_cast<int64_t>(b) * a.H + h) * a.tq + i] = sLse[r];
    } else {
      a.oaccum[((split * total_q + qrow) * a.H + h) * d + c] = acc;
      if (c == 0) a.lseaccum[(static_cast<int64_t>(split) * a.H + h) * total_q + qrow] = sLse[r];
    }
  }
}

// CTAs of config Tr one SM holds, from shared memory.
template <typename Tr>
inline int kv_ffma_ctas_per_sm() {
  return kv_ctas_per_sm(kv_ffma_smem_bytes<Tr>(), Tr::NW, Tr::MIN_BLOCKS);
}

}  // namespace fa
