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
//   new Context({ device?, dryRun?, stream? })  one CUDA stream (ours, or the caller's bigint cudaStream_t);
//                                   dryRun validates but never touches CUDA
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
//     ctx.wrap(address, bytes)      -> Buffer over a caller's device memory (bigint address; never freed here)
//     ctx.stream                    -> bigint cudaStream_t (the caller's, with option `stream`)
//     ctx.dispose()
//   Buffer: .bytes, .disposed, .address (bigint), .external, .dispose()   (a finalizer frees it too)
//
// The parts, in the order they build on each other (one job each, all in this file's
// translation unit): binding_errors.h, binding_state.h, binding_readers.h, binding_scratch.h,
// binding_ops.h, binding_attention.h, binding_kv.h, binding_external.h. This file holds the Context class
// JavaScript sees, the module's registration and the bridge to the context-parallel files.
#include "binding_common.h"
#include "binding_errors.h"
#include "binding_state.h"
#include "binding_readers.h"
#include "binding_scratch.h"
#include "binding_ops.h"
#include "binding_attention.h"
#include "binding_kv.h"
#include "binding_external.h"

namespace {

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "Context",
                       {InstanceMethod<&Context::Alloc>("alloc"), InstanceMethod<&Context::Upload>("upload"),
                        InstanceMethod<&Context::Download>("download"), InstanceMethod<&Context::Forward>("forward"),
                        InstanceMethod<&Context::Backward>("backward"), InstanceMethod<&Context::MemInfo>("memInfo"),
                        InstanceMethod<&Context::SmemNeeds>("smemNeeds"), InstanceMethod<&Context::KvForward>("kvForward"),
                        InstanceMethod<&Context::Synchronize>("synchronize"), InstanceMethod<&Context::DisposeCtx>("dispose"),
                        InstanceMethod<&Context::Wrap>("wrap"), InstanceAccessor<&Context::GetStream>("stream"),
                        InstanceAccessor<&Context::GetDevice>("device"), InstanceAccessor<&Context::GetSms>("sms"),
                        InstanceAccessor<&Context::GetDry>("dryRun")});
  }
  Context(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Context>(info) {
    Napi::Env env = info.Env();
    state_ = std::make_shared<CtxState>();
    bool given_stream = false;
    uintptr_t stream_handle = 0;
    if (info.Length() > 0 && !info[0].IsUndefined()) {
      Napi::Object o = AsObject(env, info[0], "Context options");
      state_->dry = GetBool(env, o, "dryRun");
      if (!o.Get("device").IsUndefined()) state_->device = static_cast<int>(GetInt(env, o, "device", 0, 1024));
      Napi::Value sv = o.Get("stream");
      if (!sv.IsUndefined() && !sv.IsNull()) {
        stream_handle = ReadHandle(env, sv, "Context options: stream");
        given_stream = true;
      }
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
      if (given_stream) {
        state_->stream = reinterpret_cast<cudaStream_t>(stream_handle);
        state_->own_stream = false;
        CheckStream(env, state_->stream, state_->device);
      } else {
        e = cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) Throw(env, CudaCode(e), "cudaStreamCreate: " + CudaText(e));
      }
      state_->started = true;
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
      // never dereferenced in dry runs; apart, so that the overlap checks see distinct buffers
      static uintptr_t next_fake = uintptr_t{1} << 40;
      p = reinterpret_cast<void*>(next_fake);
      next_fake += (bytes + 511) / 256 * 256;
    }
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object obj = data->buffer_ctor.New({Napi::External<int>::New(env, &kToken)});
    Buffer* b = Buffer::Unwrap(obj);
    b->Setup(state_, p, bytes);
    return obj;
  }

  // wrap(address: bigint, bytes): a caller's device memory as a Buffer (binding_external.h checks
  // it lies in one allocation on this context's device); disposing it never frees the memory.
  Napi::Value Wrap(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CheckLive(env);
    if (info.Length() < 2) Throw(env, "E_ARG", "wrap(address, bytes) needs two arguments");
    const uintptr_t addr = ReadHandle(env, info[0], "wrap: address");
    if (!info[1].IsNumber()) Throw(env, "E_ARG", "wrap: bytes must be a number");
    const double x = info[1].As<Napi::Number>().DoubleValue();
    if (!std::isfinite(x) || std::floor(x) != x || x < 0 || x > 1099511627776.0) Throw(env, "E_ARG", "wrap: bytes must be an integer from 0 to 2^40");
    const size_t bytes = static_cast<size_t>(x);
    if (addr == 0 && bytes > 0) Throw(env, "E_ARG", "wrap: address is null");
    // (what cudaMalloc gives; TMA descriptors and 16-byte loads need 16, a misaligned access would
    // be a sticky error that ends the context)
    if (addr % 256 != 0) Throw(env, "E_ARG", "wrap: the address must be a multiple of 256 bytes");
    if (!state_->dry && bytes > 0) CheckDeviceRange(env, reinterpret_cast<void*>(addr), bytes, state_->device);
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object obj = data->buffer_ctor.New({Napi::External<int>::New(env, &kToken)});
    Buffer::Unwrap(obj)->Setup(state_, reinterpret_cast<void*>(addr), bytes, true);
    return obj;
  }
  // The context's cudaStream_t as a bigint (another addon may queue work on it).
  Napi::Value GetStream(const Napi::CallbackInfo& info) {
    return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(state_->stream)));
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
        if (Overlaps(x, b)) Throw(env, "E_ARG", std::string(key) + (output ? " overlaps another output" : " overlaps an output"));
      if (output)
        for (Buffer* x : inputs)
          if (Overlaps(x, b)) Throw(env, "E_ARG", std::string(key) + " (an output) overlaps an input");
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
    // ctx.forward(spec, true): a stream-ordered call, done here when it can be (Op::StartNow)
    if (info.Length() > 1 && info[1].IsBoolean() && info[1].As<Napi::Boolean>().Value()) return op->StartNow() ? env.Undefined() : Napi::Value(p);
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
        if (Overlaps(s.first, b) && (written || s.second)) Throw(env, "E_ARG", std::string(key) + " overlaps another argument, and one of them is written");
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
    // ctx.kvForward(spec, true): a stream-ordered call, done here when it can be (Op::StartNow);
    // spec.label names it in a failure reported later
    if (info.Length() > 1 && info[1].IsBoolean() && info[1].As<Napi::Boolean>().Value()) {
      Napi::Value l = info[0].As<Napi::Object>().Get("label");
      if (l.IsString()) op->label_ = l.As<Napi::String>().Utf8Value();
      return op->StartNow() ? env.Undefined() : Napi::Value(p);
    }
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
        if (e != cudaSuccess) return Fail(e, "synchronize");
        std::string kv = ctx_->dry ? std::string() : ctx_->CheckKvNow();
        if (kv.empty()) return true;
        code_ = "E_ARG";
        msg_ = kv;
        return false;
      }
    };
    auto* op = new SyncOp(env, state_);
    Napi::Promise p = op->Promise();
    op->Start();
    return p;
  }
  Napi::Value DisposeCtx(const Napi::CallbackInfo& info) {
    disposed_ = true;
    // A caller's stream may be destroyed once we are disposed, but buffers the GC frees later
    // still queue their frees on the context's stream: finish with the caller's stream now, and
    // queue what comes after on the legacy default stream.
    if (!state_->own_stream && state_->started && !state_->dry && state_->stream != nullptr) {
      cudaSetDevice(state_->device);
      cudaStreamSynchronize(state_->stream);
      if (state_->small_dev) cudaFreeAsync(state_->small_dev, state_->stream);
      if (state_->ws_dev) cudaFreeAsync(state_->ws_dev, state_->stream);
      state_->small_dev = state_->ws_dev = nullptr;
      state_->small_cap = state_->ws_cap = 0;
      cudaStreamSynchronize(state_->stream);
      state_->stream = nullptr;
      cudaGetLastError();
    }
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
