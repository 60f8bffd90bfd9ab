// checked readers: every argument JavaScript passes is type-checked and bounded here.
// Part of the binding's one translation unit: binding.cc includes the binding_*.h parts once,
// in order, each in the anonymous namespace (nothing here is visible to other files).
#pragma once
#include "binding_common.h"

namespace {

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

}  // namespace
