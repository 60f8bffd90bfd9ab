// The NCCL communicator of context parallelism (binding.nccl), for @fa/cuda's
// NcclCommunicator (src/parallel/nccl.ts). NCCL is loaded at run time: nothing here links
// against it, and without it every entry point says why.
//
//   nccl.load(paths)            -> { ok, path?, version?, code?, tried: [{ path, error }] }
//                                  dlopen of each candidate until one exports the API (>= 2.7)
//   nccl.uniqueId()             -> Uint8Array(128)      (ncclGetUniqueId; rank 0 makes it)
//   nccl.init({ device, rank, size, id }) -> Promise<comm>
//       ncclCommInitRank on its own stream, then one byte to each ring neighbour so that the
//       connections exist before the first exchange
//   comm.exchange(send[], recv[], next, prev) -> Promise<void>
//       one NCCL group: ncclSend of every send buffer to `next`, ncclRecv of every recv buffer
//       from `prev`, on the communicator's stream, after all work issued so far on the buffers'
//       own context streams (an event recorded at the call), without waiting for work issued
//       later (the attention that overlaps it). Exchanges run in call order.
//   comm.abort(reason)  comm.destroy() -> Promise<void>   comm.rank, .size, .device, .aborted
//
// A wait longer than FA_NCCL_TIMEOUT_S seconds (default 600), an asynchronous NCCL error or
// abort() aborts the communicator (ncclCommAbort): its pending and later exchanges fail, and
// so, through NCCL, do the peers'.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <napi.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "binding_bridge.h"
#include "nccl_api.h"

namespace {

using fa_bridge::HeldBuffer;
using namespace fa_nccl;

[[noreturn]] void Throw(Napi::Env env, const char* code, const std::string& msg) { throw fa_bridge::MakeError(env, code, msg); }
std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

// ---------------------------------------------------------------------------------------------
// loading
// ---------------------------------------------------------------------------------------------
Api g_api{};
bool g_loaded = false;
std::string g_path;
int g_code = 0;

std::string VersionText(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

// Loads one candidate; on failure returns false and says why in *why.
bool LoadOne(const std::string& path, std::string* why) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    *why = e ? e : "dlopen failed";
    return false;
  }
  Api a{};
  std::string missing;
  auto sym = [&](const char* name, bool required) -> void* {
    void* p = dlsym(h, name);
    if (!p && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
    return p;
  };
  a.GetVersion = reinterpret_cast<decltype(a.GetVersion)>(sym("ncclGetVersion", true));
  a.GetUniqueId = reinterpret_cast<decltype(a.GetUniqueId)>(sym("ncclGetUniqueId", true));
  a.CommInitRank = reinterpret_cast<decltype(a.CommInitRank)>(sym("ncclCommInitRank", true));
  a.CommDestroy = reinterpret_cast<decltype(a.CommDestroy)>(sym("ncclCommDestroy", true));
  a.CommAbort = reinterpret_cast<decltype(a.CommAbort)>(sym("ncclCommAbort", true));
  a.CommGetAsyncError = reinterpret_cast<decltype(a.CommGetAsyncError)>(sym("ncclCommGetAsyncError", true));
  a.Send = reinterpret_cast<decltype(a.Send)>(sym("ncclSend", true));
  a.Recv = reinterpret_cast<decltype(a.Recv)>(sym("ncclRecv", true));
  a.GroupStart = reinterpret_cast<decltype(a.GroupStart)>(sym("ncclGroupStart", true));
  a.GroupEnd = reinterpret_cast<decltype(a.GroupEnd)>(sym("ncclGroupEnd", true));
  a.GetErrorString = reinterpret_cast<decltype(a.GetErrorString)>(sym("ncclGetErrorString", true));
  a.GetLastError = reinterpret_cast<decltype(a.GetLastError)>(sym("ncclGetLastError", false));
  int code = 0;
  if (missing.empty() && a.GetVersion(&code) != ncclSuccess) missing = "a working ncclGetVersion";
  if (!missing.empty()) {
    *why = "not an NCCL library: it lacks " + missing;
    dlclose(h);
    return false;
  }
  if (code < kMinVersion) {
    *why = "NCCL " + VersionText(code) + " is older than 2.7, which added ncclSend/ncclRecv";
    dlclose(h);
    return false;
  }
  Dl_info info;
  g_path = dladdr(reinterpret_cast<void*>(a.GetVersion), &info) && info.dli_fname ? info.dli_fname : path;
  g_api = a;
  g_code = code;
  g_loaded = true;  // kept loaded for the life of the process
  return true;
}

Napi::Value Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray()) Throw(env, "E_ARG", "nccl.load(paths): paths must be an array of strings");
  Napi::Array paths = info[0].As<Napi::Array>();
  Napi::Array tried = Napi::Array::New(env);
  if (!g_loaded) {
    for (uint32_t i = 0; i < paths.Length() && !g_loaded; ++i) {
      Napi::Value p = paths.Get(i);
      if (!p.IsString()) Throw(env, "E_ARG", "nccl.load(paths): paths must be strings");
      const std::string path = p.As<Napi::String>().Utf8Value();
      std::string why;
      if (LoadOne(path, &why)) break;
      Napi::Object t = Napi::Object::New(env);
      t.Set("path", path);
      t.Set("error", why);
      tried.Set(tried.Length(), t);
    }
  }
  Napi::Object r = Napi::Object::New(env);
  r.Set("ok", g_loaded);
  r.Set("tried", tried);
  if (g_loaded) {
    r.Set("path", g_path);
    r.Set("version", VersionText(g_code));
    r.Set("code", g_code);
  }
  return r;
}

void RequireLoaded(Napi::Env env) {
  if (!g_loaded) Throw(env, "E_UNSUPPORTED", "NCCL is not loaded (nccl.load found no usable libnccl.so.2)");
}

std::string NcclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = g_api.GetErrorString ? g_api.GetErrorString(r) : "NCCL error";
  s += " (" + std::to_string(static_cast<int>(r)) + ")";
  if (comm && g_api.GetLastError) {
    const char* last = g_api.GetLastError(comm);
    if (last && *last) s += ": " + std::string(last);
  }
  return s;
}

Napi::Value UniqueId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireLoaded(env);
  ncclUniqueId id;
  const ncclResult_t r = g_api.GetUniqueId(&id);
  if (r != ncclSuccess) Throw(env, "E_DEVICE", "ncclGetUniqueId: " + NcclText(r, nullptr));
  Napi::Uint8Array a = Napi::Uint8Array::New(env, kUniqueIdBytes);
  std::memcpy(a.Data(), id.internal, kUniqueIdBytes);
  return a;
}

// ---------------------------------------------------------------------------------------------
// the communicator
// ---------------------------------------------------------------------------------------------
struct CommState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0, rank = 0, size = 1;
  // exchanges enqueue in call order: tickets taken on the main thread, served in order
  std::mutex mu;  // guards comm, dead, why and every NCCL call on comm
  std::condition_variable cv;
  uint64_t next_ticket = 0, serving = 0;
  bool dead = false;
  std::string why;
  ~CommState() {
    if (stream) {
      cudaSetDevice(device);
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
  }
  // With mu held: ends the communicator (ncclCommAbort) and remembers why.
  void DieLocked(const std::string& reason) {
    if (dead) return;
    dead = true;
    why = reason;
    if (comm) {
      cudaSetDevice(device);
      g_api.CommAbort(comm);
      comm = nullptr;
    }
  }
  void Serve() {
    {
      std::lock_guard<std::mutex> lk(mu);
      serving++;
    }
    cv.notify_all();
  }
};

double TimeoutSeconds() {
  const char* s = std::getenv("FA_NCCL_TIMEOUT_S");
  const double t = s ? std::atof(s) : 0;
  return t > 0 ? t : 600;
}

class ExchangeOp : public Napi::AsyncWorker {
 public:
  ExchangeOp(Napi::Env env, std::shared_ptr<CommState> st)
      : Napi::AsyncWorker(env, "fa-nccl-exchange"), deferred_(Napi::Promise::Deferred::New(env)), st_(std::move(st)) {}
  ~ExchangeOp() override {
    for (HeldBuffer& b : send_) fa_bridge::Release(b);
    for (HeldBuffer& b : recv_) fa_bridge::Release(b);
    for (cudaEvent_t e : ready_) cudaEventDestroy(e);
  }
  std::vector<HeldBuffer> send_, recv_;
  std::vector<cudaEvent_t> ready_;
  int next_ = 0, prev_ = 0;
  uint64_t ticket_ = 0;
  Napi::Promise::Deferred deferred_;

 protected:
  bool Fail(const std::string& code, const std::string& msg) {
    code_ = code;
    SetError(msg);
    return false;
  }
  void Execute() override {
    CommState& s = *st_;
    cudaEvent_t done = nullptr;
    {
      std::unique_lock<std::mutex> lk(s.mu);
      s.cv.wait(lk, [&] { return s.serving == ticket_; });
      bool ok = !s.dead || Fail("E_DEVICE", "the NCCL communicator is unusable: " + s.why);
      if (ok) ok = Enqueue(&done);
      lk.unlock();
      s.Serve();
      if (!ok) {
        if (done) cudaEventDestroy(done);
        return;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double limit = TimeoutSeconds();
    for (;;) {
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        std::lock_guard<std::mutex> lk(s.mu);
        s.DieLocked("CUDA error while exchanging: " + CudaText(q));
        Fail("E_DEVICE", "NCCL exchange: " + s.why);
        break;
      }
      {
        std::lock_guard<std::mutex> lk(s.mu);
        if (s.dead) {
          Fail("E_DEVICE", "NCCL exchange did not complete: " + s.why);
          break;
        }
        ncclResult_t async = ncclSuccess;
        g_api.CommGetAsyncError(s.comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
          s.DieLocked("NCCL reported " + NcclText(async, s.comm));
          Fail("E_DEVICE", "NCCL exchange: " + s.why);
          break;
        }
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (waited > limit) {
          s.DieLocked("no answer from rank " + std::to_string(prev_) + " or " + std::to_string(next_) + " within " + std::to_string(static_cast<int>(limit)) +
                      " s (FA_NCCL_TIMEOUT_S); a peer failed or never made its matching exchange");
          Fail("E_DEVICE", "NCCL exchange: " + s.why);
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    cudaEventDestroy(done);
  }
  // With the mutex held: the group of sends and receives, and an event after it.
  bool Enqueue(cudaEvent_t* done) {
    CommState& s = *st_;
    cudaError_t e = cudaSetDevice(s.device);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(done, cudaEventDisableTiming);
    for (cudaEvent_t r : ready_)
      if (e == cudaSuccess) e = cudaStreamWaitEvent(s.stream, r, 0);
    if (e != cudaSuccess) return Fail("E_DEVICE", "NCCL exchange: " + CudaText(e));
    ncclResult_t r = g_api.GroupStart();
    for (const HeldBuffer& b : send_)
      if (r == ncclSuccess && b.bytes > 0) r = g_api.Send(b.ptr, b.bytes, ncclUint8, next_, s.comm, s.stream);
    for (const HeldBuffer& b : recv_)
      if (r == ncclSuccess && b.bytes > 0) r = g_api.Recv(b.ptr, b.bytes, ncclUint8, prev_, s.comm, s.stream);
    const ncclResult_t end = g_api.GroupEnd();
    if (r == ncclSuccess) r = end;
    if (r != ncclSuccess) {
      s.DieLocked("NCCL send/recv: " + NcclText(r, s.comm));
      return Fail("E_DEVICE", s.why);
    }
    e = cudaEventRecord(*done, s.stream);
    if (e != cudaSuccess) return Fail("E_DEVICE", "NCCL exchange: " + CudaText(e));
    return true;
  }
  void OnOK() override {
    Napi::HandleScope scope(Env());
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    Napi::HandleScope scope(Env());
    deferred_.Reject(fa_bridge::MakeError(Env(), code_, e.Message()).Value());
  }

 private:
  std::shared_ptr<CommState> st_;
  std::string code_ = "E_DEVICE";
};

Napi::Value Exchange(const Napi::CallbackInfo& info, const std::shared_ptr<CommState>& st) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsArray() || !info[1].IsArray()) Throw(env, "E_ARG", "exchange(send[], recv[], next, prev)");
  int peers[2];
  for (int i = 0; i < 2; ++i) {
    Napi::Value v = info[2 + i];
    const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
    if (!(x >= 0 && x < st->size && x == static_cast<int>(x))) Throw(env, "E_ARG", std::string(i ? "prev" : "next") + " must be a rank in [0, " + std::to_string(st->size) + ")");
    peers[i] = static_cast<int>(x);
  }
  auto* op = new ExchangeOp(env, st);
  try {
    std::vector<const void*> streams;
    auto take = [&](Napi::Array arr, std::vector<HeldBuffer>& into, const char* what) {
      for (uint32_t i = 0; i < arr.Length(); ++i) {
        const std::string name = std::string(what) + "[" + std::to_string(i) + "]";
        into.push_back(fa_bridge::Hold(env, arr.Get(i), name));
        const HeldBuffer& b = into.back();
        if (b.dry) Throw(env, "E_ARG", name + " belongs to a dry-run context; NCCL needs device memory");
        if (b.device != st->device) Throw(env, "E_ARG", name + " is on CUDA device " + std::to_string(b.device) + ", the communicator on " + std::to_string(st->device));
      }
    };
    take(info[0].As<Napi::Array>(), op->send_, "send");
    take(info[1].As<Napi::Array>(), op->recv_, "recv");
    for (const auto* list : {&op->send_, &op->recv_})
      for (const HeldBuffer& b : *list)
        for (const HeldBuffer& c : op->recv_)
          if (&b != &c && b.id == c.id) Throw(env, "E_ARG", "a receive buffer appears twice, or is also sent");
    // order the exchange after everything already issued on the buffers' streams
    cudaError_t e = cudaSetDevice(st->device);
    for (const auto* list : {&op->send_, &op->recv_}) {
      for (const HeldBuffer& b : *list) {
        bool seen = false;
        for (const void* c : streams) seen = seen || c == b.context;
        if (seen || e != cudaSuccess) continue;
        streams.push_back(b.context);
        cudaEvent_t ev = nullptr;
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e == cudaSuccess) {
          op->ready_.push_back(ev);
          e = cudaEventRecord(ev, b.stream);
        }
      }
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      Throw(env, "E_DEVICE", "NCCL exchange: " + CudaText(e));
    }
  } catch (...) {
    delete op;
    throw;
  }
  op->next_ = peers[0];
  op->prev_ = peers[1];
  op->ticket_ = st->next_ticket++;
  Napi::Promise p = op->deferred_.Promise();
  op->Queue();
  return p;
}

class DestroyOp : public Napi::AsyncWorker {
 public:
  DestroyOp(Napi::Env env, std::shared_ptr<CommState> st, uint64_t ticket)
      : Napi::AsyncWorker(env, "fa-nccl-destroy"), deferred_(Napi::Promise::Deferred::New(env)), st_(std::move(st)), ticket_(ticket) {}
  Napi::Promise::Deferred deferred_;

 protected:
  void Execute() override {
    CommState& s = *st_;
    std::unique_lock<std::mutex> lk(s.mu);
    s.cv.wait(lk, [&] { return s.serving == ticket_; });
    if (!s.dead && s.comm) {
      cudaSetDevice(s.device);
      cudaStreamSynchronize(s.stream);
      const ncclResult_t r = g_api.CommDestroy(s.comm);
      s.comm = nullptr;
      s.dead = true;
      s.why = "it was destroyed";
      if (r != ncclSuccess) SetError("ncclCommDestroy: " + NcclText(r, nullptr));
    }
    lk.unlock();
    s.Serve();
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(fa_bridge::MakeError(Env(), "E_DEVICE", e.Message()).Value()); }

 private:
  std::shared_ptr<CommState> st_;
  uint64_t ticket_;
};

Napi::Object CommObject(Napi::Env env, std::shared_ptr<CommState> st) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("rank", st->rank);
  o.Set("size", st->size);
  o.Set("device", st->device);
  o.Set("exchange", Napi::Function::New(env, [st](const Napi::CallbackInfo& info) { return Exchange(info, st); }, "exchange"));
  o.Set("abort", Napi::Function::New(env, [st](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string reason = info.Length() > 0 && info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "aborted";
    std::lock_guard<std::mutex> lk(st->mu);
    st->DieLocked("rank " + std::to_string(st->rank) + " aborted the ring: " + reason);
    return info.Env().Undefined();
  }, "abort"));
  o.Set("destroy", Napi::Function::New(env, [st](const Napi::CallbackInfo& info) -> Napi::Value {
    auto* op = new DestroyOp(info.Env(), st, st->next_ticket++);
    Napi::Promise p = op->deferred_.Promise();
    op->Queue();
    return p;
  }, "destroy"));
  o.Set("isAborted", Napi::Function::New(env, [st](const Napi::CallbackInfo& info) -> Napi::Value {
    std::lock_guard<std::mutex> lk(st->mu);
    return Napi::Boolean::New(info.Env(), st->dead);
  }, "isAborted"));
  return o;
}

class InitOp : public Napi::AsyncWorker {
 public:
  InitOp(Napi::Env env, std::shared_ptr<CommState> st, ncclUniqueId id)
      : Napi::AsyncWorker(env, "fa-nccl-init"), deferred_(Napi::Promise::Deferred::New(env)), st_(std::move(st)), id_(id) {}
  Napi::Promise::Deferred deferred_;

 protected:
  void Execute() override {
    CommState& s = *st_;
    cudaError_t e = cudaSetDevice(s.device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return Cuda(e, "setting up CUDA device " + std::to_string(s.device));
    const ncclResult_t r = g_api.CommInitRank(&s.comm, s.size, id_, s.rank);
    if (r != ncclSuccess) {
      s.comm = nullptr;
      code_ = "E_DEVICE";
      return SetError("ncclCommInitRank (rank " + std::to_string(s.rank) + " of " + std::to_string(s.size) + "): " + NcclText(r, nullptr));
    }
    // one byte to each neighbour: NCCL connects peers lazily, here while every rank is present
    void* buf = nullptr;
    e = cudaMalloc(&buf, 2);
    if (e != cudaSuccess) return Cuda(e, "allocating the warm-up buffer");
    ncclResult_t w = g_api.GroupStart();
    if (w == ncclSuccess) w = g_api.Send(buf, 1, ncclUint8, (s.rank + 1) % s.size, s.comm, s.stream);
    if (w == ncclSuccess) w = g_api.Recv(static_cast<char*>(buf) + 1, 1, ncclUint8, (s.rank - 1 + s.size) % s.size, s.comm, s.stream);
    const ncclResult_t end = g_api.GroupEnd();
    if (w == ncclSuccess) w = end;
    e = cudaStreamSynchronize(s.stream);
    cudaFree(buf);
    if (w != ncclSuccess) {
      code_ = "E_DEVICE";
      return SetError("NCCL warm-up exchange: " + NcclText(w, s.comm));
    }
    if (e != cudaSuccess) return Cuda(e, "the warm-up exchange");
  }
  void Cuda(cudaError_t e, const std::string& what) {
    cudaGetLastError();
    code_ = e == cudaErrorMemoryAllocation ? "E_OOM" : "E_DEVICE";
    SetError("CUDA error " + what + ": " + CudaText(e));
  }
  void OnOK() override {
    Napi::HandleScope scope(Env());
    deferred_.Resolve(CommObject(Env(), st_));
  }
  void OnError(const Napi::Error& e) override {
    Napi::HandleScope scope(Env());
    if (st_->comm) {
      g_api.CommAbort(st_->comm);
      st_->comm = nullptr;
    }
    deferred_.Reject(fa_bridge::MakeError(Env(), code_, e.Message()).Value());
  }

 private:
  std::shared_ptr<CommState> st_;
  ncclUniqueId id_;
  std::string code_ = "E_DEVICE";
};

Napi::Value Init(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireLoaded(env);
  if (info.Length() < 1 || !info[0].IsObject()) Throw(env, "E_ARG", "nccl.init({ device, rank, size, id })");
  Napi::Object o = info[0].As<Napi::Object>();
  auto num = [&](const char* key, double lo, double hi) {
    Napi::Value v = o.Get(key);
    const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
    if (!(x >= lo && x <= hi && x == static_cast<int>(x))) Throw(env, "E_ARG", std::string(key) + " must be an integer in [" + std::to_string(static_cast<int>(lo)) + ", " + std::to_string(static_cast<int>(hi)) + "]");
    return static_cast<int>(x);
  };
  auto st = std::make_shared<CommState>();
  st->size = num("size", 1, 1 << 20);
  st->rank = num("rank", 0, st->size - 1);
  st->device = num("device", 0, 1024);
  Napi::Value idv = o.Get("id");
  if (!idv.IsTypedArray() || idv.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array || idv.As<Napi::Uint8Array>().ElementLength() != kUniqueIdBytes)
    Throw(env, "E_ARG", "id must be the 128-byte Uint8Array of nccl.uniqueId()");
  ncclUniqueId id;
  std::memcpy(id.internal, idv.As<Napi::Uint8Array>().Data(), kUniqueIdBytes);
  auto* op = new InitOp(env, st, id);
  Napi::Promise p = op->deferred_.Promise();
  op->Queue();
  return p;
}

}  // namespace

namespace fa_bridge {
void InitNccl(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("load", Napi::Function::New(env, Load, "load"));
  o.Set("uniqueId", Napi::Function::New(env, UniqueId, "uniqueId"));
  o.Set("init", Napi::Function::New(env, Init, "init"));
  exports.Set("nccl", o);
}
}  // namespace fa_bridge
