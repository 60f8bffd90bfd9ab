// Host interface of the @fa CUDA kernels. Plain C++ so that both the node-addon-api binding
// (compiled by the host compiler) and the standalone harness (dev/harness.cu) can use it.
// Every pointer here is a device pointer. The caller has validated every size already.
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace fa {

enum DType : int { kF16 = 0, kBF16 = 1 };

struct FaArgs {
  int dtype;          // DType
  int B, H, Hkv, d;   // batch (sequences), heads, kv heads, head dim (multiple of 8, <= 256)
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
  // forward split-KV (filled by the launcher)
  int num_splits;
  float* oaccum;      // [num_splits, total_q, H, d]
  float* lseaccum;    // [num_splits, H, total_q]
  // backward scratch (filled by the launcher)
  float* dq_accum;    // [total_q, H, d]
  float* lse2;        // [H, total_q]  lse * log2(e), +inf for empty rows
  float* dsum;        // [H, total_q]  rowsum(dO * O)
};

// Pointers to the data tensors, layout [total, heads, d] (bshd packed).
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
// Dynamic shared memory per block (bytes) of the kernels one call runs, for head dim d on a GPU
// of compute capability `arch` (x10): the forward, the backward, and the deterministic backward.
struct SmemNeeds {
  size_t fwd, bwd, bwd_deterministic;
};
SmemNeeds smem_needs(int arch, int d, int no_wgmma_bwd);

// Points the backward scratch pointers of `a` into `workspace` (bwd() does this itself).
void bwd_setup(FaArgs* a, void* workspace);

}  // namespace fa
