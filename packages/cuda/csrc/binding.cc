// node-addon-api binding of the @fa CUDA kernels.
//
// Safety contract: whatever JavaScript passes, this file never reads or writes out of bounds.
// Every argument is type-checked, every size is checked against limits and against the byte
// length of the buffer it describes (exactly), buffers are native objects found in a registry
// of live ones (never trusted by prototype), and all of it happens before any CUDA call.
// Errors are JS Errors with a `code` (E_ARG, E_SHAPE, E_DTYPE, E_TOO_LARGE, E_UNSUPPORTED,
// E_OOM, E_DEVICE); CUDA errors name the CUDA error. A failed call frees what it allocated.
//
// Objects:
//   probe()                         -> { ok, reason?, device?, sms?, cc?, driver?, runtime? }
//   new Context({ device?, dryRun? })  one CUDA stream; dryRun validates but never touches CUDA
//     ctx.alloc(bytes)              -> Buffer (device memory, stream-ordered)
//     ctx.upload(buf, typedArray)   -> Promise<void>   (byteLength must equal buf.bytes)
//     ctx.download(buf, typedArray) -> Promise<void>
//     ctx.forward(spec)             -> Promise<{ splits }>   spec: dtype 'f32' | 'f16' | 'bf16', any head dim
//                                   1..256, f32Path 'auto' | 'tensor-cores' | 'ffma' (f32 only)
//     ctx.backward(spec)            -> Promise<void>
//     ctx.kvForward(spec)           -> Promise<{ splits }>  KV-cache append + attention (issue 12); dtype
//                                   'f32' | 'f16' | 'bf16', any head dim 1..256
//     ctx.memInfo()                 -> { free, total }
//     ctx.smemNeeds(d, dtype?, f32Path?, limit?) -> { fwd, bwd, bwdDeterministic, kv, limit }
//     ctx.synchronize()             -> Promise<void>
//     ctx.dispose()
//   Buffer: .bytes, .disposed, .dispose()   (a finalizer frees it too)
#include <cuda_runtime_api.h>
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "binding_bridge.h"
#include "fa_api.h"
#include "fa_kvcache.h"

namespace {

// ---------------------------------------------------------------------------------------------
// errors
// ---------------------------------------------------------------------------------------------
Napi::Error MakeError(Napi::Env env, const std::string& code, const std::string& msg) {
  Napi::Error e = Napi::Error::New(env, msg);
  e.Value().Set("code", Napi::String::New(env, code));
  return e;
}
[[noreturn]] void Throw(Napi::Env env, const char* code, const std::string& msg) { throw MakeError(env, code, msg); }

bool EnvFlag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }
const char* CudaCode(cudaError_t e) { return e == cudaErrorMemoryAllocation ? "E_OOM" : "E_DEVICE"; }

// The device's default memory pool (cudaMallocAsync's) keeps what is freed for the next call
// instead of handing it back to the driver at every stream synchronisation (its default release
// threshold is 0): each call synchronises, so every call used to map its outputs and workspace
// afresh: 0.4-0.9 ms a call at 16K tokens (runs 68 and 70). MallocPooled gives the pool's unused
// memory back and retries once when an allocation fails; memInfo() counts it as free.
static void KeepPoolMemory(int device) {
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return;
  uint64_t keep = UINT64_MAX;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
}
static void TrimPool(int device) {
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) cudaMemPoolTrimTo(pool, 0);
}
// Bytes the default pool holds but no allocation uses.
static size_t PoolIdleBytes(int device) {
  cudaMemPool_t pool;
  uint64_t reserved = 0, used = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess || cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess)
    return 0;
  return reserved > used ? static_cast<size_t>(reserved - used) : 0;
}
static cudaError_t MallocPooled(void** p, size_t n, cudaStream_t stream) {
  cudaError_t e = cudaMallocAsync(p, n, stream);
  if (e != cudaErrorMemoryAllocation) return e;
  cudaGetLastError();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return e;
  cudaStreamSynchronize(stream);  // (what this stream freed is then free to trim)
  TrimPool(device);
  return cudaMallocAsync(p, n, stream);
}

// ---------------------------------------------------------------------------------------------
// the context (one stream) and device buffers
// ---------------------------------------------------------------------------------------------
struct CtxState {
  int device = 0;
  bool dry = false;
  cudaStream_t stream = nullptr;
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
  int* kv_flag_host = nullptr;
  int* kv_flag_dev = nullptr;
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
    if (stream) {
      cudaSetDevice(device);
      if (small_dev) cudaFreeAsync(small_dev, stream);
      if (ws_dev) cudaFreeAsync(ws_dev, stream);
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
      TrimPool(device);  // what the default pool kept for this context's calls goes back (KeepPoolMemory)
    }
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
  void Setup(std::shared_ptr<CtxState> ctx, void* ptr, size_t bytes) {
    ctx_ = std::move(ctx);
    ptr_ = ptr;
    bytes_ = bytes;
  }
  void Release() {
    if (ptr_ && inflight_ == 0) {
      if (!ctx_->dry) {
        cudaSetDevice(ctx_->device);
        cudaFreeAsync(ptr_, ctx_->stream);
      }
      ptr_ = nullptr;
    }
  }
  Napi::Value GetBytes(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(bytes_)); }
  Napi::Value GetDisposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), disposed_); }
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
};

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

// ---------------------------------------------------------------------------------------------
// checked readers
// ---------------------------------------------------------------------------------------------
Napi::Object AsObject(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsObject() || v.IsArray() || v.IsFunction()) Throw(env, "E_ARG", std::string(what) + " must be an object");
  return v.As<Napi::Object>();
}
int64_t GetInt(Napi::Env env, Napi::Object o, const char* key, int64_t lo, int64_t hi) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) Throw(env, "E_ARG", std::string(key) + " must be a number");
  const double x = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(x) || std::floor(x) != x) Throw(env, "E_ARG", std::string(key) + " must be an integer");
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi))
    Throw(env, "E_TOO_LARGE", std::string(key) + " = " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int64_t>(x);
}
double GetNum(Napi::Env env, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) Throw(env, "E_ARG", std::string(key) + " must be a number");
  const double x = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(x)) Throw(env, "E_ARG", std::string(key) + " must be finite");
  return x;
}
bool GetBool(Napi::Env env, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return false;
  if (!v.IsBoolean()) Throw(env, "E_ARG", std::string(key) + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}
int ParseDtype(Napi::Env env, Napi::Value v) {
  if (!v.IsString()) Throw(env, "E_DTYPE", "dtype must be 'f32', 'f16' or 'bf16'");
  const std::string s = v.As<Napi::String>().Utf8Value();
  if (s == "f32") return fa::kF32;
  if (s == "f16") return fa::kF16;
  if (s == "bf16") return fa::kBF16;
  Throw(env, "E_DTYPE", "dtype must be 'f32', 'f16' or 'bf16', got '" + s + "'");
}
int ParseF32Path(Napi::Env env, Napi::Value v) {
  if (v.IsUndefined()) return fa::kF32Auto;
  if (!v.IsString()) Throw(env, "E_ARG", "f32Path must be 'auto', 'tensor-cores' or 'ffma'");
  const std::string s = v.As<Napi::String>().Utf8Value();
  if (s == "auto") return fa::kF32Auto;
  if (s == "tensor-cores") return fa::kF32TensorCores;
  if (s == "ffma") return fa::kF32Ffma;
  Throw(env, "E_ARG", "f32Path must be 'auto', 'tensor-cores' or 'ffma', got '" + s + "'");
}
// Copies a typed array of the given type and exact length into a vector (so a later detach or
// resize of the JS buffer cannot matter).
template <typename E>
std::vector<E> CopyTyped(Napi::Env env, Napi::Value v, napi_typedarray_type type, size_t want, const std::string& what) {
  if (!v.IsTypedArray()) Throw(env, "E_DTYPE", what + " must be a typed array");
  Napi::TypedArray ta = v.As<Napi::TypedArray>();
  if (ta.TypedArrayType() != type) Throw(env, "E_DTYPE", what + " has the wrong typed-array type");
  napi_typedarray_type t;
  size_t len = 0;
  void* data = nullptr;
  napi_value ab;
  size_t off = 0;
  if (napi_get_typedarray_info(env, ta, &t, &len, &data, &ab, &off) != napi_ok) Throw(env, "E_ARG", what + ": cannot read the typed array");
  if (len != want) Throw(env, "E_SHAPE", what + " must have " + std::to_string(want) + " elements, has " + std::to_string(len));
  if (want > 0 && data == nullptr) Throw(env, "E_ARG", what + " is detached");
  std::vector<E> out(want);
  if (want) std::memcpy(out.data(), data, want * sizeof(E));
  return out;
}

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

// ---------------------------------------------------------------------------------------------
// asynchronous operations
// ---------------------------------------------------------------------------------------------
class Op : public Napi::AsyncWorker {
 public:
  Op(Napi::Env env, std::shared_ptr<CtxState> ctx)
      : Napi::AsyncWorker(env, "fa-cuda-op"), deferred_(Napi::Promise::Deferred::New(env)), ctx_(std::move(ctx)) {}
  void Hold(Buffer* b) {
    b->inflight_++;
    held_.push_back(b);
    refs_.push_back(Napi::Persistent(b->Value()));
  }
  Napi::Promise Promise() { return deferred_.Promise(); }
  // Takes the operation's place in issue order. An operation that can queue its work on the
  // calling thread (LaunchesHere) does so when every earlier one has queued its own (the turn is
  // free): stream order is then issue order, and the call skips the hop to a worker thread and
  // back before its kernels start (0.1-0.2 ms a call awaited, KERNEL_NOTES "Calls through Node").
  // The worker then only waits for the work to finish and settles the promise.
  void Start() {
    stamp_[0] = NowUs();
    {
      std::lock_guard<std::mutex> lk(ctx_->mu);
      ticket_ = ctx_->next_ticket++;
      // (the turn first: LaunchesHere may read what an operation holding it is changing; and no
      // deeper than kMainAhead unfinished calls, past which a launch itself may wait for the GPU)
      here_ = ctx_->serving == ticket_ && ticket_ - ctx_->completed < kMainAhead && !ctx_->launch_on_worker && LaunchesHere();
    }
    if (here_) {
      here_ok_ = Guarded([this] { return Run(); });
      stamp_[1] = NowUs();
      if (to_worker_) {  // Run queued nothing and set no error; the worker runs it (it keeps the turn)
        here_ = false;
      } else {
        PassTurn();
      }
    }
    Queue();
  }
  static constexpr uint64_t kMainAhead = 64;

 protected:
  // Queues the operation's work while it holds the turn (no other operation queues meanwhile);
  // may wait for it too. Runs on a worker thread, or on the main thread when LaunchesHere.
  // Returns false (after setting code_/msg_) on failure.
  virtual bool Run() = 0;
  // Waits for what Run queued without holding the turn, once every earlier operation settled.
  virtual bool Await() { return true; }
  // Whether Run may run on the main thread. There it must not wait for the GPU: where it would
  // (an allocation to retry after a synchronise), it queues nothing and sets to_worker_, and the
  // worker runs it again; a failure after something was queued is synchronised by the worker.
  virtual bool LaunchesHere() const { return false; }
  bool OnMain() const { return here_; }
  virtual Napi::Value Result(Napi::Env env) { return env.Undefined(); }
  bool Fail(cudaError_t e, const std::string& what) {
    code_ = CudaCode(e);
    msg_ = "CUDA error in " + what + ": " + CudaText(e);
    return false;
  }
  // Runs f on this thread with the context's device current; a dry run skips it.
  template <class F>
  bool Guarded(F f) {
    if (ctx_->dry) return true;
    try {
      cudaGetLastError();  // (a failure left on this thread by an earlier operation is not ours)
      cudaError_t e = cudaSetDevice(ctx_->device);
      return e == cudaSuccess ? f() : Fail(e, "cudaSetDevice");
    } catch (const std::exception& x) {  // (bad_alloc): the turn must still pass, or every later call waits forever
      code_ = "E_DEVICE";
      msg_ = std::string("internal error: ") + x.what();
      return false;
    }
  }
  void Execute() override {
    stamp_[2] = NowUs();
    bool ok = here_ok_;
    if (here_ && !ok && !ctx_->dry) cudaStreamSynchronize(ctx_->stream);  // (settle a failure once the GPU is done with it)
    if (!here_) {
      {
        std::unique_lock<std::mutex> lk(ctx_->mu);
        ctx_->cv.wait(lk, [&] { return ctx_->serving == ticket_; });
      }
      ok = Guarded([this] { return Run(); });
      stamp_[1] = NowUs();
    }
    PassTurn();
    {  // settle in issue order: an operation that passed its turn early may finish after a later one
      std::unique_lock<std::mutex> lk(ctx_->mu);
      ctx_->cv.wait(lk, [&] { return ctx_->completed == ticket_; });
    }
    // (only the oldest unsettled operation waits on the GPU, so one thread at most spins)
    if (ok) ok = Guarded([this] { return Await(); });
    stamp_[3] = NowUs();
    {
      std::lock_guard<std::mutex> lk(ctx_->mu);
      ctx_->completed++;
    }
    ctx_->cv.notify_all();
    if (!ok) SetError(msg_);
  }
  // Lets the next operation start; an operation whose stream work is all queued may pass its turn
  // before that work has finished (stream order keeps the two in sequence on the GPU).
  void PassTurn() {
    if (passed_) return;
    passed_ = true;
    {
      std::lock_guard<std::mutex> lk(ctx_->mu);
      ctx_->serving++;
    }
    ctx_->cv.notify_all();
  }
  void Finish() {
    for (Buffer* b : held_) {
      if (g_live_buffers.count(b)) {
        b->inflight_--;
        if (b->disposed_) b->Release();
      }
    }
    held_.clear();
    refs_.clear();
  }
  void OnOK() override {
    stamp_[4] = NowUs();
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    Napi::Value r;
    try {
      r = Result(env);
    } catch (const Napi::Error& e) {
      Finish();
      Settle(false, e.Value());
      return;
    }
    Finish();
    Settle(true, r);
  }
  void OnError(const Napi::Error&) override {
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    Finish();
    Settle(false, MakeError(env, code_, msg_).Value());
  }
  // Resolves or rejects the promise once every earlier operation's has been: the workers finish in
  // issue order (Execute), but libuv may run two completions on the main thread the other way round.
  void Settle(bool ok, Napi::Value v) {
    Napi::Env env = Env();
    if (ticket_ == ctx_->settled && ctx_->parked.empty()) {  // in order: no reference needed
      ctx_->settled++;
      ok ? deferred_.Resolve(v) : deferred_.Reject(v);
      return;
    }
    if (!v.IsUndefined() && !v.IsObject()) {  // (a reference holds objects only)
      ok = false;
      v = MakeError(env, "E_DEVICE", "internal error: an operation settled with a value that is not an object").Value();
    }
    std::shared_ptr<Napi::Reference<Napi::Value>> ref;
    if (!v.IsUndefined()) ref = std::make_shared<Napi::Reference<Napi::Value>>(Napi::Persistent(v));
    Napi::Promise::Deferred d = deferred_;
    ctx_->parked.emplace(ticket_, [env, d, ref, ok]() mutable {
      Napi::Value x = ref ? ref->Value() : env.Undefined();
      ok ? d.Resolve(x) : d.Reject(x);
    });
    Drain();
  }
  // Settles the parked promises whose predecessors have all settled.
  void Drain() {
    while (!ctx_->parked.empty() && ctx_->parked.begin()->first == ctx_->settled) {
      std::function<void()> f = std::move(ctx_->parked.begin()->second);
      ctx_->parked.erase(ctx_->parked.begin());
      ctx_->settled++;
      try {
        f();
      } catch (const Napi::Error&) {  // (the environment going away): the rest still settle
      }
    }
  }

  Napi::Promise::Deferred deferred_;
  std::shared_ptr<CtxState> ctx_;
  std::vector<Buffer*> held_;
  std::vector<Napi::ObjectReference> refs_;
  std::string code_ = "E_DEVICE", msg_;
  uint64_t ticket_ = 0;
  bool passed_ = false;
  bool here_ = false, here_ok_ = false;  // Run ran on the main thread (Start), and how it went
  bool to_worker_ = false;               // Run on the main thread handed the call to the worker
  // Where the call's time went, in µs of the monotonic clock (process.hrtime's): called, work
  // queued, worker started, work finished, back on the main thread. Attention calls return it.
  double stamp_[5] = {0, 0, 0, 0, 0};
  static double NowUs() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
};

class CopyOp : public Op {
 public:
  CopyOp(Napi::Env env, std::shared_ptr<CtxState> ctx, Buffer* b, bool up, std::vector<uint8_t> staging, Napi::Value target)
      : Op(env, std::move(ctx)), buf_(b), up_(up), staging_(std::move(staging)) {
    Hold(b);
    if (!up) {
      target_ = Napi::Persistent(target.As<Napi::Object>());
      staging_.resize(b->bytes_);
    }
  }
  ~CopyOp() override {
    if (done_) ctx_->Recycle(done_);
  }

 protected:
  // A small upload queues on the calling thread from its pinned slot (CtxState::upload_ring):
  // slot ticket mod kUploadSlots is free, because Op::Start queues here only while fewer than
  // kMainAhead < kUploadSlots calls before this one are unfinished, and a call that used the slot
  // finished only once its copy had (Await). Larger copies and downloads take the worker.
  bool Small() const { return up_ && !staging_.empty() && staging_.size() <= CtxState::kUploadSlotBytes; }
  bool LaunchesHere() const override { return ctx_->dry || (Small() && ctx_->upload_ring); }
  bool Run() override {
    static_assert(Op::kMainAhead < CtxState::kUploadSlots, "a small upload queued on the calling thread must find its slot free");
    if (staging_.empty()) return true;
    cudaError_t e;
    if (OnMain()) {
      uint8_t* slot = ctx_->upload_ring + (ticket_ % CtxState::kUploadSlots) * CtxState::kUploadSlotBytes;
      std::memcpy(slot, staging_.data(), staging_.size());
      e = cudaMemcpyAsync(buf_->ptr_, slot, staging_.size(), cudaMemcpyHostToDevice, ctx_->stream);
      if (e == cudaSuccess) e = ctx_->NewEvent(&done_);
      if (e != cudaSuccess) done_ = nullptr;
      if (e == cudaSuccess) e = cudaEventRecord(done_, ctx_->stream);
      return e == cudaSuccess ? true : Fail(e, "upload");
    }
    if (Small() && !ctx_->upload_ring) {  // (the first small upload: later ones queue on the calling thread)
      void* h = nullptr;
      if (cudaHostAlloc(&h, CtxState::kUploadSlots * CtxState::kUploadSlotBytes, cudaHostAllocDefault) == cudaSuccess) {
        ctx_->upload_ring = static_cast<uint8_t*>(h);
      } else {
        cudaGetLastError();  // (no pinned memory to spare: small uploads keep taking the worker)
      }
    }
    e = up_ ? cudaMemcpyAsync(buf_->ptr_, staging_.data(), staging_.size(), cudaMemcpyHostToDevice, ctx_->stream)
            : cudaMemcpyAsync(staging_.data(), buf_->ptr_, staging_.size(), cudaMemcpyDeviceToHost, ctx_->stream);
    if (e != cudaSuccess) return Fail(e, up_ ? "upload" : "download");
    e = cudaStreamSynchronize(ctx_->stream);
    if (e != cudaSuccess) return Fail(e, up_ ? "upload" : "download");
    return true;
  }
  bool Await() override {
    if (ctx_->dry || !done_) return true;
    cudaError_t e = cudaEventSynchronize(done_);
    return e == cudaSuccess ? true : Fail(e, "upload");
  }
  Napi::Value Result(Napi::Env env) override {
    if (up_) return env.Undefined();
    // Re-validate the destination: it may have been detached or replaced meanwhile.
    Napi::Value v = target_.Value();
    if (!v.IsTypedArray()) Throw(env, "E_ARG", "download target is no longer a typed array");
    napi_typedarray_type t;
    size_t len = 0;
    void* data = nullptr;
    napi_value ab;
    size_t off = 0;
    if (napi_get_typedarray_info(env, v, &t, &len, &data, &ab, &off) != napi_ok) Throw(env, "E_ARG", "download target unreadable");
    const size_t bytes = len * v.As<Napi::TypedArray>().ElementSize();
    if (bytes != staging_.size() || (bytes > 0 && data == nullptr)) Throw(env, "E_ARG", "download target was detached or resized during the copy");
    if (bytes) std::memcpy(data, staging_.data(), bytes);
    return env.Undefined();
  }

 private:
  Buffer* buf_;
  bool up_;
  std::vector<uint8_t> staging_;
  Napi::ObjectReference target_;
  cudaEvent_t done_ = nullptr;
};

class AttnOp : public Op {
 public:
  AttnOp(Napi::Env env, std::shared_ptr<CtxState> ctx, bool backward) : Op(env, std::move(ctx)), backward_(backward) {}
  ~AttnOp() override {
    if (done_) ctx_->Recycle(done_);
  }
  fa::FaArgs args{};
  fa::FaTensors tens{};
  bool backward_;
  int splits_ = 1;
  // The call's small inputs in the order they sit on the device (CtxState::small_dev): cu_q and
  // cu_k (n_cu = B + 1 entries each), then the ALiBi slopes' bits when there are any.
  std::vector<int> small;
  size_t n_cu = 0;
  bool has_alibi = false;
  void SetSmall(std::vector<int> cuq, const std::vector<int>& cuk, const std::vector<float>& alibi) {
    n_cu = cuq.size();
    has_alibi = !alibi.empty();
    small = std::move(cuq);
    small.insert(small.end(), cuk.begin(), cuk.end());
    small.resize(2 * n_cu + alibi.size());
    if (has_alibi) std::memcpy(small.data() + 2 * n_cu, alibi.data(), alibi.size() * sizeof(float));
  }

 protected:
  // Copies the small inputs to the device unless the last call's were the same.
  cudaError_t SmallInputs() {
    if (small == ctx_->small_host && ctx_->small_dev) return cudaSuccess;
    const size_t bytes = small.size() * sizeof(int);
    ctx_->small_host.clear();  // (stale until the copy below is queued)
    if (bytes > ctx_->small_cap) {
      if (ctx_->small_dev) cudaFreeAsync(ctx_->small_dev, ctx_->stream);
      ctx_->small_dev = nullptr;
      ctx_->small_cap = 0;
      cudaError_t e = MallocPooled(&ctx_->small_dev, std::max<size_t>(bytes, 256), ctx_->stream);
      if (e != cudaSuccess) {
        ctx_->small_dev = nullptr;
        return e;
      }
      ctx_->small_cap = std::max<size_t>(bytes, 256);
    }
    // (queued behind every kernel that reads the old values: same stream)
    cudaError_t e = cudaMemcpyAsync(ctx_->small_dev, small.data(), bytes, cudaMemcpyHostToDevice, ctx_->stream);
    if (e == cudaSuccess) ctx_->small_host = small;
    return e;
  }

  // On the main thread only when no copy is needed (its wait would block JavaScript): read with
  // the turn free (Start), so no operation is changing the cache meanwhile.
  bool LaunchesHere() const override { return ctx_->dry || (ctx_->small_dev && small == ctx_->small_host); }
  // Queues the kernels and an event behind them, then passes the turn: the next call may queue
  // its work while ours runs (its host work then overlaps our kernels).
  bool Run() override {
    args.num_sms = ctx_->sms;
    args.arch = ctx_->no_wgmma ? 0 : ctx_->arch;
    args.no_wgmma_bwd = ctx_->no_wgmma_bwd ? 1 : 0;
    args.smem_limit = ctx_->smem_optin;
    {  // supports() declines these first; this keeps a direct binding call from a launch failure
      // (checked before anything is queued: a decline then waits for no one)
      const fa::SmemNeeds need = fa::smem_needs(args);
      const size_t n = !backward_ ? need.fwd : args.deterministic ? need.bwd_deterministic : need.bwd;
      if (n > ctx_->smem_optin) {
        code_ = "E_UNSUPPORTED";
        msg_ = std::string("head dim ") + std::to_string(args.d) + ": the " + (backward_ ? "backward" : "forward") + " kernel needs " +
               std::to_string(n) + " bytes of shared memory per block; this GPU allows " + std::to_string(ctx_->smem_optin);
        return false;
      }
    }
    // On a failure, after the scratch below is freed, wait for the GPU (the worker does, when this
    // runs on the main thread: Execute).
    SyncOnExit sync(OnMain() ? nullptr : ctx_->stream);
    {
      DeviceScratch ws;
      cudaError_t e = SmallInputs();
      if (e != cudaSuccess) return Fail(e, "copying sequence offsets and ALiBi slopes");
      args.cu_q = static_cast<const int*>(ctx_->small_dev);
      args.cu_k = args.cu_q + n_cu;
      args.alibi = has_alibi ? reinterpret_cast<const float*>(args.cu_k + n_cu) : nullptr;
      const size_t wsb = backward_ ? fa::bwd_workspace_bytes(&args) : fa::fwd_workspace_bytes(&args);
      void* wsp = nullptr;
      e = Workspace(ctx_.get(), wsb, &ws, &wsp, /*retry=*/!OnMain());
      if (e == cudaErrorMemoryAllocation && OnMain()) {  // (nothing queued yet: SmallInputs had nothing to copy)
        cudaGetLastError();
        to_worker_ = true;
        return false;
      }
      if (e != cudaSuccess) return Fail(e, "allocating the workspace (" + std::to_string(wsb) + " bytes)");
      splits_ = args.num_splits;
      e = backward_ ? fa::bwd(&args, tens, wsp, ctx_->stream) : fa::fwd(&args, tens, wsp, ctx_->stream);
      if (e != cudaSuccess) return Fail(e, What());
      e = ctx_->NewEvent(&done_);
      if (e != cudaSuccess) {
        done_ = nullptr;
        return Fail(e, What());
      }
    }  // (the workspace is freed in stream order, behind the kernels)
    cudaError_t e = cudaEventRecord(done_, ctx_->stream);
    if (e != cudaSuccess) return Fail(e, What());
    sync.Cancel();
    return true;
  }
  // (the launches were checked as they were made; a fault of any kernel in flight fails every
  // call waiting on the stream, this one included)
  bool Await() override {
    cudaError_t e = cudaEventSynchronize(done_);
    return e == cudaSuccess ? true : Fail(e, What());
  }
  const char* What() const { return backward_ ? "attention backward" : "attention forward"; }
  cudaEvent_t done_ = nullptr;
  Napi::Value Result(Napi::Env env) override {
    Napi::Object r = Napi::Object::New(env);
    r.Set("splits", Napi::Number::New(env, splits_));
    Napi::Array tr = Napi::Array::New(env, 5);
    for (uint32_t i = 0; i < 5; ++i) tr.Set(i, Napi::Number::New(env, stamp_[i]));
    r.Set("trace", tr);
    return r;
  }
};

// ---------------------------------------------------------------------------------------------
// KV-cache attention (issue 12): the op behind ctx.kvForward. Index values arrive as host copies
// (validated by KvParse, as describeKVCacheProblem does) and optionally as device buffers that the
// kernels read; a device copy that disagrees with its host copy is caught by the kernels' range
// checks (nothing out of bounds is touched) and reported as E_ARG.
// ---------------------------------------------------------------------------------------------
class KvOp : public Op {
 public:
  KvOp(Napi::Env env, std::shared_ptr<CtxState> ctx) : Op(env, std::move(ctx)) {}
  ~KvOp() override {
    if (done_) ctx_->Recycle(done_);
  }
  fa::KvArgs args{};
  fa::KvTensors tens{};
  std::vector<int> lens, table;  // host copies; uploaded when no device copy was given
  bool upload_lens = false, upload_table = false;
  std::vector<float> alibi;
  int splits_ = 1;

 protected:
  // On the calling thread when nothing needs copying to the device first (device lengths and
  // block table, no ALiBi: every step of a decode loop) and the flags exist: the kernels are
  // queued, and the worker only waits for them and reads this call's flag (Await). Like AttnOp,
  // the next call may then queue its work while ours runs.
  bool LaunchesHere() const override {
    return ctx_->dry || (ctx_->kv_flag_host && !upload_lens && !upload_table && alibi.empty());
  }
  // This call's flag: a slot no unfinished call uses (a call takes slot ticket mod kKvSlots, and
  // queues only while fewer than kKvSlots calls before it are unfinished: Op::Start allows
  // kMainAhead < kKvSlots on the calling thread; a worker waits here).
  volatile int* Slot() {
    if (!OnMain()) {
      std::unique_lock<std::mutex> lk(ctx_->mu);
      ctx_->cv.wait(lk, [&] { return ticket_ - ctx_->completed < CtxState::kKvSlots; });
    }
    return reinterpret_cast<volatile int*>(ctx_->kv_flag_host) + ticket_ % CtxState::kKvSlots;
  }
  bool Run() override {
    static_assert(Op::kMainAhead < CtxState::kKvSlots, "a call queued on the calling thread must find its flag slot free");
    args.smem_optin = ctx_->smem_optin;
    const size_t kv_smem = fa::kv_smem_bytes(args.dtype, args.d, ctx_->smem_optin);
    if (kv_smem > ctx_->smem_optin) {
      code_ = "E_UNSUPPORTED";
      msg_ = "head dim " + std::to_string(args.d) + ": the KV-cache kernel needs " + std::to_string(kv_smem) +
             " bytes of shared memory per block; this GPU allows " + std::to_string(ctx_->smem_optin);
      return false;
    }
    // on the CUDA error paths, after the scratch below is freed (the worker does, when this runs on
    // the calling thread: Execute)
    SyncOnExit sync(OnMain() ? nullptr : ctx_->stream);
    DeviceScratch dsmall, ws;
    const size_t nl = upload_lens ? lens.size() : 0, nt = upload_table ? table.size() : 0;
    const size_t small = (nl + nt) * sizeof(int) + alibi.size() * sizeof(float);
    std::vector<uint8_t>& host = host_small_;  // (kept until the op is done: the copy below is asynchronous)
    host.resize(small);
    cudaError_t e = dsmall.Alloc(small, ctx_->stream);
    if (e != cudaSuccess) return Fail(e, "allocating the KV-cache index copies");
    if (small) {
      uint8_t* h = host.data();
      if (nl) std::memcpy(h, lens.data(), nl * sizeof(int));
      if (nt) std::memcpy(h + nl * sizeof(int), table.data(), nt * sizeof(int));
      if (!alibi.empty()) std::memcpy(h + (nl + nt) * sizeof(int), alibi.data(), alibi.size() * sizeof(float));
      e = cudaMemcpyAsync(dsmall.get(), host.data(), small, cudaMemcpyHostToDevice, ctx_->stream);
      if (e != cudaSuccess) return Fail(e, "copying the KV-cache index copies");
    }
    int* di = static_cast<int*>(dsmall.get());
    if (upload_lens) args.seqlens = di;
    if (upload_table) args.block_table = di + nl;
    args.alibi = alibi.empty() ? nullptr : reinterpret_cast<const float*>(di + nl + nt);
    args.num_sms = ctx_->sms;
    if (!ctx_->kv_flag_host) {  // (on a worker: LaunchesHere needs the flags)
      void* h = nullptr;
      e = cudaHostAlloc(&h, CtxState::kKvSlots * sizeof(int), cudaHostAllocMapped);
      if (e == cudaSuccess) {
        void* d = nullptr;
        e = cudaHostGetDevicePointer(&d, h, 0);
        if (e == cudaSuccess) {
          ctx_->kv_flag_host = static_cast<int*>(h);
          ctx_->kv_flag_dev = static_cast<int*>(d);
        } else {
          cudaFreeHost(h);
        }
      }
      if (e != cudaSuccess) return Fail(e, "allocating the KV-cache index flag");
    }
    flag_ = Slot();
    *flag_ = 0;
    args.bad_index = ctx_->kv_flag_dev + ticket_ % CtxState::kKvSlots;
    const size_t wsb = fa::kv_workspace_bytes(&args);
    void* wsp = nullptr;
    e = Workspace(ctx_.get(), wsb, &ws, &wsp, /*retry=*/!OnMain());
    if (e == cudaErrorMemoryAllocation && OnMain()) {  // (nothing queued yet: nothing to copy on this thread)
      cudaGetLastError();
      to_worker_ = true;
      return false;
    }
    if (e != cudaSuccess) return Fail(e, "allocating the split-KV workspace (" + std::to_string(wsb) + " bytes)");
    splits_ = args.num_splits;
    e = fa::kv_forward(&args, tens, wsp, ctx_->stream);
    if (e != cudaSuccess) return Fail(e, "KV-cache attention");
    e = ctx_->NewEvent(&done_);
    if (e != cudaSuccess) {
      done_ = nullptr;
      return Fail(e, "KV-cache attention");
    }
    e = cudaEventRecord(done_, ctx_->stream);
    if (e != cudaSuccess) return Fail(e, "KV-cache attention");
    sync.Cancel();  // the scratch's frees are stream-ordered, behind the kernels
    return true;
  }
  // Waits for the kernels, then reads this call's flag (no later call has its slot: Slot).
  bool Await() override {
    if (ctx_->dry || !done_) return true;
    cudaError_t e = cudaEventSynchronize(done_);
    if (e != cudaSuccess) return Fail(e, "KV-cache attention");
    if (*flag_ != 0) {
      code_ = "E_ARG";
      msg_ = "a device index tensor (cacheSeqlens or blockTable) holds a value out of range that its host copy does not; the kernels skipped those entries (nothing out of bounds was read or written)";
      return false;
    }
    return true;
  }
  cudaEvent_t done_ = nullptr;
  volatile int* flag_ = nullptr;
  std::vector<uint8_t> host_small_;
  Napi::Value Result(Napi::Env env) override {
    Napi::Object r = Napi::Object::New(env);
    r.Set("splits", Napi::Number::New(env, splits_));
    Napi::Array tr = Napi::Array::New(env, 5);
    for (uint32_t i = 0; i < 5; ++i) tr.Set(i, Napi::Number::New(env, stamp_[i]));
    r.Set("trace", tr);
    return r;
  }
};

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "Context",
                       {InstanceMethod<&Context::Alloc>("alloc"), InstanceMethod<&Context::Upload>("upload"),
                        InstanceMethod<&Context::Download>("download"), InstanceMethod<&Context::Forward>("forward"),
                        InstanceMethod<&Context::Backward>("backward"), InstanceMethod<&Context::MemInfo>("memInfo"),
                        InstanceMethod<&Context::SmemNeeds>("smemNeeds"), InstanceMethod<&Context::KvForward>("kvForward"),
                        InstanceMethod<&Context::Synchronize>("synchronize"), InstanceMethod<&Context::DisposeCtx>("dispose"),
                        InstanceAccessor<&Context::GetDevice>("device"), InstanceAccessor<&Context::GetSms>("sms"),
                        InstanceAccessor<&Context::GetDry>("dryRun")});
  }
  Context(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Context>(info) {
    Napi::Env env = info.Env();
    state_ = std::make_shared<CtxState>();
    if (info.Length() > 0 && !info[0].IsUndefined()) {
      Napi::Object o = AsObject(env, info[0], "Context options");
      state_->dry = GetBool(env, o, "dryRun");
      if (!o.Get("device").IsUndefined()) state_->device = static_cast<int>(GetInt(env, o, "device", 0, 1024));
    }
    if (state_->dry) {
      state_->name = "dry run (no CUDA)";
    } else {
      int n = 0;
      cudaError_t e = cudaGetDeviceCount(&n);
      if (e != cudaSuccess) Throw(env, "E_DEVICE", "CUDA driver: " + CudaText(e));
      if (state_->device >= n) Throw(env, "E_DEVICE", "CUDA device " + std::to_string(state_->device) + " does not exist (" + std::to_string(n) + " found)");
      e = cudaSetDevice(state_->device);
      if (e != cudaSuccess) Throw(env, "E_DEVICE", "cudaSetDevice: " + CudaText(e));
      cudaDeviceProp prop;
      e = cudaGetDeviceProperties(&prop, state_->device);
      if (e != cudaSuccess) Throw(env, "E_DEVICE", "cudaGetDeviceProperties: " + CudaText(e));
      state_->sms = prop.multiProcessorCount;
      state_->arch = prop.major * 10 + prop.minor;
      state_->smem_optin = prop.sharedMemPerBlockOptin;
      state_->name = prop.name;
      e = cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking);
      if (e != cudaSuccess) Throw(env, CudaCode(e), "cudaStreamCreate: " + CudaText(e));
      KeepPoolMemory(state_->device);
    }
    g_live_contexts.insert(this);
  }
  ~Context() override { g_live_contexts.erase(this); }

 private:
  void CheckLive(Napi::Env env) {
    if (disposed_) Throw(env, "E_ARG", "this CUDA context was disposed");
  }
  Napi::Value GetDevice(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), state_->name); }
  Napi::Value GetSms(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), state_->sms); }
  Napi::Value GetDry(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), state_->dry); }

  Napi::Value Alloc(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CheckLive(env);
    if (info.Length() < 1 || !info[0].IsNumber()) Throw(env, "E_ARG", "alloc(bytes): bytes must be a number");
    const double x = info[0].As<Napi::Number>().DoubleValue();
    if (!std::isfinite(x) || std::floor(x) != x || x < 0) Throw(env, "E_ARG", "alloc(bytes): bytes must be a non-negative integer");
    if (x > 1099511627776.0) Throw(env, "E_TOO_LARGE", "alloc(bytes): more than 1 TiB asked for");
    const size_t bytes = static_cast<size_t>(x);
    void* p = nullptr;
    if (bytes > 0 && !state_->dry) {
      cudaSetDevice(state_->device);
      cudaError_t e = MallocPooled(&p, bytes, state_->stream);
      if (e != cudaSuccess) {
        cudaGetLastError();
        Throw(env, CudaCode(e), "cudaMallocAsync(" + std::to_string(bytes) + " bytes): " + CudaText(e));
      }
    } else if (bytes > 0) {
      p = reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000));  // never dereferenced in dry runs
    }
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object obj = data->buffer_ctor.New({Napi::External<int>::New(env, &kToken)});
    Buffer* b = Buffer::Unwrap(obj);
    b->Setup(state_, p, bytes);
    return obj;
  }

  Napi::Value Upload(const Napi::CallbackInfo& info) { return Copy(info, true); }
  Napi::Value Download(const Napi::CallbackInfo& info) { return Copy(info, false); }
  Napi::Value Copy(const Napi::CallbackInfo& info, bool up) {
    Napi::Env env = info.Env();
    CheckLive(env);
    const char* name = up ? "upload" : "download";
    if (info.Length() < 2) Throw(env, "E_ARG", std::string(name) + "(buffer, typedArray) needs two arguments");
    Buffer* b = UnwrapBuffer(env, info[0], state_, std::string(name) + ": buffer");
    if (!info[1].IsTypedArray()) Throw(env, "E_DTYPE", std::string(name) + ": data must be a typed array");
    Napi::TypedArray ta = info[1].As<Napi::TypedArray>();
    napi_typedarray_type t;
    size_t len = 0;
    void* data = nullptr;
    napi_value ab;
    size_t off = 0;
    if (napi_get_typedarray_info(env, ta, &t, &len, &data, &ab, &off) != napi_ok) Throw(env, "E_ARG", std::string(name) + ": cannot read the typed array");
    const size_t bytes = len * ta.ElementSize();
    if (bytes != b->bytes_) Throw(env, "E_SHAPE", std::string(name) + ": the typed array has " + std::to_string(bytes) + " bytes, the buffer " + std::to_string(b->bytes_));
    if (bytes > 0 && data == nullptr) Throw(env, "E_ARG", std::string(name) + ": the typed array is detached");
    std::vector<uint8_t> staging;
    if (up) {
      staging.resize(bytes);
      if (bytes) std::memcpy(staging.data(), data, bytes);
    }
    auto* op = new CopyOp(env, state_, b, up, std::move(staging), info[1]);
    Napi::Promise p = op->Promise();
    op->Start();
    return p;
  }

  // Validates a forward/backward spec into an AttnOp. Throws before any CUDA call.
  AttnOp* Parse(Napi::Env env, Napi::Value specv, bool backward) {
    Napi::Object o = AsObject(env, specv, "spec");
    fa::FaArgs a{};
    a.dtype = ParseDtype(env, o.Get("dtype"));
    a.f32_path = ParseF32Path(env, o.Get("f32Path"));
    a.B = static_cast<int>(GetInt(env, o, "B", 1, 65535));
    a.H = static_cast<int>(GetInt(env, o, "H", 1, 65535));
    a.Hkv = static_cast<int>(GetInt(env, o, "Hkv", 1, 65535));
    a.d = static_cast<int>(GetInt(env, o, "d", 1, 256));
    if (a.H % a.Hkv != 0) Throw(env, "E_SHAPE", "H must be a multiple of Hkv");
    a.total_q = static_cast<int>(GetInt(env, o, "totalQ", 0, 2147483647));
    a.total_k = static_cast<int>(GetInt(env, o, "totalK", 0, 2147483647));
    a.varlen = GetBool(env, o, "varlen") ? 1 : 0;
    std::vector<int> cuq = CopyTyped<int>(env, o.Get("cuSeqlensQ"), napi_int32_array, static_cast<size_t>(a.B) + 1, "cuSeqlensQ");
    std::vector<int> cuk = CopyTyped<int>(env, o.Get("cuSeqlensK"), napi_int32_array, static_cast<size_t>(a.B) + 1, "cuSeqlensK");
    auto check_cu = [&](const std::vector<int>& cu, int total, const char* what, int* mx) {
      if (cu[0] != 0) Throw(env, "E_ARG", std::string(what) + " must start at 0");
      *mx = 0;
      for (int b = 0; b < a.B; ++b) {
        if (cu[b + 1] < cu[b]) Throw(env, "E_ARG", std::string(what) + " must be non-decreasing");
        *mx = std::max(*mx, cu[b + 1] - cu[b]);
      }
      if (cu[a.B] != total) Throw(env, "E_SHAPE", std::string(what) + " must end at the packed length " + std::to_string(total));
    };
    check_cu(cuq, a.total_q, "cuSeqlensQ", &a.max_tq);
    check_cu(cuk, a.total_k, "cuSeqlensK", &a.max_tk);
    if (!a.varlen) {
      for (int b = 0; b <= a.B; ++b)
        if (static_cast<int64_t>(cuq[b]) != static_cast<int64_t>(b) * a.max_tq || static_cast<int64_t>(cuk[b]) != static_cast<int64_t>(b) * a.max_tk)
          Throw(env, "E_ARG", "without varlen every sequence must have the same length");
    }
    a.scale = static_cast<float>(GetNum(env, o, "scale"));
    if (!std::isfinite(a.scale)) Throw(env, "E_ARG", "scale overflows float32");
    const double sc = GetNum(env, o, "softcap");
    if (sc < 0 || !std::isfinite(static_cast<float>(sc))) Throw(env, "E_ARG", "softcap must be >= 0 (0 = none) and fit float32");
    a.softcap = static_cast<float>(sc);
    a.win_left = static_cast<int>(GetInt(env, o, "windowLeft", -1, 2147483647));
    a.win_right = static_cast<int>(GetInt(env, o, "windowRight", -1, 2147483647));
    a.deterministic = GetBool(env, o, "deterministic") ? 1 : 0;
    std::vector<float> alibi;
    Napi::Value al = o.Get("alibi");
    if (!al.IsUndefined() && !al.IsNull()) {
      alibi = CopyTyped<float>(env, al, napi_float32_array, static_cast<size_t>(a.B) * a.H, "alibi");
      for (float x : alibi)
        if (!std::isfinite(x)) Throw(env, "E_ARG", "alibi slopes must be finite");
    }
    // exact buffer sizes (all factors < 2^31 * 2^16 * 2^8 * 4: no 64-bit overflow)
    const uint64_t es = a.dtype == fa::kF32 ? 4 : 2;
    const uint64_t nq = static_cast<uint64_t>(a.total_q) * a.H * a.d * es, nk = static_cast<uint64_t>(a.total_k) * a.Hkv * a.d * es;
    const uint64_t nl = static_cast<uint64_t>(a.total_q) * a.H * 4;
    auto op = std::make_unique<AttnOp>(env, state_, backward);
    std::vector<Buffer*> inputs, outputs;
    auto buf = [&](const char* key, uint64_t bytes, bool output) -> void* {
      Buffer* b = UnwrapBuffer(env, o.Get(key), state_, key);
      if (b->bytes_ != bytes) Throw(env, "E_SHAPE", std::string(key) + " must have " + std::to_string(bytes) + " bytes, has " + std::to_string(b->bytes_));
      for (Buffer* x : outputs)
        if (x == b) Throw(env, "E_ARG", std::string(key) + " is the same buffer as another output");
      if (output)
        for (Buffer* x : inputs)
          if (x == b) Throw(env, "E_ARG", std::string(key) + " (an output) aliases an input");
      (output ? outputs : inputs).push_back(b);
      return b->ptr_;
    };
    fa::FaTensors& t = op->tens;
    t.q = buf("q", nq, false);
    t.k = buf("k", nk, false);
    t.v = buf("v", nk, false);
    if (!backward) {
      t.o = buf("out", nq, true);
      t.lse = static_cast<float*>(buf("lse", nl, true));
    } else {
      t.o = buf("out", nq, false);
      t.dout = buf("dout", nq, false);
      t.lse = static_cast<float*>(buf("lse", nl, false));
      t.dq = buf("dq", nq, true);
      t.dk = buf("dk", nk, true);
      t.dv = buf("dv", nk, true);
    }
    for (Buffer* b : inputs) op->Hold(b);
    for (Buffer* b : outputs) op->Hold(b);
    op->args = a;
    op->SetSmall(std::move(cuq), cuk, alibi);
    return op.release();
  }
  Napi::Value Forward(const Napi::CallbackInfo& info) { return Attn(info, false); }
  Napi::Value Backward(const Napi::CallbackInfo& info) { return Attn(info, true); }
  Napi::Value Attn(const Napi::CallbackInfo& info, bool backward) {
    Napi::Env env = info.Env();
    CheckLive(env);
    if (info.Length() < 1) Throw(env, "E_ARG", "a spec object is required");
    AttnOp* op = Parse(env, info[0], backward);
    Napi::Promise p = op->Promise();
    op->Start();
    return p;
  }
  // ---- KV cache (issue 12) ------------------------------------------------------------------
  // Validates a kvForward spec into a KvOp, every index value checked from its host copy (the
  // rules of core's describeKVCacheProblem). Throws before any CUDA call.
  KvOp* KvParse(Napi::Env env, Napi::Value specv) {
    constexpr int64_t kIntMax = 2147483647;
    Napi::Object o = AsObject(env, specv, "spec");
    fa::KvArgs a{};
    a.dtype = ParseDtype(env, o.Get("dtype"));
    const int es = a.dtype == fa::kF32 ? 4 : 2;  // bytes per element
    a.B = static_cast<int>(GetInt(env, o, "B", 1, 65535));
    a.H = static_cast<int>(GetInt(env, o, "H", 1, 65535));
    a.Hkv = static_cast<int>(GetInt(env, o, "Hkv", 1, 65535));
    a.d = static_cast<int>(GetInt(env, o, "d", 1, 256));
    if (a.H % a.Hkv != 0) Throw(env, "E_SHAPE", "H must be a multiple of Hkv");
    a.tq = static_cast<int>(GetInt(env, o, "tq", 0, kIntMax));
    a.tnew = static_cast<int>(GetInt(env, o, "tnew", 0, kIntMax));
    const bool paged = GetBool(env, o, "paged");
    a.block_size = static_cast<int>(GetInt(env, o, "blockSize", 1, kIntMax));
    a.max_blocks = static_cast<int>(GetInt(env, o, "maxBlocksPerSeq", 1, kIntMax));
    a.num_blocks = GetInt(env, o, "numBlocks", 1, kIntMax);
    if (!paged && (a.num_blocks != a.B || a.max_blocks != 1)) Throw(env, "E_SHAPE", "a contiguous cache has numBlocks = B and maxBlocksPerSeq = 1");
    const int64_t cap = static_cast<int64_t>(a.block_size) * a.max_blocks;
    if (cap > kIntMax) Throw(env, "E_TOO_LARGE", "a sequence's capacity (maxBlocksPerSeq x blockSize) must be below 2^31");
    if (static_cast<int64_t>(a.B) * a.tq * a.H > kIntMax || static_cast<int64_t>(a.B) * a.tnew * a.Hkv > kIntMax)
      Throw(env, "E_TOO_LARGE", "B x tq x H and B x tnew x Hkv must be below 2^31");
    if (static_cast<int64_t>(a.B) * a.max_blocks > kIntMax) Throw(env, "E_TOO_LARGE", "the block table must have fewer than 2^31 entries");
    // the cache tensors: numBlocks x blockSize rows of Hkv x d elements, at most 2^46 bytes
    const double cache_bytes = static_cast<double>(a.num_blocks) * a.block_size * a.Hkv * a.d * es;
    if (cache_bytes > 70368744177664.0) Throw(env, "E_TOO_LARGE", "the cache tensors would exceed 2^46 bytes");

    std::vector<int> lens = CopyTyped<int>(env, o.Get("cacheSeqlens"), napi_int32_array, static_cast<size_t>(a.B), "cacheSeqlens");
    std::vector<int> table;
    if (paged) {
      table = CopyTyped<int>(env, o.Get("blockTable"), napi_int32_array, static_cast<size_t>(a.B) * a.max_blocks, "blockTable");
    } else if (!o.Get("blockTable").IsUndefined() && !o.Get("blockTable").IsNull()) {
      Throw(env, "E_ARG", "blockTable is given for a contiguous cache (paged is false)");
    }
    a.max_tk = 0;
    for (int b = 0; b < a.B; ++b) {
      const int64_t len = lens[b];
      if (len < 0) Throw(env, "E_ARG", "cacheSeqlens[" + std::to_string(b) + "] is " + std::to_string(len) + "; lengths must be >= 0");
      if (len + a.tnew > cap)
        Throw(env, "E_ARG", "sequence " + std::to_string(b) + ": length " + std::to_string(len) + " + " + std::to_string(a.tnew) + " appended tokens exceed its capacity " + std::to_string(cap));
      const int64_t n = len + a.tnew;
      a.max_tk = static_cast<int>(std::max<int64_t>(a.max_tk, n));
      if (paged) {
        for (int64_t j = 0, nb = (n + a.block_size - 1) / a.block_size; j < nb; ++j) {
          const int blk = table[static_cast<size_t>(b) * a.max_blocks + j];
          if (blk < 0 || blk >= a.num_blocks)
            Throw(env, "E_ARG", "blockTable[" + std::to_string(b) + "][" + std::to_string(j) + "] = " + std::to_string(blk) + " is outside the cache's " + std::to_string(a.num_blocks) + " blocks");
        }
      }
    }
    if (paged && a.tnew > 0) {  // two appends into one cache row would race: the row spans per block must be disjoint
      if (static_cast<int64_t>(a.B) * a.tnew > (int64_t{1} << 27)) Throw(env, "E_TOO_LARGE", "a call appends at most 2^27 tokens (B x tnew)");
      struct Span {
        int64_t blk, r0, r1;
      };
      std::vector<Span> spans;
      for (int b = 0; b < a.B; ++b) {
        const int64_t p0 = lens[b], p1 = p0 + a.tnew - 1, bs = a.block_size;
        for (int64_t j = p0 / bs; j <= p1 / bs; ++j)
          spans.push_back({table[static_cast<size_t>(b) * a.max_blocks + j], std::max(p0, j * bs) - j * bs, std::min(p1, j * bs + bs - 1) - j * bs});
      }
      std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.blk != y.blk ? x.blk < y.blk : x.r0 < y.r0; });
      for (size_t i = 1; i < spans.size(); ++i)
        if (spans[i].blk == spans[i - 1].blk && spans[i].r0 <= spans[i - 1].r1)
          Throw(env, "E_ARG", "two appends write row " + std::to_string(spans[i].r0) + " of cache block " + std::to_string(spans[i].blk) + " (block tables that share a block they write)");
    }
    a.scale = static_cast<float>(GetNum(env, o, "scale"));
    if (!std::isfinite(a.scale)) Throw(env, "E_ARG", "scale overflows float32");
    const double sc = GetNum(env, o, "softcap");
    if (sc < 0 || !std::isfinite(static_cast<float>(sc))) Throw(env, "E_ARG", "softcap must be >= 0 (0 = none) and fit float32");
    a.softcap = static_cast<float>(sc);
    a.win_left = static_cast<int>(GetInt(env, o, "windowLeft", -1, kIntMax));
    a.win_right = static_cast<int>(GetInt(env, o, "windowRight", -1, kIntMax));
    std::vector<float> alibi;
    Napi::Value al = o.Get("alibi");
    if (!al.IsUndefined() && !al.IsNull()) {
      alibi = CopyTyped<float>(env, al, napi_float32_array, static_cast<size_t>(a.B) * a.H, "alibi");
      for (float x : alibi)
        if (!std::isfinite(x)) Throw(env, "E_ARG", "alibi slopes must be finite");
    }

    // exact buffer sizes; a buffer the call writes (out, lse, the caches) aliases no other
    const uint64_t nq = static_cast<uint64_t>(a.B) * a.tq * a.H * a.d * es, nn = static_cast<uint64_t>(a.B) * a.tnew * a.Hkv * a.d * es;
    const uint64_t nc = static_cast<uint64_t>(cache_bytes), nl = static_cast<uint64_t>(a.B) * a.H * a.tq * 4;
    auto op = std::make_unique<KvOp>(env, state_);
    std::vector<std::pair<Buffer*, bool>> seen;  // (buffer, written)
    auto buf = [&](const char* key, uint64_t bytes, bool written, bool optional) -> Buffer* {
      Napi::Value v = o.Get(key);
      if (optional && (v.IsUndefined() || v.IsNull())) return nullptr;
      Buffer* b = UnwrapBuffer(env, v, state_, key);
      if (b->bytes_ != bytes) Throw(env, "E_SHAPE", std::string(key) + " must have " + std::to_string(bytes) + " bytes, has " + std::to_string(b->bytes_));
      for (const auto& s : seen)
        if (s.first == b && (written || s.second)) Throw(env, "E_ARG", std::string(key) + " is the same buffer as another argument, and one of them is written");
      seen.emplace_back(b, written);
      return b;
    };
    fa::KvTensors& t = op->tens;
    Buffer* bq = buf("q", nq, false, false);
    Buffer* bkc = buf("kCache", nc, true, false);
    Buffer* bvc = buf("vCache", nc, true, false);
    Buffer* bkn = nullptr;
    Buffer* bvn = nullptr;
    if (a.tnew > 0) {
      bkn = buf("kNew", nn, false, false);
      bvn = buf("vNew", nn, false, false);
    } else if (!o.Get("kNew").IsUndefined() && !o.Get("kNew").IsNull()) {
      Throw(env, "E_ARG", "kNew is given with tnew = 0");
    } else if (!o.Get("vNew").IsUndefined() && !o.Get("vNew").IsNull()) {
      Throw(env, "E_ARG", "vNew is given with tnew = 0");
    }
    Buffer* bo = buf("out", nq, true, false);
    Buffer* bl = buf("lse", nl, true, false);
    Buffer* blens = buf("cacheSeqlensBuf", static_cast<uint64_t>(a.B) * 4, false, true);
    Buffer* btab = nullptr;
    if (paged) btab = buf("blockTableBuf", static_cast<uint64_t>(a.B) * a.max_blocks * 4, false, true);
    else if (!o.Get("blockTableBuf").IsUndefined() && !o.Get("blockTableBuf").IsNull()) Throw(env, "E_ARG", "blockTableBuf is given for a contiguous cache");
    t.q = bq->ptr_;
    t.k_cache = bkc->ptr_;
    t.v_cache = bvc->ptr_;
    t.k_new = bkn ? bkn->ptr_ : nullptr;
    t.v_new = bvn ? bvn->ptr_ : nullptr;
    t.o = bo->ptr_;
    t.lse = static_cast<float*>(bl->ptr_);
    a.seqlens = blens ? static_cast<const int*>(blens->ptr_) : nullptr;
    a.block_table = btab ? static_cast<const int*>(btab->ptr_) : nullptr;
    for (const auto& s : seen) op->Hold(s.first);
    op->args = a;
    op->upload_lens = blens == nullptr;
    op->upload_table = paged && btab == nullptr;
    op->lens = std::move(lens);
    op->table = std::move(table);
    op->alibi = std::move(alibi);
    return op.release();
  }
  Napi::Value KvForward(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CheckLive(env);
    if (info.Length() < 1) Throw(env, "E_ARG", "a spec object is required");
    KvOp* op = KvParse(env, info[0]);
    Napi::Promise p = op->Promise();
    op->Start();
    return p;
  }
  // ---- end KV cache --------------------------------------------------------------------------

  // { fwd, bwd, bwdDeterministic, kv, limit } in bytes of the kernels a call with head dim d, dtype
  // (default 'bf16') and f32Path (default 'auto') runs on this context's GPU (limit 0 in a dry run:
  // then f32 counts as fitting the split kernels). Honours FA_CUDA_NO_WGMMA / FA_CUDA_NO_WGMMA_BWD
  // like the launches do. `limit` (tests) plans as if the GPU allowed that many bytes per block.
  Napi::Value SmemNeeds(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CheckLive(env);
    if (info.Length() < 1 || !info[0].IsNumber()) Throw(env, "E_ARG", "smemNeeds(d, dtype?, f32Path?): d must be a number");
    const double d = info[0].As<Napi::Number>().DoubleValue();
    if (!(d >= 1 && d <= 256) || d != static_cast<int>(d)) Throw(env, "E_ARG", "smemNeeds(d, dtype?, f32Path?): d must be an integer from 1 to 256");
    fa::FaArgs a{};
    a.d = static_cast<int>(d);
    a.dtype = info.Length() > 1 && !info[1].IsUndefined() ? ParseDtype(env, info[1]) : fa::kBF16;
    a.f32_path = info.Length() > 2 ? ParseF32Path(env, info[2]) : fa::kF32Auto;
    a.arch = state_->no_wgmma ? 0 : state_->arch;
    a.no_wgmma_bwd = state_->no_wgmma_bwd ? 1 : 0;
    a.smem_limit = state_->smem_optin;
    if (info.Length() > 3 && !info[3].IsUndefined()) {  // plan as if the GPU allowed this many bytes (tests)
      if (!info[3].IsNumber()) Throw(env, "E_ARG", "smemNeeds: limit must be a number");
      const double lim = info[3].As<Napi::Number>().DoubleValue();
      if (!(lim >= 0 && lim <= 1e9) || lim != std::floor(lim)) Throw(env, "E_ARG", "smemNeeds: limit must be an integer number of bytes");
      a.smem_limit = static_cast<size_t>(lim);
    }
    const fa::SmemNeeds n = fa::smem_needs(a);
    Napi::Object r = Napi::Object::New(env);
    r.Set("fwd", Napi::Number::New(env, static_cast<double>(n.fwd)));
    r.Set("bwd", Napi::Number::New(env, static_cast<double>(n.bwd)));
    r.Set("bwdDeterministic", Napi::Number::New(env, static_cast<double>(n.bwd_deterministic)));
    r.Set("kv", Napi::Number::New(env, static_cast<double>(fa::kv_smem_bytes(a.dtype, a.d, state_->smem_optin))));
    r.Set("limit", Napi::Number::New(env, static_cast<double>(state_->smem_optin)));
    return r;
  }
  Napi::Value MemInfo(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CheckLive(env);
    size_t f = 0, t = 0;
    if (!state_->dry) {
      cudaSetDevice(state_->device);
      cudaError_t e = cudaMemGetInfo(&f, &t);
      if (e != cudaSuccess) Throw(env, "E_DEVICE", "cudaMemGetInfo: " + CudaText(e));
      f = std::min(t, f + PoolIdleBytes(state_->device));  // kept by the pool for the next call, used by nothing
    }
    Napi::Object r = Napi::Object::New(env);
    r.Set("free", Napi::Number::New(env, static_cast<double>(f)));
    r.Set("total", Napi::Number::New(env, static_cast<double>(t)));
    return r;
  }
  Napi::Value Synchronize(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CheckLive(env);
    class SyncOp : public Op {
     public:
      using Op::Op;
      bool Run() override {
        cudaError_t e = cudaStreamSynchronize(ctx_->stream);
        return e == cudaSuccess ? true : Fail(e, "synchronize");
      }
    };
    auto* op = new SyncOp(env, state_);
    Napi::Promise p = op->Promise();
    op->Start();
    return p;
  }
  Napi::Value DisposeCtx(const Napi::CallbackInfo& info) {
    disposed_ = true;
    return info.Env().Undefined();
  }

  std::shared_ptr<CtxState> state_;
  bool disposed_ = false;
};

Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object r = Napi::Object::New(env);
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  r.Set("driver", Napi::Number::New(env, drv));
  r.Set("runtime", Napi::Number::New(env, rt));
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    r.Set("ok", Napi::Boolean::New(env, false));
    r.Set("reason", Napi::String::New(env, "CUDA driver: " + CudaText(e)));
    return r;
  }
  if (n == 0) {
    r.Set("ok", Napi::Boolean::New(env, false));
    r.Set("reason", Napi::String::New(env, "no CUDA device found"));
    return r;
  }
  cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    r.Set("ok", Napi::Boolean::New(env, false));
    r.Set("reason", Napi::String::New(env, "cudaGetDeviceProperties: " + CudaText(e)));
    return r;
  }
  r.Set("device", Napi::String::New(env, prop.name));
  r.Set("sms", Napi::Number::New(env, prop.multiProcessorCount));
  Napi::Array cc = Napi::Array::New(env, 2);
  cc.Set(0u, Napi::Number::New(env, prop.major));
  cc.Set(1u, Napi::Number::New(env, prop.minor));
  r.Set("cc", cc);
  r.Set("smemPerBlockOptin", Napi::Number::New(env, static_cast<double>(prop.sharedMemPerBlockOptin)));
  r.Set("totalMem", Napi::Number::New(env, static_cast<double>(prop.totalGlobalMem)));
  if (prop.major < 8) {
    r.Set("ok", Napi::Boolean::New(env, false));
    r.Set("reason", Napi::String::New(env, std::string(prop.name) + " has compute capability " + std::to_string(prop.major) + "." +
                                                std::to_string(prop.minor) + "; the kernels need 8.0 or newer"));
    return r;
  }
  r.Set("ok", Napi::Boolean::New(env, true));
  return r;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->buffer_ctor = Napi::Persistent(Buffer::Init(env));
  env.SetInstanceData<AddonData>(data);
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("Context", Context::Init(env));
  exports.Set("version", Napi::String::New(env, "0.1.0"));
  fa_bridge::InitShardOps(env, exports);
  fa_bridge::InitNccl(env, exports);
  return exports;
}

}  // namespace

// The bridge to the context-parallel files (binding_bridge.h).
namespace fa_bridge {
namespace {
struct Token {
  Buffer* buffer;
  Napi::ObjectReference ref;
};
}  // namespace

Napi::Error MakeError(Napi::Env env, const std::string& code, const std::string& msg) { return ::MakeError(env, code, msg); }

HeldBuffer Hold(Napi::Env env, Napi::Value v, const std::string& what) {
  void* raw = nullptr;
  std::shared_ptr<CtxState> owner;
  if (v.IsObject() && napi_unwrap(env, v, &raw) == napi_ok && g_live_buffers.count(raw)) owner = static_cast<Buffer*>(raw)->ctx_;
  Buffer* b = UnwrapBuffer(env, v, owner, what);  // the usual checks and messages
  b->inflight_++;
  HeldBuffer h;
  h.ptr = b->ptr_;
  h.bytes = b->bytes_;
  h.device = b->ctx_->device;
  h.dry = b->ctx_->dry;
  h.stream = b->ctx_->stream;
  h.context = b->ctx_.get();
  h.id = b;
  h.keep = b->ctx_;
  h.token = new Token{b, Napi::Persistent(v.As<Napi::Object>())};
  return h;
}

void Release(HeldBuffer& h) {
  auto* t = static_cast<Token*>(h.token);
  if (t == nullptr) return;
  h.token = nullptr;
  if (g_live_buffers.count(t->buffer)) {
    t->buffer->inflight_--;
    if (t->buffer->disposed_) t->buffer->Release();
  }
  t->ref.Reset();
  delete t;
}
}  // namespace fa_bridge

NODE_API_MODULE(fa_cuda, Init)
