// an operation's device scratch, and the stream sync on a failed call's way out.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

namespace {

// ---------------------------------------------------------------------------------------------
// an operation's device scratch
// ---------------------------------------------------------------------------------------------
// One stream-ordered allocation (cudaMallocAsync) that an operation owns: freed on its stream
// (cudaFreeAsync) when the owner goes out of scope, so every exit path frees it. Moves, no copies.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  DeviceScratch(DeviceScratch&& o) noexcept : ptr_(o.ptr_), stream_(o.stream_) { o.ptr_ = nullptr; }
  DeviceScratch& operator=(DeviceScratch&& o) noexcept {
    if (this != &o) {
      Free();
      ptr_ = o.ptr_;
      stream_ = o.stream_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  ~DeviceScratch() { Free(); }
  // n bytes on `stream` (n == 0: none, get() stays null); on failure get() is null.
  // Without retry, a failed allocation is not retried after a synchronise (MallocPooled).
  cudaError_t Alloc(size_t n, cudaStream_t stream, bool retry = true) {
    Free();
    stream_ = stream;
    if (n == 0) return cudaSuccess;
    cudaError_t e = retry ? MallocPooled(&ptr_, n, stream) : cudaMallocAsync(&ptr_, n, stream);
    if (e != cudaSuccess) ptr_ = nullptr;
    return e;
  }
  void* get() const { return ptr_; }

 private:
  void Free() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
    ptr_ = nullptr;
  }
  void* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// A call's workspace of n bytes: the context's kept one (grown when too small) up to
// kKeptWorkspace, else `own` allocated for this call. Retry as DeviceScratch::Alloc.
cudaError_t Workspace(CtxState* ctx, size_t n, DeviceScratch* own, void** ws, bool retry) {
  *ws = nullptr;
  if (n == 0) return cudaSuccess;
  if (n > CtxState::kKeptWorkspace) {
    cudaError_t e = own->Alloc(n, ctx->stream, retry);
    *ws = own->get();
    return e;
  }
  if (n > ctx->ws_cap) {
    const size_t cap = std::max<size_t>(n, size_t{1} << 20);
    void* p = nullptr;
    cudaError_t e = retry ? MallocPooled(&p, cap, ctx->stream) : cudaMallocAsync(&p, cap, ctx->stream);
    if (e != cudaSuccess) return e;
    if (ctx->ws_dev) cudaFreeAsync(ctx->ws_dev, ctx->stream);  // (behind the kernels that used it)
    ctx->ws_dev = p;
    ctx->ws_cap = cap;
  }
  *ws = ctx->ws_dev;
  return cudaSuccess;
}

// Waits for a stream when it goes out of scope, unless cancelled. Declared before an operation's
// DeviceScratch objects, it runs after their frees: an operation that fails settles only once the
// GPU has finished what it queued.
class SyncOnExit {
 public:
  explicit SyncOnExit(cudaStream_t stream) : stream_(stream) {}
  SyncOnExit(const SyncOnExit&) = delete;
  SyncOnExit& operator=(const SyncOnExit&) = delete;
  ~SyncOnExit() {
    if (stream_) cudaStreamSynchronize(stream_);
  }
  void Cancel() { stream_ = nullptr; }

 private:
  cudaStream_t stream_;
};

}  // namespace
