// other programs' memory and streams (issue 24): bigint handles, a caller's device range checked
// to lie in one allocation of this context's device, a caller's stream checked to be live.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

namespace {

// A device address or a cudaStream_t from JavaScript: a bigint that fits a pointer, exactly.
uintptr_t ReadHandle(Napi::Env env, Napi::Value v, const std::string& what) {
  if (!v.IsBigInt()) Throw(env, "E_ARG", what + " must be a bigint (a device address or cudaStream_t as an integer)");
  bool lossless = false;
  const uint64_t x = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless || (sizeof(uintptr_t) < 8 && x > UINTPTR_MAX)) Throw(env, "E_ARG", what + " is not a 64-bit unsigned address");
  return static_cast<uintptr_t>(x);
}

// The driver's cuMemGetAddressRange, reached through the runtime (the addon links no libcuda).
using GetRangeFn = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);
GetRangeFn AddressRangeQuery() {
  static GetRangeFn fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &q) == cudaSuccess && q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<GetRangeFn>(p);
    else
      cudaGetLastError();
  });
  return fn;
}

// [p, p + bytes) must be device (or managed) memory of `device`, inside one allocation: a range
// that runs past its allocation would let a kernel read or write someone else's memory.
void CheckDeviceRange(Napi::Env env, void* p, size_t bytes, int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) Throw(env, "E_DEVICE", "cudaSetDevice: " + CudaText(e));
  cudaPointerAttributes attr{};
  e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    Throw(env, "E_ARG", "wrap: the address is not CUDA memory (" + CudaText(e) + ")");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    Throw(env, "E_ARG", std::string("wrap: the address is ") + (attr.type == cudaMemoryTypeHost ? "pinned host memory" : "not CUDA memory") + ", not device memory");
  if (attr.type == cudaMemoryTypeDevice && attr.device != device)
    Throw(env, "E_ARG", "wrap: the memory is on CUDA device " + std::to_string(attr.device) + "; this backend runs on device " + std::to_string(device));
  GetRangeFn range = AddressRangeQuery();
  if (range == nullptr) return;  // (an old driver: the attribute checks above are what there is)
  unsigned long long base = 0;
  size_t size = 0;
  const unsigned long long ptr = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p));
  if (range(&base, &size, ptr) != 0) {
    cudaGetLastError();
    Throw(env, "E_ARG", "wrap: the driver finds no allocation at the address");
  }
  if (ptr + bytes > base + size)
    Throw(env, "E_SHAPE", "wrap: " + std::to_string(bytes) + " bytes from the address run past its allocation (" + std::to_string(base + size - ptr) + " bytes left in it)");
}

// A caller's stream must be live and on this context's device.
void CheckStream(Napi::Env env, cudaStream_t s, int device) {
  cudaError_t e = cudaStreamQuery(s);
  if (e != cudaSuccess && e != cudaErrorNotReady) {
    cudaGetLastError();
    Throw(env, "E_ARG", "Context options: stream is not a live CUDA stream (" + CudaText(e) + ")");
  }
  if (e == cudaErrorNotReady) cudaGetLastError();
  int d = -1;
  e = cudaStreamGetDevice(s, &d);
  if (e == cudaSuccess && d != device)
    Throw(env, "E_ARG", "Context options: stream belongs to CUDA device " + std::to_string(d) + "; this backend runs on device " + std::to_string(device));
  if (e != cudaSuccess) cudaGetLastError();
}

}  // namespace
