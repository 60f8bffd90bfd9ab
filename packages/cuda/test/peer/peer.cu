// A second Node addon with CUDA memory and streams of its own (issue 24's honest check of
// zero-copy interop: torch's data_ptr() cannot cross a process boundary). Plain Node-API, the
// CUDA runtime linked statically, built by build.mjs with nvcc. Addresses and streams are bigints.
//   alloc(bytes) -> bigint          free(address)
//   write(address, typedArray)      read(address, typedArray)        (synchronous copies)
//   stream() -> bigint              destroyStream(stream)            syncStream(stream)
//   fillAfter(address, n, value, stream, spinMs): on `stream`, spins spinMs on the GPU, then
//     writes n floats = value: work a consumer on the same stream must wait for
//   scale(address, n, factor, stream): x *= factor on `stream`
#include <cuda_runtime.h>
#include <node_api.h>
#include <cstdint>
#include <cstring>
#include <string>

namespace {

napi_value Fail(napi_env env, const std::string& msg) {
  napi_throw_error(env, "E_PEER", msg.c_str());
  return nullptr;
}

bool Big(napi_env env, napi_value v, uint64_t* out) {
  bool lossless = false;
  return napi_get_value_bigint_uint64(env, v, out, &lossless) == napi_ok && lossless;
}

napi_value MakeBig(napi_env env, uint64_t x) {
  napi_value r;
  napi_create_bigint_uint64(env, x, &r);
  return r;
}

bool Typed(napi_env env, napi_value v, void** data, size_t* bytes) {
  napi_typedarray_type t;
  size_t len = 0;
  napi_value ab;
  size_t off = 0;
  if (napi_get_typedarray_info(env, v, &t, &len, data, &ab, &off) != napi_ok) return false;
  size_t es = (t == napi_float32_array || t == napi_int32_array || t == napi_uint32_array) ? 4 : (t == napi_uint16_array || t == napi_int16_array) ? 2 : 1;
  *bytes = len * es;
  return true;
}

template <size_t N>
bool Args(napi_env env, napi_callback_info info, napi_value (&argv)[N]) {
  size_t argc = N;
  return napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) == napi_ok && argc == N;
}

__global__ void SpinThenFill(float* x, int n, float value, long long cycles) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
  }
  __syncthreads();
  // (one block: the spin above finishes before any write)
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = value;
}

__global__ void Scale(float* x, int n, float f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

napi_value Alloc(napi_env env, napi_callback_info info) {
  napi_value a[1];
  double bytes = 0;
  if (!Args(env, info, a) || napi_get_value_double(env, a[0], &bytes) != napi_ok) return Fail(env, "alloc(bytes)");
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, static_cast<size_t>(bytes));
  if (e != cudaSuccess) return Fail(env, std::string("cudaMalloc: ") + cudaGetErrorString(e));
  return MakeBig(env, reinterpret_cast<uintptr_t>(p));
}

napi_value Free(napi_env env, napi_callback_info info) {
  napi_value a[1];
  uint64_t p = 0;
  if (!Args(env, info, a) || !Big(env, a[0], &p)) return Fail(env, "free(address)");
  cudaFree(reinterpret_cast<void*>(p));
  return nullptr;
}

napi_value Copy(napi_env env, napi_callback_info info, bool up) {
  napi_value a[2];
  uint64_t p = 0;
  void* data = nullptr;
  size_t bytes = 0;
  if (!Args(env, info, a) || !Big(env, a[0], &p) || !Typed(env, a[1], &data, &bytes)) return Fail(env, "write/read(address, typedArray)");
  cudaError_t e = up ? cudaMemcpy(reinterpret_cast<void*>(p), data, bytes, cudaMemcpyHostToDevice) : cudaMemcpy(data, reinterpret_cast<void*>(p), bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return Fail(env, std::string("cudaMemcpy: ") + cudaGetErrorString(e));
  return nullptr;
}
napi_value Write(napi_env env, napi_callback_info info) { return Copy(env, info, true); }
napi_value Read(napi_env env, napi_callback_info info) { return Copy(env, info, false); }

napi_value Stream(napi_env env, napi_callback_info) {
  cudaStream_t s;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return Fail(env, std::string("cudaStreamCreate: ") + cudaGetErrorString(e));
  return MakeBig(env, reinterpret_cast<uintptr_t>(s));
}

napi_value StreamOp(napi_env env, napi_callback_info info, bool destroy) {
  napi_value a[1];
  uint64_t s = 0;
  if (!Args(env, info, a) || !Big(env, a[0], &s)) return Fail(env, "stream op(stream)");
  cudaError_t e = destroy ? cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s)) : cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(s));
  if (e != cudaSuccess) return Fail(env, std::string("stream: ") + cudaGetErrorString(e));
  return nullptr;
}
napi_value DestroyStream(napi_env env, napi_callback_info info) { return StreamOp(env, info, true); }
napi_value SyncStream(napi_env env, napi_callback_info info) { return StreamOp(env, info, false); }

napi_value FillAfter(napi_env env, napi_callback_info info) {
  napi_value a[5];
  uint64_t p = 0, s = 0;
  int32_t n = 0;
  double value = 0, ms = 0;
  if (!Args(env, info, a) || !Big(env, a[0], &p) || napi_get_value_int32(env, a[1], &n) != napi_ok || napi_get_value_double(env, a[2], &value) != napi_ok ||
      !Big(env, a[3], &s) || napi_get_value_double(env, a[4], &ms) != napi_ok)
    return Fail(env, "fillAfter(address, n, value, stream, spinMs)");
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  SpinThenFill<<<1, 256, 0, reinterpret_cast<cudaStream_t>(s)>>>(reinterpret_cast<float*>(p), n, static_cast<float>(value), static_cast<long long>(ms * khz));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Fail(env, std::string("launch: ") + cudaGetErrorString(e));
  return nullptr;
}

napi_value ScaleOn(napi_env env, napi_callback_info info) {
  napi_value a[4];
  uint64_t p = 0, s = 0;
  int32_t n = 0;
  double f = 0;
  if (!Args(env, info, a) || !Big(env, a[0], &p) || napi_get_value_int32(env, a[1], &n) != napi_ok || napi_get_value_double(env, a[2], &f) != napi_ok || !Big(env, a[3], &s))
    return Fail(env, "scale(address, n, factor, stream)");
  Scale<<<(n + 255) / 256, 256, 0, reinterpret_cast<cudaStream_t>(s)>>>(reinterpret_cast<float*>(p), n, static_cast<float>(f));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Fail(env, std::string("launch: ") + cudaGetErrorString(e));
  return nullptr;
}

napi_value Init(napi_env env, napi_value exports) {
  const napi_property_descriptor props[] = {
      {"alloc", nullptr, Alloc, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"free", nullptr, Free, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"write", nullptr, Write, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"read", nullptr, Read, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"stream", nullptr, Stream, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"destroyStream", nullptr, DestroyStream, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"syncStream", nullptr, SyncStream, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"fillAfter", nullptr, FillAfter, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"scale", nullptr, ScaleOn, nullptr, nullptr, nullptr, napi_default, nullptr},
  };
  napi_define_properties(env, exports, sizeof(props) / sizeof(props[0]), props);
  return exports;
}

}  // namespace

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
