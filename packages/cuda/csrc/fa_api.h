// Host interface of the @fa CUDA kernels. Plain C++ so that both the node-addon-api binding
// (compiled by the host compiler) and the standalone harness (dev/harness.cu) can use it.
// Every pointer here is a device pointer. The caller has validated every size already.
//
// What fwd() / bwd() run for a call (fa_api.cu, "the plan"):
//   f16, bf16, head dim a multiple of 8   the kernels read the caller's tensors directly
//   f16, bf16, any other head dim          the operands are first copied into a layout padded
//                                          with zero columns to a multiple of 8 (fa_prep.cuh)
//   f32 on the tensor cores (default)      each operand is split into two f16 planes, hi and lo,
//                                          x·2^e ≈ hi + lo with a power-of-two scale e per
//                                          tensor; every product is hi·hi + hi·lo + lo·hi with
//                                          float32 accumulation (KERNEL_NOTES.md, "f32")
//   f32 on FFMA (f32_path = 2, or when     plain float32 kernels (fa_ffma.cuh), any head dim
//   the split kernels do not fit the GPU)
// Outputs are always written in the caller's layout and dtype.
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace fa {

enum DType : int { kF16 = 0, kBF16 = 1, kF32 = 2 };

// f32 kernels: 0 = the split tensor-core kernels where their shared memory fits the GPU, else
// FFMA; 1 = always the split tensor-core kernels; 2 = always FFMA.
enum F32Path : int { kF32Auto = 0, kF32TensorCores = 1, kF32Ffma = 2 };

// Unscaling factors of the split f32 operands (powers of two, written on the device by the
// preparation pass; see fa_prep.cuh). Accumulators of split products are in scaled units.
struct SplitScales {
  float qk;  // S accumulator -> Q·Kᵀ
  float pv;  // O accumulator -> P·V (P is split as P·kPScale)
  float dp;  // dP accumulator -> dO·Vᵀ
  float dv;  // dV accumulator -> Pᵀ·dO
  float ds;  // multiplier of dS before its split
  float dk;  // dK accumulator -> dSᵀ·Q
  float dq;  // dQ accumulator -> dS·K
};

struct FaArgs {
  int dtype;          // DType
  int B, H, Hkv, d;   // batch (sequences), heads, kv heads, head dim (1..256)
  int max_tq, max_tk; // longest query / key sequence
  int total_q, total_k;
  int varlen;         // LSE layout: 1 -> [H, total_q], 0 -> [B, H, max_tq]
  const int* cu_q;    // [B+1] device
  const int* cu_k;    // [B+1] device
  const float* alibi; // [B*H] device, or null
  float scale, softcap;  // softcap 0 = none
  int win_left, win_right;  // -1 = unbounded
  int deterministic;
  int num_sms;
  int arch;           // compute capability * 10 (90 = Hopper: wgmma kernels)
  int no_wgmma_bwd;   // 1: use the mma.sync backward even on Hopper (FA_CUDA_NO_WGMMA_BWD=1)
  int f32_path;       // F32Path
  size_t smem_limit;  // shared memory per block the GPU allows (0 = unknown: assume it fits)
  // forward split-KV (filled by the launcher)
  int num_splits;
  float* oaccum;      // [num_splits, total_q, H, kd]
  float* lseaccum;    // [num_splits, H, total_q]
  int* tile_counter;  // the persistent TMA forward's next tile (zeroed by its launcher), or null: one CTA a tile
  // backward scratch (filled by the launcher)
  float* dq_accum;    // [total_q, H, kd], or tiles (dq_tiled = 1, fa_dq_tiles.cuh)
  int dq_tiled;       // set by the backward's launcher: dq_accum holds the TMA backward's tiles
  int* dq_sem;        // deterministic TMA backward: per (tile, head), the key blocks that added it
  float* lse2;        // [H, total_q]  lse * log2(e), +inf for empty rows
  float* dsum;        // [H, total_q]  rowsum(dO * O)
  // Set by fwd()/bwd() for the kernels (the caller leaves them 0; a direct launcher call sets
  // d_out = d): the kernels' operand layout is [total, heads, d] with d a multiple of 8, the
  // outputs' layout [total, heads, d_out] (the caller's head dim).
  int d_out;
  const SplitScales* scales;  // split f32 only
};

// Pointers to the data tensors, layout [total, heads, d] (bshd packed), in the caller's dtype.
struct FaTensors {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  // Set by fwd()/bwd() when the operands were prepared (padded or split; the caller leaves them
  // null): q, k, v, dout then point at the prepared copies (the hi planes), these at the lo planes,
  // and dout_src at the caller's dO (which the backward's rowsum(dO·O) reads).
  const void* q_lo;
  const void* k_lo;
  const void* v_lo;
  const void* dout_lo;
  const void* dout_src;
};

// The head-dim bucket the kernels run (d is zero-padded up to it), or 0 if none fits.
int head_dim_bucket(int d);

// Forward: chooses the number of KV splits and returns the device workspace it needs in bytes.
size_t fwd_workspace_bytes(FaArgs* a);
// Runs the forward on `stream`. `workspace` must hold fwd_workspace_bytes(a) bytes.
cudaError_t fwd(FaArgs* a, const FaTensors& t, void* workspace, cudaStream_t stream);
// Forces a number of splits (1 = none); returns the workspace size for it. For tests/benchmarks.
size_t fwd_workspace_bytes_splits(FaArgs* a, int num_splits);

size_t bwd_workspace_bytes(const FaArgs* a);
cudaError_t bwd(FaArgs* a, const FaTensors& t, void* workspace, cudaStream_t stream);
// Dynamic shared memory per block (bytes) of the kernels one call runs, for the arguments' dtype,
// head dim, arch, f32_path, no_wgmma_bwd and smem_limit: the forward, the backward, and the
// deterministic backward.
struct SmemNeeds {
  size_t fwd, bwd, bwd_deterministic;
};
SmemNeeds smem_needs(const FaArgs& a);

// Points the backward scratch pointers of `a` into `workspace` (bwd() does this itself; for direct
// launcher calls of f16/bf16 problems whose head dim is a multiple of 8).
void bwd_setup(FaArgs* a, void* workspace);

}  // namespace fa
