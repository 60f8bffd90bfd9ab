// Host interface of the KV-cache attention kernels (issue 12; DESIGN.md "KV cache"): the in-place
// append of kNew/vNew and flash-decoding over a contiguous or paged cache, for f32, f16 and bf16
// and every head dim 1..256 (kv_runs_ffma says which kernel a call runs). Plain C++, like
// fa_api.h, so that the binding and dev/kv_harness.cu share it. Every pointer is a device pointer;
// the caller has validated every size and (from their host copies) every index value already.
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace fa {

struct KvArgs {
  int dtype;               // DType (fa_api.h): kF32, kF16 or kBF16
  int B, H, Hkv, d;        // sequences, query heads, kv heads, head dim (1..256)
  int tq, tnew;            // queries and appended tokens per sequence
  int block_size;          // rows per cache block (a contiguous cache: its capacity)
  int max_blocks;          // block-table columns (a contiguous cache: 1)
  int64_t num_blocks;      // blocks in each cache tensor (a contiguous cache: B)
  int max_tk;              // max over b of len[b] + tnew, from the host copy (sizes the split)
  const int* seqlens;      // [B] tokens cached before the call
  const int* block_table;  // [B, max_blocks]; null for a contiguous cache (sequence b is block b)
  const float* alibi;      // [B * H] slopes, or null
  float scale, softcap;    // softcap 0 = none
  int win_left, win_right; // -1 = unbounded; causal is win_right = 0
  int num_sms;
  size_t smem_optin;       // shared memory a block may use (cudaDeviceProp::sharedMemPerBlockOptin); 0: unknown
  // Set to 1 by a kernel that finds a device index out of range (a device copy that differs from
  // the host copy the caller validated). Such an entry is skipped: nothing out of bounds is read
  // or written. Null: not reported.
  int* bad_index;
  // split-KV (filled by kv_workspace_bytes / kv_forward)
  int num_splits;
  float* oaccum;           // [num_splits, B * tq, H, d]
  float* lseaccum;         // [num_splits, H, B * tq]
};

// Every tensor in the call's dtype, rows of d elements (no alignment beyond the element's: the
// kernels copy rows in the widest chunks that divide d elements, kv_vec_bytes).
struct KvTensors {
  const void* q;     // [B, tq, H, d]
  void* k_cache;     // [num_blocks, block_size, Hkv, d]
  void* v_cache;
  const void* k_new; // [B, tnew, Hkv, d], or null when tnew = 0
  const void* v_new;
  void* o;           // [B, tq, H, d]
  float* lse;        // [B, H, tq]
};

// Whether a call runs the FFMA kernel (f32, or f16/bf16 with d % 8 != 0) rather than the
// tensor-core one (f16/bf16 with d a multiple of 8).
bool kv_runs_ffma(int dtype, int d);
// Dynamic shared memory per block of the KV-cache attention kernel that a call of this dtype and
// head dim d runs on a GPU whose blocks may use `smem_optin` bytes (0: unknown, the default
// configuration); 0 if none.
size_t kv_smem_bytes(int dtype, int d, size_t smem_optin);
// Chooses the number of key splits and returns the device workspace it needs in bytes.
size_t kv_workspace_bytes(KvArgs* a);
// Forces a number of splits (1 = none); returns the workspace size for it. For tests/benchmarks.
size_t kv_workspace_bytes_splits(KvArgs* a, int num_splits);
// Appends kNew/vNew (when tnew > 0), then attends, on `stream`; every sequence's rows are written
// before any sequence attends. `workspace` must hold kv_workspace_bytes(a) bytes.
cudaError_t kv_forward(KvArgs* a, const KvTensors& t, void* workspace, cudaStream_t stream);

}  // namespace fa
