// What binding.cc lends to the context-parallel files (cp_binding.cc: shard ops on the device;
// nccl_comm.cc: the NCCL communicator), so that they need no other change to binding.cc:
// holding a device buffer for an asynchronous operation, and errors with a `code`.
#pragma once
#include <cuda_runtime_api.h>
#include <napi.h>

#include <memory>
#include <string>

namespace fa_bridge {

// A device buffer made by Context.alloc, held for an asynchronous operation: until Release it
// is neither freed (dispose() defers the free) nor collected. Hold and Release run on the
// main thread only.
struct HeldBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  int device = 0;
  bool dry = false;                // made by a dry-run context: never touch it with CUDA
  cudaStream_t stream = nullptr;   // the owning context's stream
  const void* context = nullptr;   // identity of the owning context
  const void* id = nullptr;        // identity of the buffer (dry-run buffers share a fake ptr)
  std::shared_ptr<void> keep;      // keeps the owning context's state (and stream) alive
  void* token = nullptr;
};

// Throws a JS Error (code E_ARG) unless v is a live, undisposed buffer made by this binding.
HeldBuffer Hold(Napi::Env env, Napi::Value v, const std::string& what);
// Ends the hold; a buffer disposed meanwhile is freed now. Idempotent.
void Release(HeldBuffer& b);

Napi::Error MakeError(Napi::Env env, const std::string& code, const std::string& msg);

// Defined in cp_binding.cc and nccl_comm.cc; binding.cc's Init calls them.
void InitShardOps(Napi::Env env, Napi::Object exports);
void InitNccl(Napi::Env env, Napi::Object exports);

}  // namespace fa_bridge
