// the context (one stream, its events and kept workspace) and the device buffers JavaScript holds.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

namespace {

// ---------------------------------------------------------------------------------------------
// the context (one stream) and device buffers
// ---------------------------------------------------------------------------------------------
struct CtxState {
  int device = 0;
  bool dry = false;
  cudaStream_t stream = nullptr;
  // false when the caller gave the stream (Context option `stream`): never destroyed here
  bool own_stream = true;
  bool started = false;  // the device was set up (the destructor has something to give back)
  int sms = 132;
  int arch = 0;
  size_t smem_optin = 0;  // cudaDeviceProp::sharedMemPerBlockOptin
  std::string name;
  // Escape hatches (README.md), read once when the context is made: FA_CUDA_NO_WGMMA=1 runs the
  // mma.sync kernels everywhere, FA_CUDA_NO_WGMMA_BWD=1 only for the backward;
  // FA_CUDA_LAUNCH_ON_WORKER=1 queues every call from a worker thread (Op::Start).
  bool no_wgmma = EnvFlag("FA_CUDA_NO_WGMMA"), no_wgmma_bwd = EnvFlag("FA_CUDA_NO_WGMMA_BWD"),
       launch_on_worker = EnvFlag("FA_CUDA_LAUNCH_ON_WORKER");
  // Operations run one at a time, in the order JavaScript issued them: each takes a ticket on
  // the main thread when queued, and its worker waits for its turn (libuv starts work in FIFO
  // order, so the earliest ticket is always running).
  std::mutex mu;
  std::condition_variable cv;
  // An attention call may pass its turn once its work is queued (Op::PassTurn); `completed` then
  // keeps the operations settling in the order they were issued.
  uint64_t next_ticket = 0, serving = 0, completed = 0;
  // Main thread only: promises settled so far, and those waiting for an earlier one (Op::Settle).
  uint64_t settled = 0;
  std::map<uint64_t, std::function<void()>> parked;
  // The small inputs of the last attention call on the device (sequence offsets, ALiBi slopes),
  // reused while a call's are the same (every call of a fixed-shape loop): a copy from pageable
  // memory may synchronise with the stream (CUDA: "might be synchronous"), which would keep a
  // call from queueing behind the one before, and would block the main thread (Op::Start).
  // Overwriting them is safe: the copy is queued on the same stream, behind every kernel that
  // reads the old ones.
  void* small_dev = nullptr;
  size_t small_cap = 0;
  std::vector<int> small_host;
  // KV-cache calls: mapped host ints the kernels set when a device index is out of range, one
  // slot per call in flight (KvOp::Slot), so that a call can queue behind one whose flag is unread.
  static constexpr uint64_t kKvSlots = 128;
  int* kv_flag_host = nullptr;  // 2 * kKvSlots flags: the slots of queued calls, then those of done ones
  int* kv_flag_dev = nullptr;
  // KV-cache calls done on the calling thread (Op::StartNow) have no Await to read their flag:
  // each takes the next of kKvSlots further flags (kv_now_next) and leaves its event and its
  // name there. The flag is read when the slot comes round again (its event done) or at the next
  // synchronize or download (CheckKvNow); a set one fails that operation, naming the call.
  uint64_t kv_now_next = 0;
  cudaEvent_t kv_now_ev[kKvSlots] = {};
  std::string kv_now_label[kKvSlots];
  std::string kv_now_error;  // the first such failure not yet reported (under mu)
  // (under mu) Reads the flag of done slot i: a set one becomes kv_now_error; the slot is free after.
  void ReadKvNowSlot(uint64_t i) {
    volatile int* f = reinterpret_cast<volatile int*>(kv_flag_host) + kKvSlots + i;
    if (*f != 0 && kv_now_error.empty())
      kv_now_error = kv_now_label[i] + " failed: a device index tensor (cacheSeqlens or blockTable) held a value out of range that its host copy did not; the kernels skipped those entries (nothing out of bounds was read or written)";
    *f = 0;
    if (kv_now_ev[i]) Recycle(kv_now_ev[i]);
    kv_now_ev[i] = nullptr;
  }
  // (any thread, with the stream's work done) Reads every used slot; returns the failure to report and clears it.
  std::string CheckKvNow() {
    std::lock_guard<std::mutex> lk(mu);
    if (kv_flag_host)
      for (uint64_t i = 0; i < kKvSlots; ++i)
        if (kv_now_ev[i]) ReadKvNowSlot(i);
    std::string e;
    e.swap(kv_now_error);
    return e;
  }
  // Small uploads (writeIndex, uploadIndex: a decode loop's lengths each step) are staged in
  // pinned slots, one per call in flight, so that the copy is truly asynchronous and queues on
  // the calling thread like a kernel (CopyOp). Made by the first small upload, on a worker.
  static constexpr uint64_t kUploadSlots = 128;
  static constexpr size_t kUploadSlotBytes = 16384;
  uint8_t* upload_ring = nullptr;
  // A workspace kept between calls (split-KV partials, tile counters: what most calls need is
  // small), so that a call does not allocate and free one: calls run in stream order on one
  // stream, so the next call's kernels use it only after the last call's are done. Larger
  // workspaces are allocated for their call (KeptWorkspace).
  static constexpr size_t kKeptWorkspace = size_t{32} << 20;
  void* ws_dev = nullptr;
  size_t ws_cap = 0;
  // Events of finished calls, reused by later ones (an op's destructor runs once its work is done:
  // Await waited for the event, or a failure was synchronised), instead of a create and a destroy
  // on every call.
  std::mutex ev_mu;
  std::vector<cudaEvent_t> spare_events;
  cudaError_t NewEvent(cudaEvent_t* ev) {
    {
      std::lock_guard<std::mutex> lk(ev_mu);
      if (!spare_events.empty()) {
        *ev = spare_events.back();
        spare_events.pop_back();
        return cudaSuccess;
      }
    }
    return cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
  }
  void Recycle(cudaEvent_t ev) {
    std::lock_guard<std::mutex> lk(ev_mu);
    if (spare_events.size() < 256) {
      spare_events.push_back(ev);
    } else {
      cudaEventDestroy(ev);
    }
  }
  ~CtxState() {
    if (started) {
      cudaSetDevice(device);
      if (small_dev) cudaFreeAsync(small_dev, stream);
      if (ws_dev) cudaFreeAsync(ws_dev, stream);
      cudaStreamSynchronize(stream);
      if (own_stream) cudaStreamDestroy(stream);
      TrimPool(device);  // what the default pool kept for this context's calls goes back (KeepPoolMemory)
    }
    for (cudaEvent_t ev : kv_now_ev)
      if (ev) cudaEventDestroy(ev);
    for (cudaEvent_t ev : spare_events) cudaEventDestroy(ev);
    if (kv_flag_host) cudaFreeHost(kv_flag_host);
    if (upload_ring) cudaFreeHost(upload_ring);
  }
};

class Buffer;
class Context;
std::unordered_set<const void*> g_live_buffers;   // main thread only
std::unordered_set<const void*> g_live_contexts;  // main thread only
int kToken = 0;                                   // its address proves a constructor call came from C++

struct AddonData {
  Napi::FunctionReference buffer_ctor;
};

class Buffer : public Napi::ObjectWrap<Buffer> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "DeviceBuffer",
                       {InstanceAccessor<&Buffer::GetBytes>("bytes"), InstanceAccessor<&Buffer::GetDisposed>("disposed"),
                        InstanceAccessor<&Buffer::GetAddress>("address"), InstanceAccessor<&Buffer::GetExternal>("external"),
                        InstanceMethod<&Buffer::Dispose>("dispose")});
  }
  Buffer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Buffer>(info) {
    Napi::Env env = info.Env();
    if (info.Length() != 1 || !info[0].IsExternal() || info[0].As<Napi::External<int>>().Data() != &kToken)
      Throw(env, "E_ARG", "DeviceBuffer cannot be constructed from JavaScript; use Context.alloc(bytes)");
    g_live_buffers.insert(this);
  }
  ~Buffer() override {
    g_live_buffers.erase(this);
    inflight_ = 0;
    Release();
  }
  void Setup(std::shared_ptr<CtxState> ctx, void* ptr, size_t bytes, bool external = false) {
    ctx_ = std::move(ctx);
    ptr_ = ptr;
    bytes_ = bytes;
    external_ = external;
  }
  void Release() {
    if (ptr_ && inflight_ == 0) {
      if (!ctx_->dry && !external_) {  // (a caller's memory stays the caller's)
        cudaSetDevice(ctx_->device);
        cudaFreeAsync(ptr_, ctx_->stream);
      }
      ptr_ = nullptr;
    }
  }
  Napi::Value GetBytes(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(bytes_)); }
  Napi::Value GetDisposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), disposed_); }
  // The device address, for another addon on the same device (0 once disposed).
  Napi::Value GetAddress(const Napi::CallbackInfo& info) {
    return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(disposed_ ? nullptr : ptr_)));
  }
  Napi::Value GetExternal(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), external_); }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    disposed_ = true;
    Release();  // deferred until pending operations finish
    return info.Env().Undefined();
  }

  std::shared_ptr<CtxState> ctx_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int inflight_ = 0;
  bool disposed_ = false;
  bool external_ = false;  // wraps a caller's memory (Context.wrap): never freed here
};

// Whether two buffers' bytes overlap (wrapped buffers may be ranges of one allocation).
bool Overlaps(const Buffer* a, const Buffer* b) {
  if (a == b) return true;
  if (a->bytes_ == 0 || b->bytes_ == 0) return false;
  const uintptr_t x = reinterpret_cast<uintptr_t>(a->ptr_), y = reinterpret_cast<uintptr_t>(b->ptr_);
  return x < y + b->bytes_ && y < x + a->bytes_;
}

// Finds the live Buffer behind a JS value, or throws. Never trusts the prototype chain.
Buffer* UnwrapBuffer(Napi::Env env, Napi::Value v, const std::shared_ptr<CtxState>& ctx, const std::string& what) {
  if (!v.IsObject()) Throw(env, "E_ARG", what + " must be a device buffer");
  void* raw = nullptr;
  if (napi_unwrap(env, v, &raw) != napi_ok || raw == nullptr || g_live_buffers.count(raw) == 0) {
    // napi_unwrap may leave an exception pending on some failures
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (pending) {
      napi_value ex;
      napi_get_and_clear_last_exception(env, &ex);
    }
    Throw(env, "E_ARG", what + " is not a device buffer made by this binding");
  }
  Buffer* b = static_cast<Buffer*>(raw);
  if (b->disposed_ || (b->ptr_ == nullptr && b->bytes_ > 0)) Throw(env, "E_ARG", what + " is a disposed device buffer");
  if (b->ctx_ != ctx) Throw(env, "E_ARG", what + " belongs to another CUDA backend (context)");
  return b;
}

}  // namespace
