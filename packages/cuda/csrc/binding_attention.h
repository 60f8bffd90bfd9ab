// the dense attention operation behind ctx.forward and ctx.backward.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

namespace {

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
  bool NowAllowed() override { return true; }
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
      if (now_) {  // (StartNow: nothing waits for the call, so no event behind it)
        sync.Cancel();
        return true;
      }
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

}  // namespace
