// errors: JS errors with a `code`, and CUDA errors that name themselves.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

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

}  // namespace
