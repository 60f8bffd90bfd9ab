// The shard ops of context parallelism on the device (binding.shardOps), for @fa/cuda's
// cudaShardOps (src/parallel/ops.ts). Each call validates its arguments on the main thread —
// dtypes, exact byte sizes of every buffer against the counts it describes, one context for
// all buffers, no output aliasing an input — holds the buffers, and runs on a worker thread:
// the kernel goes on the owning context's stream (after whatever that stream holds when the
// worker runs it: the TypeScript callers await the attention calls whose outputs it reads), then
// the call waits for its own event. Buffers of a dry-run context are
// validated and never touched.
//
//   shardOps.fill(buf, count, value)                          f32
//   shardOps.accumulate(acc, x, xDtype, count)                acc f32 += x
//   shardOps.convert(dst, dstDtype, src, count)               src f32
//   shardOps.merge(out, lse, partOut, partDtype, partLse, rows, heads, d)
//   shardOps.transposeLse(dst, src, batch, heads, t, toPacked)
//   shardOps.copy(dst, dstOffset, src, srcOffset, bytes)
//   shardOps.random(dst, dtype, count, seed, scale)
//   shardOps.memStats(device, reset?) -> { used, high, reserved }   (the device's default pool)
#include <cuda_runtime_api.h>
#include <napi.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "binding_bridge.h"
#include "cp_kernels.h"

namespace {

using fa_bridge::HeldBuffer;

[[noreturn]] void Throw(Napi::Env env, const char* code, const std::string& msg) { throw fa_bridge::MakeError(env, code, msg); }

std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

int64_t Int(Napi::Env env, const Napi::CallbackInfo& info, size_t i, const char* name, int64_t lo, int64_t hi) {
  if (info.Length() <= i || !info[i].IsNumber()) Throw(env, "E_ARG", std::string(name) + " must be a number");
  const double x = info[i].As<Napi::Number>().DoubleValue();
  if (!std::isfinite(x) || std::floor(x) != x) Throw(env, "E_ARG", std::string(name) + " must be an integer");
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi))
    Throw(env, "E_TOO_LARGE", std::string(name) + " = " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int64_t>(x);
}

int Dtype(Napi::Env env, const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsString()) Throw(env, "E_DTYPE", std::string(name) + " must be 'f32', 'f16' or 'bf16'");
  const std::string s = info[i].As<Napi::String>().Utf8Value();
  if (s == "f32") return fa_cp::kF32;
  if (s == "f16") return fa_cp::kF16;
  if (s == "bf16") return fa_cp::kBF16;
  Throw(env, "E_DTYPE", std::string(name) + " must be 'f32', 'f16' or 'bf16', got '" + s + "'");
}

size_t Size(int dt) { return dt == fa_cp::kF32 ? 4 : 2; }

constexpr int64_t kMaxElems = int64_t(1) << 40;

// One asynchronous shard op: the held buffers and the launch.
class ShardOp : public Napi::AsyncWorker {
 public:
  explicit ShardOp(Napi::Env env) : Napi::AsyncWorker(env, "fa-cuda-shard-op"), deferred_(Napi::Promise::Deferred::New(env)) {}
  ~ShardOp() override { ReleaseAll(); }

  // Holds the buffer at info[i], checking its exact byte size (or at least `bytes` with atLeast).
  HeldBuffer& Buf(const Napi::CallbackInfo& info, size_t i, const char* name, uint64_t bytes, bool output, bool atLeast = false) {
    Napi::Env env = info.Env();
    if (info.Length() <= i) Throw(env, "E_ARG", std::string(name) + " is missing");
    held_.push_back(fa_bridge::Hold(env, info[i], name));
    outputs_.push_back(output);
    HeldBuffer& b = held_.back();
    if (atLeast ? b.bytes < bytes : b.bytes != bytes)
      Throw(env, "E_SHAPE", std::string(name) + " must have " + (atLeast ? "at least " : "") + std::to_string(bytes) + " bytes, has " + std::to_string(b.bytes));
    if (held_.size() > 1 && b.context != held_.front().context) Throw(env, "E_ARG", std::string(name) + " belongs to another CUDA backend (context) than " + names_.front());
    for (size_t j = 0; j + 1 < held_.size(); ++j)
      if (held_[j].id == b.id && (output || outputs_[j]))
        Throw(env, "E_ARG", std::string(name) + " is the same buffer as " + names_[j] + "; an output may not alias another argument");
    names_.push_back(name);
    return b;
  }

  Napi::Promise Start(std::function<cudaError_t(cudaStream_t)> launch, const char* what) {
    launch_ = std::move(launch);
    what_ = what;
    dry_ = held_.empty() || held_.front().dry;
    Queue();
    return deferred_.Promise();
  }

 protected:
  void Execute() override {
    if (dry_) return;
    const HeldBuffer& b = held_.front();
    cudaError_t e = cudaSetDevice(b.device);
    cudaEvent_t done = nullptr;
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) e = launch_(b.stream);
    if (e == cudaSuccess) e = cudaEventRecord(done, b.stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(done);
    if (done) cudaEventDestroy(done);
    if (e != cudaSuccess) {
      cudaGetLastError();
      code_ = e == cudaErrorMemoryAllocation ? "E_OOM" : "E_DEVICE";
      SetError(std::string("CUDA error in ") + what_ + ": " + CudaText(e));
    }
  }
  void OnOK() override {
    Napi::HandleScope scope(Env());
    ReleaseAll();
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    Napi::HandleScope scope(Env());
    ReleaseAll();
    deferred_.Reject(fa_bridge::MakeError(Env(), code_, e.Message()).Value());
  }

 private:
  void ReleaseAll() {
    for (HeldBuffer& b : held_) fa_bridge::Release(b);
  }
  Napi::Promise::Deferred deferred_;
  std::vector<HeldBuffer> held_;
  std::vector<bool> outputs_;
  std::vector<std::string> names_;
  std::function<cudaError_t(cudaStream_t)> launch_;
  const char* what_ = "";
  std::string code_ = "E_DEVICE";
  bool dry_ = false;
};

// Runs `build` (which validates and holds) and starts the op, or deletes it if validation threw.
template <typename Build>
Napi::Value Run(const Napi::CallbackInfo& info, const char* what, Build build) {
  auto* op = new ShardOp(info.Env());
  std::function<cudaError_t(cudaStream_t)> launch;
  try {
    launch = build(*op);
  } catch (...) {
    delete op;
    throw;
  }
  return op->Start(std::move(launch), what);
}

Napi::Value Fill(const Napi::CallbackInfo& info) {
  return Run(info, "fill", [&](ShardOp& op) {
    const int64_t n = Int(info.Env(), info, 1, "count", 0, kMaxElems);
    if (info.Length() < 3 || !info[2].IsNumber()) Throw(info.Env(), "E_ARG", "value must be a number");
    const float v = info[2].As<Napi::Number>().FloatValue();
    float* p = static_cast<float*>(op.Buf(info, 0, "buffer", n * 4, true).ptr);
    return std::function<cudaError_t(cudaStream_t)>([=](cudaStream_t s) { return fa_cp::fill_f32(p, n, v, s); });
  });
}

Napi::Value Accumulate(const Napi::CallbackInfo& info) {
  return Run(info, "accumulate", [&](ShardOp& op) {
    const int xdt = Dtype(info.Env(), info, 2, "xDtype");
    const int64_t n = Int(info.Env(), info, 3, "count", 0, kMaxElems);
    float* acc = static_cast<float*>(op.Buf(info, 0, "acc", n * 4, true).ptr);
    const void* x = op.Buf(info, 1, "x", n * Size(xdt), false).ptr;
    return std::function<cudaError_t(cudaStream_t)>([=](cudaStream_t s) { return fa_cp::accumulate(acc, x, xdt, n, s); });
  });
}

Napi::Value Convert(const Napi::CallbackInfo& info) {
  return Run(info, "convert", [&](ShardOp& op) {
    const int dt = Dtype(info.Env(), info, 1, "dstDtype");
    const int64_t n = Int(info.Env(), info, 3, "count", 0, kMaxElems);
    void* dst = op.Buf(info, 0, "dst", n * Size(dt), true).ptr;
    const float* src = static_cast<const float*>(op.Buf(info, 2, "src", n * 4, false).ptr);
    return std::function<cudaError_t(cudaStream_t)>([=](cudaStream_t s) { return fa_cp::convert(dst, dt, src, n, s); });
  });
}

Napi::Value Merge(const Napi::CallbackInfo& info) {
  return Run(info, "merge", [&](ShardOp& op) {
    Napi::Env env = info.Env();
    const int pdt = Dtype(env, info, 3, "partDtype");
    const int64_t rows = Int(env, info, 5, "rows", 0, int64_t(1) << 34);
    const int64_t heads = Int(env, info, 6, "heads", 1, 65535);
    const int64_t d = Int(env, info, 7, "d", 1, 1024);
    const uint64_t nrow = static_cast<uint64_t>(rows) * heads;
    float* out = static_cast<float*>(op.Buf(info, 0, "out", nrow * d * 4, true).ptr);
    float* lse = static_cast<float*>(op.Buf(info, 1, "lse", nrow * 4, true).ptr);
    const void* po = op.Buf(info, 2, "partOut", nrow * d * Size(pdt), false).ptr;
    const float* pl = static_cast<const float*>(op.Buf(info, 4, "partLse", nrow * 4, false).ptr);
    return std::function<cudaError_t(cudaStream_t)>(
        [=](cudaStream_t s) { return fa_cp::merge_forward(out, lse, po, pdt, pl, rows, static_cast<int>(heads), static_cast<int>(d), s); });
  });
}

Napi::Value TransposeLse(const Napi::CallbackInfo& info) {
  return Run(info, "transposeLse", [&](ShardOp& op) {
    Napi::Env env = info.Env();
    const int64_t batch = Int(env, info, 2, "batch", 0, 1 << 30);
    const int64_t heads = Int(env, info, 3, "heads", 0, 65535);
    const int64_t t = Int(env, info, 4, "t", 0, int64_t(1) << 34);
    if (info.Length() < 6 || !info[5].IsBoolean()) Throw(env, "E_ARG", "toPacked must be a boolean");
    const int packed = info[5].As<Napi::Boolean>().Value() ? 1 : 0;
    const uint64_t bytes = static_cast<uint64_t>(batch) * heads * t * 4;
    float* dst = static_cast<float*>(op.Buf(info, 0, "dst", bytes, true).ptr);
    const float* src = static_cast<const float*>(op.Buf(info, 1, "src", bytes, false).ptr);
    return std::function<cudaError_t(cudaStream_t)>([=](cudaStream_t s) { return fa_cp::transpose_lse(dst, src, batch, heads, t, packed, s); });
  });
}

Napi::Value Copy(const Napi::CallbackInfo& info) {
  return Run(info, "copy", [&](ShardOp& op) {
    Napi::Env env = info.Env();
    const int64_t doff = Int(env, info, 1, "dstOffset", 0, kMaxElems);
    const int64_t soff = Int(env, info, 3, "srcOffset", 0, kMaxElems);
    const int64_t n = Int(env, info, 4, "bytes", 0, kMaxElems);
    char* dst = static_cast<char*>(op.Buf(info, 0, "dst", doff + n, true, true).ptr);
    const char* src = static_cast<const char*>(op.Buf(info, 2, "src", soff + n, false, true).ptr);
    return std::function<cudaError_t(cudaStream_t)>([=](cudaStream_t s) {
      return n == 0 ? cudaSuccess : cudaMemcpyAsync(dst + doff, src + soff, n, cudaMemcpyDeviceToDevice, s);
    });
  });
}

Napi::Value Random(const Napi::CallbackInfo& info) {
  return Run(info, "random", [&](ShardOp& op) {
    Napi::Env env = info.Env();
    const int dt = Dtype(env, info, 1, "dtype");
    const int64_t n = Int(env, info, 2, "count", 0, kMaxElems);
    const int64_t seed = Int(env, info, 3, "seed", 0, (int64_t(1) << 53) - 1);
    if (info.Length() < 5 || !info[4].IsNumber()) Throw(env, "E_ARG", "scale must be a number");
    const float scale = info[4].As<Napi::Number>().FloatValue();
    void* dst = op.Buf(info, 0, "dst", n * Size(dt), true).ptr;
    return std::function<cudaError_t(cudaStream_t)>([=](cudaStream_t s) { return fa_cp::random_fill(dst, dt, n, static_cast<uint64_t>(seed), scale, s); });
  });
}

Napi::Value MemStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = static_cast<int>(Int(env, info, 0, "device", 0, 1024));
  const bool reset = info.Length() > 1 && info[1].IsBoolean() && info[1].As<Napi::Boolean>().Value();
  cudaMemPool_t pool;
  cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, device);
  uint64_t used = 0, high = 0, reserved = 0;
  if (e == cudaSuccess) e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
  if (e == cudaSuccess) e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high);
  if (e == cudaSuccess) e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  if (e == cudaSuccess && reset) {
    uint64_t zero = 0;
    e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    Throw(env, "E_DEVICE", "memory pool statistics: " + CudaText(e));
  }
  Napi::Object r = Napi::Object::New(env);
  r.Set("used", Napi::Number::New(env, static_cast<double>(used)));
  r.Set("high", Napi::Number::New(env, static_cast<double>(high)));
  r.Set("reserved", Napi::Number::New(env, static_cast<double>(reserved)));
  return r;
}

}  // namespace

namespace fa_bridge {
void InitShardOps(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("fill", Napi::Function::New(env, Fill, "fill"));
  o.Set("accumulate", Napi::Function::New(env, Accumulate, "accumulate"));
  o.Set("convert", Napi::Function::New(env, Convert, "convert"));
  o.Set("merge", Napi::Function::New(env, Merge, "merge"));
  o.Set("transposeLse", Napi::Function::New(env, TransposeLse, "transposeLse"));
  o.Set("copy", Napi::Function::New(env, Copy, "copy"));
  o.Set("random", Napi::Function::New(env, Random, "random"));
  o.Set("memStats", Napi::Function::New(env, MemStats, "memStats"));
  exports.Set("shardOps", o);
}
}  // namespace fa_bridge
