// Hopper's asynchronous machinery for the warp-specialised kernels (sm_90a): mbarriers, TMA tile
// loads (cp.async.bulk.tensor) that complete on an mbarrier, register reallocation between
// warpgroups (setmaxnreg), named barriers, and the host side that describes a [total, heads, d]
// operand to the copy engine (a CUtensorMap).
//
// An operand tile is loaded as 64-column boxes of R rows, 128-byte swizzled: the copy engine
// writes exactly the layout the wgmma descriptors read (swz128 in fa_tile.cuh), and it writes
// zeros for columns at or past d and rows at or past the tensor's end.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder comes from the driver at run time)
#include <cuda_runtime.h>
#include <stdint.h>

#include "fa_tile.cuh"
#include "fa_wgmma.cuh"

namespace fa {
namespace tma {

// ---- mbarriers (shared::cta) -------------------------------------------------------------------
__device__ __forceinline__ void bar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the copy engine (the async proxy) before first use.
__device__ __forceinline__ void fence_bar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` of copies that will complete on this barrier.
__device__ __forceinline__ void arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void wait(uint64_t* bar, int parity) {
  const uint32_t addr = smem_u32(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- TMA ---------------------------------------------------------------------------------------
// Box (64 columns, 1 head, rows) at column c, head h, row r of a 3-D map, into shared memory at
// dst, completing `box bytes` of transactions on bar.
__device__ __forceinline__ void load_box(void* dst, const CUtensorMap* map, uint64_t* bar, int c, int h, int r) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c), "r"(h), "r"(r)
      : "memory");
}
// The opposite: box (64 columns, 1 head, rows) of shared memory at src to column c, head h, row r
// of the map's tensor, in this thread's bulk group (columns and rows past the tensor are not
// written). Commit, then bulk_wait_read before src is overwritten, bulk_wait_all before exiting.
__device__ __forceinline__ void store_box(const CUtensorMap* map, const void* src, int c, int h, int r) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
               "r"(smem_u32(src)), "r"(c), "r"(h), "r"(r)
               : "memory");
}
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// One producer warp brings the R-row tile at rows [row, row + R) of head h of a [total, heads, d]
// operand (base: its first element) into dst (swz128) and completes `full` with one arrival: by
// TMA, or, when the tile runs past its sequence (valid_rows < R) into rows that hold another
// sequence's data (tail_in_tensor), by plain loads with those rows and the columns past d
// zero-filled, fenced for the tensor cores (the copy engine would bring the other sequence in, and
// 0 times its NaN or infinity is NaN in a product over these rows).
template <int R, int D, typename T>
__device__ __forceinline__ void load_tile(T* dst, const CUtensorMap* map, const T* base, uint64_t* full, int row, int h, int heads, int d,
                                          int valid_rows, bool tail_in_tensor, int lane) {
  const bool copy = valid_rows < R && tail_in_tensor;
  if (copy) {
    const int64_t ld = static_cast<int64_t>(heads) * d;
    copy_tile128_warp<R, D>(dst, base + static_cast<int64_t>(row) * ld + static_cast<int64_t>(h) * d, ld, valid_rows, d, lane);
    wg::fence_proxy_async();  // the tensor cores read these stores through the async proxy
  }
  __syncwarp();  // the warp's shared-memory stores before lane 0's arrival (release)
  if (lane == 0) {
    if (copy) {
      arrive(full);
    } else {
      arrive_expect(full, R * D * 2);
#pragma unroll
      for (int c = 0; c < D / 64; ++c) load_box(dst + c * R * 64, map, full, c * 64, h, row);
    }
  }
}

// ---- bulk reductions (shared -> global) -------------------------------------------------------
// dst[0 .. bytes / 4) += src[0 .. bytes / 4) in float32, by the copy engine (dst and src 16-byte
// aligned, bytes a multiple of 16), in this thread's bulk group: commit it, then wait_read before
// the source is overwritten and wait_all before the thread exits.
__device__ __forceinline__ void reduce_add_f32(float* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(smem_u32(src)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>  // at most N of this thread's bulk groups still reading shared memory
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
template <int N>  // at most N of this thread's bulk groups not complete
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }
// Orders this thread's generic-proxy accesses of global memory with its bulk (async-proxy) ones.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// A counter handed between CTAs: read with acquire, bumped with release (GPU scope).
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(int* p, int v) { asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory"); }

// ---- warpgroup roles ---------------------------------------------------------------------------
template <int N>
__device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
// Named barriers (id 0 is __syncthreads): sync waits for `n` arrivals counting its own warp's;
// arrive counts and goes on.
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

// ---- the tile ring of the persistent kernels ---------------------------------------------------
// fa_fwd_tma.cuh and fa_bwd_tma.cuh run one CTA per SM over a list of tiles. The producer warp
// takes each next tile (its block index first, then, when the kernel is persistent, a number
// from the counter FaArgs::tile_counter, which the launcher zeroed) and hands it to the warps that
// read it through two slots in shared memory, each guarded by a full mbarrier (the producer's one
// arrival) and an empty one (one arrival per reading warp): the producer can work up to two tiles
// ahead of its readers. The mbarriers live in kBars consecutive words, the slots in kSlots ints.
struct TileRing {
  static constexpr int kBars = 4, kSlots = 2;
  uint64_t* bars;      // full[2], empty[2]
  volatile int* slot;  // [2]
  // One thread, before fence_bar_init.
  __device__ __forceinline__ void init(int readers) const {
    for (int i = 0; i < 2; ++i) {
      bar_init(bars + i, 1);
      bar_init(bars + 2 + i, readers);
    }
  }
  // The producer warp (every lane): this CTA's i-th tile, or `total` when there are no more.
  // ORDERED (persistent): every tile from the counter, the first included, so that only CTAs that
  // run hold tiles: a kernel whose tiles wait for tiles taken before them (the deterministic
  // backward) then progresses even when not all of its CTAs are resident at once.
  template <bool PERSIST>
  __device__ __forceinline__ int publish(int i, int total, int* counter, bool ordered = false) const {
    const int s = i & 1;
    if (i >= 2) wait(bars + 2 + s, ((i >> 1) + 1) & 1);
    int tile = 0;
    if ((threadIdx.x & 31) == 0) {
      if (PERSIST && counter) tile = ordered ? atomicAdd(counter, 1) : i == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x) + atomicAdd(counter, 1);
      else tile = i == 0 ? static_cast<int>(blockIdx.x) : total;
      tile = min(tile, total);
      slot[s] = tile;
      arrive(bars + s);
    }
    return __shfl_sync(0xffffffffu, tile, 0);
  }
  // A reading warp (every lane): the i-th tile.
  __device__ __forceinline__ int read(int i) const {
    const int s = i & 1;
    wait(bars + s, (i >> 1) & 1);
    const int tile = slot[s];
    __syncwarp();
    if ((threadIdx.x & 31) == 0) arrive(bars + 2 + s);
    return tile;
  }
};

// ---- host: describing an operand ---------------------------------------------------------------
// A [total, heads, d] tensor of 2-byte elements (d a multiple of 8, base 16-byte aligned) as a
// 3-D map with (64, 1, rows) boxes. Returns false when the driver's encoder is missing or refuses
// (the caller then runs a kernel without TMA).
bool encode_operand(CUtensorMap* map, const void* base, bool bf16, int d, int heads, int total, int rows);

}  // namespace tma
}  // namespace fa
