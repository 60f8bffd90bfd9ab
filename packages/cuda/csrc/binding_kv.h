// the KV-cache attention operation behind ctx.kvForward.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

namespace {

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
  // (StartNow, under the lock, after LaunchesHere) The next done-call slot, if the call that had
  // it is done on the GPU (its flag read then); otherwise the ordinary path.
  bool NowAllowed() override {
    if (ctx_->dry) return true;
    const uint64_t i = ctx_->kv_now_next % CtxState::kKvSlots;
    if (cudaEvent_t ev = ctx_->kv_now_ev[i]) {
      cudaError_t e = cudaEventQuery(ev);
      if (e != cudaSuccess) {
        cudaGetLastError();  // (not ready, or a fault the ordinary path reports)
        return false;
      }
      ctx_->ReadKvNowSlot(i);
    }
    now_slot_ = static_cast<int64_t>(i);
    return true;
  }
  // (StartNow, after Run) The slot keeps the event and the name; the flag is read later.
  bool Done() override {
    if (ctx_->dry || now_slot_ < 0) return true;
    std::lock_guard<std::mutex> lk(ctx_->mu);
    ctx_->kv_now_ev[now_slot_] = done_;
    ctx_->kv_now_label[now_slot_] = label_;
    done_ = nullptr;  // (the slot owns it now)
    ctx_->kv_now_next++;
    return true;
  }
  // This call's flag: a slot no unfinished call uses (a call takes slot ticket mod kKvSlots, and
  // queues only while fewer than kKvSlots calls before it are unfinished: Op::Start allows
  // kMainAhead < kKvSlots on the calling thread; a worker waits here).
  volatile int* Slot() {
    if (now_slot_ >= 0) return reinterpret_cast<volatile int*>(ctx_->kv_flag_host) + CtxState::kKvSlots + now_slot_;
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
      e = cudaHostAlloc(&h, 2 * CtxState::kKvSlots * sizeof(int), cudaHostAllocMapped);
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
    args.bad_index = ctx_->kv_flag_dev + (flag_ - reinterpret_cast<volatile int*>(ctx_->kv_flag_host));
    const size_t wsb = fa::kv_workspace_bytes(&args);
    void* wsp = nullptr;
    e = Workspace(ctx_.get(), wsb, &ws, &wsp, /*retry=*/!OnMain());
    if (e == cudaErrorMemoryAllocation && OnMain()) {  // (nothing queued yet: nothing to copy on this thread)
      cudaGetLastError();
      to_worker_ = true;
      now_slot_ = -1;  // (the worker runs it the ordinary way)
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

 public:
  int64_t now_slot_ = -1;  // a done-call slot (StartNow), or -1
  std::string label_ = "forwardWithKVCache";  // how a failure found later names the call (spec.label)
  Napi::Value Result(Napi::Env env) override {
    Napi::Object r = Napi::Object::New(env);
    r.Set("splits", Napi::Number::New(env, splits_));
    Napi::Array tr = Napi::Array::New(env, 5);
    for (uint32_t i = 0; i < 5; ++i) tr.Set(i, Napi::Number::New(env, stamp_[i]));
    r.Set("trace", tr);
    return r;
  }
};

}  // namespace
