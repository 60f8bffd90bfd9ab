// asynchronous operations: the Op base (worker thread or calling thread, stream order) and the copies.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

namespace {

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
  // A stream-ordered call (CudaStream): when nothing issued before it is unfinished (every earlier
  // operation completed and settled) and it can queue here, it queues its work on this thread and
  // is done: no promise, no worker, no settling later (the host cost of a call, KERNEL_NOTES
  // "Host cost"). Its buffers need no holding: frees are queued on the same stream, behind its
  // kernels. Returns true then (the op is deleted); false after the ordinary Start (Promise()).
  bool StartNow() {
    stamp_[0] = NowUs();
    bool now;
    {
      std::lock_guard<std::mutex> lk(ctx_->mu);
      ticket_ = ctx_->next_ticket++;
      now = ctx_->serving == ticket_ && ctx_->completed == ticket_ && ctx_->settled == ticket_ && ctx_->parked.empty() && !ctx_->launch_on_worker &&
            LaunchesHere() && NowAllowed();
      here_ = now;
      now_ = now;
    }
    if (now) {
      here_ok_ = Guarded([this] { return Run(); });
      stamp_[1] = NowUs();
      if (here_ok_ && !to_worker_ && Done()) {
        {
          std::lock_guard<std::mutex> lk(ctx_->mu);
          ctx_->serving++;
          ctx_->completed++;
        }
        ctx_->settled++;  // (main thread: nothing earlier is unsettled)
        passed_ = true;
        ctx_->cv.notify_all();
        Finish();
        delete this;
        return true;
      }
      now_ = false;  // (the ordinary path from here: Await may need what Run made)
      if (to_worker_) {
        here_ = false;
      } else {
        PassTurn();
      }
    }
    Queue();
    return false;
  }

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
  // Whether StartNow may finish the operation on the calling thread (it has nothing to wait for).
  virtual bool NowAllowed() { return false; }
  // After Run on the calling thread in StartNow: whatever Await would check later, checked now
  // (false: the ordinary path waits and settles the promise).
  virtual bool Done() { return true; }
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
  bool now_ = false;                     // Run runs in StartNow: nothing will wait for it
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
    if (ctx_->dry || !done_) return KvNowReported();
    cudaError_t e = cudaEventSynchronize(done_);
    return e == cudaSuccess ? KvNowReported() : Fail(e, "upload");
  }
  // A download is where the stream's results come back: a KV-cache call done on the calling
  // thread that found a bad device index fails it (CtxState::CheckKvNow).
  bool KvNowReported() {
    if (up_) return true;
    std::string e = ctx_->CheckKvNow();
    if (e.empty()) return true;
    code_ = "E_ARG";
    msg_ = e;
    return false;
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

}  // namespace
