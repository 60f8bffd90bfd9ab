// The harness's problems: random inputs on the device (never zeros), a naive reference in double
// precision for every option, and one check of forward (O, LSE) and backward (dQ, dK, dV)
// against it. Included by dev/harness.cu only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../csrc/fa_launch.cuh"
#include "harness_common.cuh"

using namespace fa;


static int g_sms = 132, g_arch = 90, g_fail = 0;
static size_t g_smem_limit = 0;

// ------------------------------------------------------------------------------------------------
// inputs
// ------------------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float amp) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float u = (hash32(seed * 0x9E3779B97F4A7C15ULL + i) >> 8) * (1.f / 16777216.f);  // [0,1)
    float v = (2.f * u - 1.f) * amp;
    if (v == 0.f) v = 1e-3f * amp;
    p[i] = from_f<T>(v);
  }
}
template <typename T>
__global__ void poison_kernel(T* p, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = from_f<T>(NAN);
}
template <typename T>
__global__ void to_float_kernel(const T* p, float* o, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) o[i] = to_f32(p[i]);
}

// Runs f(tag) with the element type of a dtype: f(float{}), f(__half{}), f(__nv_bfloat16{}).
template <typename F>
static void with_type(int dtype, F f) {
  if (dtype == kF32) f(float{});
  else if (dtype == kF16) f(__half{});
  else f(__nv_bfloat16{});
}
static size_t esize(int dtype) { return dtype == kF32 ? 4 : 2; }
static const char* dtype_name(int dtype) { return dtype == kF32 ? "f32" : dtype == kF16 ? "f16" : "bf16"; }

// ------------------------------------------------------------------------------------------------
// naive reference in double precision, one thread per (packed query row, head)
// ------------------------------------------------------------------------------------------------
template <typename T>
__device__ double ref_score(const FaArgs& a, const T* q, const T* k, const SeqInfo& s, int b, int h, int i, int j, double* dcap) {
  const int hk = h / (a.H / a.Hkv);
  const T* qp = q + ((int64_t)(s.q0 + i) * a.H + h) * a.d;
  const T* kp = k + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
  double x = 0.0;
  for (int c = 0; c < a.d; ++c) x += (double)to_f32(qp[c]) * (double)to_f32(kp[c]);
  double sc = x * (double)a.scale;
  if (dcap) *dcap = 1.0;
  if (a.softcap > 0.f) {
    const double th = tanh(sc / a.softcap);
    sc = a.softcap * th;
    if (dcap) *dcap = 1.0 - th * th;
  }
  const double slope = a.alibi ? a.alibi[b * a.H + h] : 0.0;
  return sc - slope * fabs((double)(i + s.off - j));
}

template <typename T>
__global__ void ref_fwd_kernel(FaArgs a, const T* q, const T* k, const T* v, double* o, double* lse) {
  int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (item >= (int64_t)a.total_q * a.H) return;
  const int row = item / a.H, h = item % a.H;
  int b = 0;
  while (a.cu_q[b + 1] <= row) ++b;
  const SeqInfo s = seq_info(a, b);
  const int i = row - s.q0, hk = h / (a.H / a.Hkv);
  double mx = -INFINITY;
  for (int j = 0; j < s.tk; ++j)
    if (visible(a, s, i, j)) mx = fmax(mx, ref_score(a, q, k, s, b, h, i, j, nullptr));
  double sum = 0.0;
  double* op = o + ((int64_t)row * a.H + h) * a.d;
  for (int c = 0; c < a.d; ++c) op[c] = 0.0;
  for (int j = 0; j < s.tk; ++j) {
    if (!visible(a, s, i, j)) continue;
    const double p = exp(ref_score(a, q, k, s, b, h, i, j, nullptr) - mx);
    sum += p;
    const T* vp = v + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    for (int c = 0; c < a.d; ++c) op[c] += p * (double)to_f32(vp[c]);
  }
  for (int c = 0; c < a.d; ++c) op[c] = sum > 0.0 ? op[c] / sum : 0.0;
  lse[lse_index(a, b, h, s.q0, i)] = sum > 0.0 ? mx + log(sum) : -INFINITY;
}

// dq written directly; dk, dv accumulated with (double) atomics.
template <typename T>
__global__ void ref_bwd_kernel(FaArgs a, const T* q, const T* k, const T* v, const T* dout, const double* oref, const double* lse, double* dq,
                               double* dk, double* dv) {
  int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (item >= (int64_t)a.total_q * a.H) return;
  const int row = item / a.H, h = item % a.H;
  int b = 0;
  while (a.cu_q[b + 1] <= row) ++b;
  const SeqInfo s = seq_info(a, b);
  const int i = row - s.q0, hk = h / (a.H / a.Hkv);
  const double L = lse[lse_index(a, b, h, s.q0, i)];
  const T* dop = dout + ((int64_t)row * a.H + h) * a.d;
  const double* op = oref + ((int64_t)row * a.H + h) * a.d;
  double Dsum = 0.0;
  for (int c = 0; c < a.d; ++c) Dsum += (double)to_f32(dop[c]) * op[c];
  double* dqp = dq + ((int64_t)row * a.H + h) * a.d;
  for (int c = 0; c < a.d; ++c) dqp[c] = 0.0;
  if (L == -INFINITY) return;
  const T* qp = q + ((int64_t)row * a.H + h) * a.d;
  for (int j = 0; j < s.tk; ++j) {
    if (!visible(a, s, i, j)) continue;
    double dcap;
    const double p = exp(ref_score(a, q, k, s, b, h, i, j, &dcap) - L);
    const T* vp = v + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    const T* kp = k + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    double dp = 0.0;
    for (int c = 0; c < a.d; ++c) dp += (double)to_f32(dop[c]) * (double)to_f32(vp[c]);
    const double ds = p * (dp - Dsum) * dcap * a.scale;
    double* dkp = dk + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    double* dvp = dv + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    for (int c = 0; c < a.d; ++c) {
      dqp[c] += ds * (double)to_f32(kp[c]);
      atomicAdd(dkp + c, ds * (double)to_f32(qp[c]));
      atomicAdd(dvp + c, p * (double)to_f32(dop[c]));
    }
  }
}

// ------------------------------------------------------------------------------------------------
// a problem on the device
// ------------------------------------------------------------------------------------------------
struct Case {
  std::string name;
  int dtype = kBF16, B = 2, H = 4, Hkv = 2, d = 128, tq = 300, tk = 300;
  bool causal = false;
  int wl = -1, wr = -1;
  float softcap = 0.f;
  bool alibi = false;
  std::vector<int> segq, segk;  // varlen lengths when non-empty
  bool det = false;
  int splits = 0;      // 0 = heuristic
  float amp = 1.f;     // q and k
  float vamp = 1.f;    // v and dO
  int f32_path = kF32Auto;
  int arch = -1;       // -1: the GPU's; 80 runs the mma.sync kernels on a Hopper GPU
};

struct Dev {
  FaArgs a{};
  std::vector<int> cuq, cuk;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float* lse = nullptr;
  int *dcuq = nullptr, *dcuk = nullptr;
  float* dalibi = nullptr;
  size_t nq = 0, nk = 0;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  void* bws = nullptr;
  size_t bws_bytes = 0;
};

static Dev make_dev(const Case& c, uint64_t seed) {
  Dev D;
  FaArgs& a = D.a;
  a.dtype = c.dtype;
  a.H = c.H;
  a.Hkv = c.Hkv;
  a.d = c.d;
  if (!c.segq.empty()) {
    a.varlen = 1;
    a.B = c.segq.size();
    D.cuq.push_back(0);
    D.cuk.push_back(0);
    a.max_tq = a.max_tk = 0;
    for (int b = 0; b < a.B; ++b) {
      D.cuq.push_back(D.cuq.back() + c.segq[b]);
      D.cuk.push_back(D.cuk.back() + c.segk[b]);
      a.max_tq = std::max(a.max_tq, c.segq[b]);
      a.max_tk = std::max(a.max_tk, c.segk[b]);
    }
  } else {
    a.varlen = 0;
    a.B = c.B;
    a.max_tq = c.tq;
    a.max_tk = c.tk;
    for (int b = 0; b <= a.B; ++b) {
      D.cuq.push_back(b * c.tq);
      D.cuk.push_back(b * c.tk);
    }
  }
  a.total_q = D.cuq.back();
  a.total_k = D.cuk.back();
  a.scale = 1.f / sqrtf((float)c.d);
  a.softcap = c.softcap;
  a.win_left = c.wl;
  a.win_right = c.causal ? 0 : c.wr;
  a.deterministic = c.det;
  a.num_sms = g_sms;
  a.arch = c.arch >= 0 ? c.arch : g_arch;
  a.no_wgmma_bwd = getenv("FA_CUDA_NO_WGMMA_BWD") != nullptr;
  a.f32_path = c.f32_path;
  a.smem_limit = g_smem_limit;
  CK(cudaMalloc(&D.dcuq, D.cuq.size() * 4));
  CK(cudaMalloc(&D.dcuk, D.cuk.size() * 4));
  CK(cudaMemcpy(D.dcuq, D.cuq.data(), D.cuq.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(D.dcuk, D.cuk.data(), D.cuk.size() * 4, cudaMemcpyHostToDevice));
  a.cu_q = D.dcuq;
  a.cu_k = D.dcuk;
  if (c.alibi) {
    std::vector<float> sl(a.B * a.H);
    for (int i = 0; i < a.B * a.H; ++i) sl[i] = 0.05f * (1 + (i % a.H)) / a.H + 0.01f * (i / a.H);
    CK(cudaMalloc(&D.dalibi, sl.size() * 4));
    CK(cudaMemcpy(D.dalibi, sl.data(), sl.size() * 4, cudaMemcpyHostToDevice));
    a.alibi = D.dalibi;
  }
  D.nq = (size_t)a.total_q * a.H * a.d;
  D.nk = (size_t)a.total_k * a.Hkv * a.d;
  const size_t es = esize(c.dtype);
  for (void** p : {&D.q, &D.o, &D.dout, &D.dq}) CK(cudaMalloc(p, std::max<size_t>(D.nq, 1) * es));
  for (void** p : {&D.k, &D.v, &D.dk, &D.dv}) CK(cudaMalloc(p, std::max<size_t>(D.nk, 1) * es));
  CK(cudaMalloc(&D.lse, std::max<size_t>((size_t)a.total_q * a.H, 1) * 4));
  with_type(c.dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<1024, 256>>>((T*)D.q, D.nq, seed * 4 + 1, c.amp);
    fill_kernel<T><<<1024, 256>>>((T*)D.k, D.nk, seed * 4 + 2, c.amp);
    fill_kernel<T><<<1024, 256>>>((T*)D.v, D.nk, seed * 4 + 3, c.vamp);
    fill_kernel<T><<<1024, 256>>>((T*)D.dout, D.nq, seed * 4 + 4, c.vamp);
  });
  CK(cudaGetLastError());
  D.ws_bytes = c.splits > 0 ? fwd_workspace_bytes_splits(&a, c.splits) : fwd_workspace_bytes(&a);
  if (D.ws_bytes) CK(cudaMalloc(&D.ws, D.ws_bytes));
  D.bws_bytes = bwd_workspace_bytes(&a);
  if (D.bws_bytes) CK(cudaMalloc(&D.bws, D.bws_bytes));
  return D;
}
static void free_dev(Dev& D) {
  for (void* p : {D.q, D.k, D.v, D.o, D.dout, D.dq, D.dk, D.dv, (void*)D.lse, (void*)D.dcuq, (void*)D.dcuk, (void*)D.dalibi, D.ws, D.bws})
    if (p) cudaFree(p);
}
static FaTensors tensors(Dev& D) {
  FaTensors t{};
  t.q = D.q; t.k = D.k; t.v = D.v; t.o = D.o; t.lse = D.lse; t.dout = D.dout; t.dq = D.dq; t.dk = D.dk; t.dv = D.dv;
  return t;
}

// A launcher (fa_launch.cuh) called directly instead of the API's dispatch: the harness makes the
// kernel view (and, for f32 or a padded head dim, the prepared operands) the way fwd()/bwd() do.
typedef cudaError_t (*Launcher)(FaArgs*, const FaTensors&, cudaStream_t);
static Launcher g_fwd_override = nullptr, g_bwd_override = nullptr;
static void kernel_view(const Dev& D, void* ws, bool backward, FaArgs* k, FaTensors* kt) {
  const bool split = D.a.dtype == kF32;
  *k = D.a;
  k->d = (D.a.d + 7) / 8 * 8;
  k->d_out = D.a.d;
  kt->dout_src = kt->dout;
  const FaTensors caller = *kt;
  if (split || k->d != D.a.d) CK(prepare_operands(k, kt, caller, split, backward, ws, 0));
}
static void run_fwd(Dev& D) {
  FaTensors t = tensors(D);
  if (g_fwd_override) {
    fwd_workspace_bytes_splits(&D.a, 1);
    FaArgs k;
    kernel_view(D, D.ws, false, &k, &t);
    k.oaccum = k.lseaccum = nullptr;
    static int* tile_counter = nullptr;  // the persistent TMA forward's (its launcher zeroes it)
    if (!tile_counter) CK(cudaMalloc(&tile_counter, sizeof(int)));
    k.tile_counter = tile_counter;
    CK(g_fwd_override(&k, t, 0));
  } else {
    CK(fwd(&D.a, t, D.ws, 0));
  }
}
static void run_bwd(Dev& D) {
  FaTensors t = tensors(D);
  if (g_bwd_override) {
    bwd_setup(&D.a, D.bws);
    FaArgs k;
    kernel_view(D, D.bws, true, &k, &t);
    CK(g_bwd_override(&k, t, 0));
  } else {
    CK(bwd(&D.a, t, D.bws, 0));
  }
}

static std::vector<double> dev_to_host(const void* p, size_t n, int dtype) {
  float* f;
  CK(cudaMalloc(&f, std::max<size_t>(n, 1) * 4));
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    to_float_kernel<T><<<1024, 256>>>((const T*)p, f, n);
  });
  CK(cudaGetLastError());
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), f, n * 4, cudaMemcpyDeviceToHost));
  cudaFree(f);
  return std::vector<double>(h.begin(), h.end());
}
template <typename X>
static std::vector<double> fdev_to_host(const X* p, size_t n) {
  std::vector<X> h(n);
  CK(cudaMemcpy(h.data(), p, n * sizeof(X), cudaMemcpyDeviceToHost));
  return std::vector<double>(h.begin(), h.end());
}

// relative L2 error; counts outputs that disagree on non-finite values
static double rel_err(const std::vector<double>& x, const std::vector<double>& r, int* bad_nonfinite) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(r[i]) || !std::isfinite(x[i])) {
      if (!(std::isinf(r[i]) && x[i] == r[i])) ++*bad_nonfinite;
      continue;
    }
    num += (x[i] - r[i]) * (x[i] - r[i]);
    den += r[i] * r[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Forward and backward of one case against the double reference; one row per case.
static void test_case(const Case& c, uint64_t seed) {
  Dev D = make_dev(c, seed);
  FaArgs& a = D.a;
  with_type(c.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (void* p : {D.o, D.dq}) poison_kernel<T><<<256, 256>>>((T*)p, D.nq);
    for (void* p : {D.dk, D.dv}) poison_kernel<T><<<256, 256>>>((T*)p, D.nk);
  });
  CK(cudaMemset(D.lse, 0xff, (size_t)a.total_q * a.H * 4));
  run_fwd(D);
  CK(cudaDeviceSynchronize());
  const size_t nl = (size_t)a.total_q * a.H;
  double *oref, *lref, *dqr, *dkr, *dvr;
  CK(cudaMalloc(&oref, std::max<size_t>(D.nq, 1) * 8));
  CK(cudaMalloc(&lref, std::max<size_t>(nl, 1) * 8));
  CK(cudaMalloc(&dqr, std::max<size_t>(D.nq, 1) * 8));
  CK(cudaMalloc(&dkr, std::max<size_t>(D.nk, 1) * 8));
  CK(cudaMalloc(&dvr, std::max<size_t>(D.nk, 1) * 8));
  CK(cudaMemset(dkr, 0, D.nk * 8));
  CK(cudaMemset(dvr, 0, D.nk * 8));
  const int blocks = (nl + 127) / 128;
  if (nl) {
    with_type(c.dtype, [&](auto tag) {
      using T = decltype(tag);
      ref_fwd_kernel<T><<<blocks, 128>>>(a, (const T*)D.q, (const T*)D.k, (const T*)D.v, oref, lref);
      ref_bwd_kernel<T><<<blocks, 128>>>(a, (const T*)D.q, (const T*)D.k, (const T*)D.v, (const T*)D.dout, oref, lref, dqr, dkr, dvr);
    });
    CK(cudaGetLastError());
  }
  run_bwd(D);
  CK(cudaDeviceSynchronize());
  int nf = 0, nfl = 0, nfb = 0;
  const double eo = rel_err(dev_to_host(D.o, D.nq, c.dtype), fdev_to_host(oref, D.nq), &nf);
  const double el = rel_err(fdev_to_host(D.lse, nl), fdev_to_host(lref, nl), &nfl);
  auto dQ = dev_to_host(D.dq, D.nq, c.dtype);
  const double eq = rel_err(dQ, fdev_to_host(dqr, D.nq), &nfb);
  const double ek = rel_err(dev_to_host(D.dk, D.nk, c.dtype), fdev_to_host(dkr, D.nk), &nfb);
  const double ev = rel_err(dev_to_host(D.dv, D.nk, c.dtype), fdev_to_host(dvr, D.nk), &nfb);
  // determinism: run backward again, compare dQ bits
  run_bwd(D);
  CK(cudaDeviceSynchronize());
  auto dQ2 = dev_to_host(D.dq, D.nq, c.dtype);
  const bool same = memcmp(dQ.data(), dQ2.data(), dQ.size() * sizeof(double)) == 0;
  // f32: the kit's rule is 1e-5 relative (plus floors); the harness's reference is double, its
  // inputs exact, so the split lands near 1e-6 (large scores magnify it: 10x margin there)
  const double tol = c.dtype == kBF16 ? 2e-2 : c.dtype == kF16 ? 5e-3 : (c.amp >= 4.f ? 1e-4 : 1e-5);
  const double ltol = c.dtype == kF32 ? 1e-5 : 1e-3;
  const bool ok = nf == 0 && nfl == 0 && nfb == 0 && eo < tol && el < ltol && eq < 2 * tol && ek < 2 * tol && ev < 2 * tol && (!c.det || same);
  if (!ok) ++g_fail;
  const char* path = c.dtype != kF32 ? "" : c.f32_path == kF32Ffma ? " ffma" : " tc";
  printf("%-28s %-4s%-5s d=%3d spl=%2d | O %.1e LSE %.1e nonfin %d/%d | dQ %.1e dK %.1e dV %.1e nonfin %d | det %s | %s\n", c.name.c_str(),
         dtype_name(c.dtype), path, c.d, a.num_splits, eo, el, nf, nfl, eq, ek, ev, nfb, same ? "same" : "diff", ok ? "ok" : "FAIL");
  fflush(stdout);
  for (double* p : {oref, lref, dqr, dkr, dvr}) cudaFree(p);
  free_dev(D);
}

