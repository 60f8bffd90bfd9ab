// The TMA backward's dQ accumulator in tiles (FaArgs::dq_tiled = 1), so that a consumer
// warpgroup's share of a step's dQ is ONE contiguous block of global memory that the copy engine
// adds in one bulk reduction (cp.reduce.async.bulk .add.f32), instead of 16 vector atomics per
// thread per step (those atomics were ~30 % of the step: KERNEL_NOTES "Where a backward step's
// time goes"). FlashAttention-3 lays its accumulator out the same way.
//
// Layout: tile g of head h at ((g * H + h) * BM * D) floats (BM = 64 query rows, D the kernels'
// head-dim bucket). Sequence b's tiles start at g0(b) = (q0 + b * BM) / BM, so every sequence of a
// packed batch starts on a tile of its own (FlashAttention-3's padded offsets): a tile's rows past
// its sequence belong to nobody, and adding them (zeros: their dS entries are masked to 0) is
// harmless. Inside a tile, 64-column block w (consumer warpgroup w) holds its 128 threads'
// accumulator fragments in register order, float4 by float4: float4 n of thread t at (n * 128 + t)
// so the shared-memory stores are conflict-free 16-byte vectors. A fragment's float4 n is
// dq[4n .. 4n + 3] = rows r, r, r + 8, r + 8 and columns c, c + 1, c, c + 1 with r = 16 * warp +
// lane / 4 and c = 64 * w + 8 * n + 2 * (lane % 4) (fa_wgmma.cuh's accumulator layout).
// bwd_convert_dq_tiled_kernel undoes the permutation into the caller's [total_q, H, d_out].
#pragma once
#include <cstdint>

#include "fa_common.cuh"

namespace fa {

struct DqTiles {
  static constexpr int BM = 64;              // query rows per tile (4 warps x 16)
  static constexpr int BLOCK = BM * 64;      // floats of one warpgroup's 64-column block
  static constexpr int F4 = BLOCK / 4 / 128;  // float4 per thread per block (8)

  // Tiles of the whole accumulator: every sequence's tiles plus at most one of padding each.
  __host__ __device__ static int64_t tiles(int total_q, int B) { return (static_cast<int64_t>(total_q) + static_cast<int64_t>(B) * BM) / BM + 1; }
  __host__ __device__ static int64_t floats(int total_q, int B, int H, int D) { return tiles(total_q, B) * H * BM * D; }
  // Whether the tiles are worth their padding: at most twice the rows' own accumulator plus two
  // tiles a head. Many sequences much shorter than a tile (a batch of 1024 one-token sequences
  // would need 64 times the memory, and a memset of it every call) take the other backward.
  __host__ __device__ static bool fits(int total_q, int B, int H, int kd, int D) {
    return floats(total_q, B, H, D) <= 2 * static_cast<int64_t>(total_q) * H * kd + 2 * static_cast<int64_t>(H) * BM * D;
  }
  // Index of query tile mb (rows mb * BM ..) of sequence b (first packed row q0), head h: its
  // counter in deterministic calls (FaArgs::dq_sem).
  __device__ static int64_t tile_index(int q0, int b, int mb, int h, int H) {
    return ((static_cast<int64_t>(q0) + static_cast<int64_t>(b) * BM) / BM + mb) * H + h;
  }
  // First float of that tile.
  __device__ static int64_t tile_offset(int q0, int b, int mb, int h, int H, int D) { return tile_index(q0, b, mb, h, H) * BM * D; }
  // Row and column within the tile of float4 f (0 .. BM * D / 4) of a tile's storage; the float4
  // holds (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1).
  __device__ static void cell(int f, int* r, int* c) {
    const int w = f / (BLOCK / 4), n = (f / 128) % F4, t = f % 128;
    const int lane = t % 32;
    *r = (t / 32) * 16 + lane / 4;
    *c = w * 64 + n * 8 + 2 * (lane % 4);
  }
};

// dQ = scale * unscale * accumulator, tiled layout to the caller's [total_q, H, d_out] (16-bit
// outputs: the TMA backward's). Grid (query tiles of the longest sequence, H, B). A block reads its
// tile with all its loads in flight at once, puts the rows together in shared memory and writes
// them 16 bytes a thread: written straight from the fragment order, a warp stored 8 rows x 16
// bytes (half sectors), and the pass ran at 1.5 TB/s (run 64).
template <typename E, int D>
__global__ void __launch_bounds__(256) bwd_convert_dq_tiled_kernel(FaArgs a, FaTensors t) {
  using TO = typename E::TO;
  static_assert(sizeof(TO) == 2, "the TMA backward writes 16-bit dQ");
  constexpr int BM = DqTiles::BM, N4 = BM * D / 4 / 256;  // float4 a thread
  constexpr int PITCH = D + 8;  // a row's TO elements in shared memory: rows 16-byte aligned, 4 banks apart
  constexpr int CH = D / 8;     // 16-byte chunks of a row
  __shared__ alignas(16) TO rows[BM * PITCH];
  const int mb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo s = seq_info(a, b);
  const int m0 = mb * BM;
  if (m0 >= s.tq) return;
  const float mul = a.scale * split_scales<E>(a).dq;
  const float4* src = reinterpret_cast<const float4*>(a.dq_accum + DqTiles::tile_offset(s.q0, b, mb, h, a.H, D));
  float4 v[N4];
#pragma unroll
  for (int j = 0; j < N4; ++j) v[j] = __ldcs(src + threadIdx.x + j * 256);  // read once: stream it
#pragma unroll
  for (int j = 0; j < N4; ++j) {
    int r, c;
    DqTiles::cell(threadIdx.x + j * 256, &r, &c);
    Out<TO>::two(rows + r * PITCH + c, v[j].x * mul, v[j].y * mul);
    Out<TO>::two(rows + (r + 8) * PITCH + c, v[j].z * mul, v[j].w * mul);
  }
  __syncthreads();
  TO* out = static_cast<TO*>(t.dq);
  const bool vec = a.d_out % 8 == 0 && (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  for (int q = threadIdx.x; q < BM * CH; q += 256) {
    const int r = q / CH, c = (q % CH) * 8, i = m0 + r;
    if (i >= s.tq || c >= a.d_out) continue;
    TO* row = out + (static_cast<int64_t>(s.q0 + i) * a.H + h) * a.d_out;
    if (vec) {
      *reinterpret_cast<uint4*>(row + c) = *reinterpret_cast<const uint4*>(rows + r * PITCH + c);
    } else {
      for (int e = c; e < c + 8 && e < a.d_out; ++e) row[e] = rows[r * PITCH + e];
    }
  }
}

}  // namespace fa
