// Standalone check-and-time harness for the @fa CUDA kernels (no Node needed).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Icsrc dev/harness.cu csrc/*.cu -o harness
//   ./harness [test] [bench] [big] [variants]
//
// test:  random inputs (never zeros) for every option, both dtypes, every head-dim bucket;
//        compares forward (O, LSE) and backward (dQ, dK, dV) with a naive float32 CUDA reference;
//        checks deterministic dQ is bit-identical across runs; prints one row per case.
// bench: forward/backward TFLOP/s, D in {64,128}, causal and not, T 512..16K, B*T = 16K tokens,
//        hidden 2048 (FlashAttention paper shapes), CUDA-event median.
// big:   one head, T = 100 000, D = 128, bf16: forward and backward time and extra memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../csrc/fa_launch.cuh"

using namespace fa;

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, \
              cudaGetErrorString(e_));                                                          \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

// ------------------------------------------------------------------------------------------------
// inputs
// ------------------------------------------------------------------------------------------------
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
    p[i] = Mma<T>::from_float(v);
  }
}
template <typename T>
__global__ void poison_kernel(T* p, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = Mma<T>::from_float(NAN);
}
template <typename T>
__global__ void to_float_kernel(const T* p, float* o, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) o[i] = Mma<T>::to_float(p[i]);
}

// ------------------------------------------------------------------------------------------------
// naive float32 reference, one thread per (packed query row, head)
// ------------------------------------------------------------------------------------------------
template <typename T>
__device__ float ref_score(const FaArgs& a, const T* q, const T* k, const SeqInfo& s, int b, int h, int i, int j, float* dcap) {
  const int hk = h / (a.H / a.Hkv);
  const T* qp = q + ((int64_t)(s.q0 + i) * a.H + h) * a.d;
  const T* kp = k + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
  float x = 0.f;
  for (int c = 0; c < a.d; ++c) x += Mma<T>::to_float(qp[c]) * Mma<T>::to_float(kp[c]);
  float sc = x * a.scale;
  if (dcap) *dcap = 1.f;
  if (a.softcap > 0.f) {
    float th = tanhf(sc / a.softcap);
    sc = a.softcap * th;
    if (dcap) *dcap = 1.f - th * th;
  }
  const float slope = a.alibi ? a.alibi[b * a.H + h] : 0.f;
  sc -= slope * fabsf((float)(i + s.off - j));
  return sc;
}

template <typename T>
__global__ void ref_fwd_kernel(FaArgs a, const T* q, const T* k, const T* v, float* o, float* lse) {
  int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (item >= (int64_t)a.total_q * a.H) return;
  const int row = item / a.H, h = item % a.H;
  int b = 0;
  while (a.cu_q[b + 1] <= row) ++b;
  const SeqInfo s = seq_info(a, b);
  const int i = row - s.q0, hk = h / (a.H / a.Hkv);
  float mx = -INFINITY;
  for (int j = 0; j < s.tk; ++j)
    if (visible(a, s, i, j)) mx = fmaxf(mx, ref_score(a, q, k, s, b, h, i, j, nullptr));
  float sum = 0.f;
  float* op = o + ((int64_t)row * a.H + h) * a.d;
  for (int c = 0; c < a.d; ++c) op[c] = 0.f;
  for (int j = 0; j < s.tk; ++j) {
    if (!visible(a, s, i, j)) continue;
    const float p = expf(ref_score(a, q, k, s, b, h, i, j, nullptr) - mx);
    sum += p;
    const T* vp = v + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    for (int c = 0; c < a.d; ++c) op[c] += p * Mma<T>::to_float(vp[c]);
  }
  for (int c = 0; c < a.d; ++c) op[c] = sum > 0.f ? op[c] / sum : 0.f;
  lse[lse_index(a, b, h, s.q0, i)] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

// dq written directly; dk, dv accumulated with atomics (float32).
template <typename T>
__global__ void ref_bwd_kernel(FaArgs a, const T* q, const T* k, const T* v, const T* dout, const float* oref,
                               const float* lse, float* dq, float* dk, float* dv) {
  int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (item >= (int64_t)a.total_q * a.H) return;
  const int row = item / a.H, h = item % a.H;
  int b = 0;
  while (a.cu_q[b + 1] <= row) ++b;
  const SeqInfo s = seq_info(a, b);
  const int i = row - s.q0, hk = h / (a.H / a.Hkv);
  const float L = lse[lse_index(a, b, h, s.q0, i)];
  const T* dop = dout + ((int64_t)row * a.H + h) * a.d;
  const float* op = oref + ((int64_t)row * a.H + h) * a.d;
  float Dsum = 0.f;
  for (int c = 0; c < a.d; ++c) Dsum += Mma<T>::to_float(dop[c]) * op[c];
  float* dqp = dq + ((int64_t)row * a.H + h) * a.d;
  for (int c = 0; c < a.d; ++c) dqp[c] = 0.f;
  if (L == -INFINITY) return;
  const T* qp = q + ((int64_t)row * a.H + h) * a.d;
  for (int j = 0; j < s.tk; ++j) {
    if (!visible(a, s, i, j)) continue;
    float dcap;
    const float p = expf(ref_score(a, q, k, s, b, h, i, j, &dcap) - L);
    const T* vp = v + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    const T* kp = k + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    float dp = 0.f;
    for (int c = 0; c < a.d; ++c) dp += Mma<T>::to_float(dop[c]) * Mma<T>::to_float(vp[c]);
    const float ds = p * (dp - Dsum) * dcap * a.scale;
    float* dkp = dk + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    float* dvp = dv + ((int64_t)(s.k0 + j) * a.Hkv + hk) * a.d;
    for (int c = 0; c < a.d; ++c) {
      dqp[c] += ds * Mma<T>::to_float(kp[c]);
      atomicAdd(dkp + c, ds * Mma<T>::to_float(qp[c]));
      atomicAdd(dvp + c, p * Mma<T>::to_float(dop[c]));
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
  int splits = 0;  // 0 = heuristic
  float amp = 1.f;
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

static int g_sms = 132, g_arch = 90;

template <typename T>
static void fill(void* p, size_t n, uint64_t seed, float amp) {
  fill_kernel<T><<<1024, 256>>>((T*)p, n, seed, amp);
  CK(cudaGetLastError());
}

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
  a.arch = g_arch;
  a.no_wgmma_bwd = getenv("FA_CUDA_NO_WGMMA_BWD") != nullptr;
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
  for (void** p : {&D.q, &D.o, &D.dout, &D.dq}) CK(cudaMalloc(p, std::max<size_t>(D.nq, 1) * 2));
  for (void** p : {&D.k, &D.v, &D.dk, &D.dv}) CK(cudaMalloc(p, std::max<size_t>(D.nk, 1) * 2));
  CK(cudaMalloc(&D.lse, std::max<size_t>((size_t)a.total_q * a.H, 1) * 4));
  auto F = c.dtype == kBF16 ? fill<__nv_bfloat16> : fill<__half>;
  F(D.q, D.nq, seed * 4 + 1, c.amp);
  F(D.k, D.nk, seed * 4 + 2, c.amp);
  F(D.v, D.nk, seed * 4 + 3, 1.f);
  F(D.dout, D.nq, seed * 4 + 4, 1.f);
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
typedef cudaError_t (*Launcher)(FaArgs*, const FaTensors&, cudaStream_t);
static Launcher g_fwd_override = nullptr, g_bwd_override = nullptr;
static void run_fwd(Dev& D) {
  FaTensors t = tensors(D);
  if (g_fwd_override) {
    fwd_workspace_bytes_splits(&D.a, 1);
    D.a.oaccum = D.a.lseaccum = nullptr;
    CK(g_fwd_override(&D.a, t, 0));
  } else {
    CK(fwd(&D.a, t, D.ws, 0));
  }
}
static void run_bwd(Dev& D) {
  FaTensors t = tensors(D);
  if (g_bwd_override) {
    bwd_setup(&D.a, D.bws);
    CK(g_bwd_override(&D.a, t, 0));
  } else {
    CK(bwd(&D.a, t, D.bws, 0));
  }
}

static std::vector<float> dev_to_host(const void* p, size_t n, int dtype) {
  float* f;
  CK(cudaMalloc(&f, std::max<size_t>(n, 1) * 4));
  if (dtype == kBF16) to_float_kernel<__nv_bfloat16><<<1024, 256>>>((const __nv_bfloat16*)p, f, n);
  else to_float_kernel<__half><<<1024, 256>>>((const __half*)p, f, n);
  CK(cudaGetLastError());
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), f, n * 4, cudaMemcpyDeviceToHost));
  cudaFree(f);
  return h;
}
static std::vector<float> fdev_to_host(const float* p, size_t n) {
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

// relative L2 error; NaN where the outputs disagree on non-finite values
static double rel_err(const std::vector<float>& x, const std::vector<float>& r, int* bad_nonfinite) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(r[i]) || !std::isfinite(x[i])) {
      if (!(std::isinf(r[i]) && x[i] == r[i])) ++*bad_nonfinite;
      continue;
    }
    num += (double)(x[i] - r[i]) * (x[i] - r[i]);
    den += (double)r[i] * r[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

static int g_fail = 0;

static void test_case(const Case& c, uint64_t seed) {
  Dev D = make_dev(c, seed);
  FaArgs& a = D.a;
  const bool bf = c.dtype == kBF16;
  // poison outputs
  if (bf) {
    poison_kernel<__nv_bfloat16><<<256, 256>>>((__nv_bfloat16*)D.o, D.nq);
    poison_kernel<__nv_bfloat16><<<256, 256>>>((__nv_bfloat16*)D.dq, D.nq);
    poison_kernel<__nv_bfloat16><<<256, 256>>>((__nv_bfloat16*)D.dk, D.nk);
    poison_kernel<__nv_bfloat16><<<256, 256>>>((__nv_bfloat16*)D.dv, D.nk);
  } else {
    poison_kernel<__half><<<256, 256>>>((__half*)D.o, D.nq);
    poison_kernel<__half><<<256, 256>>>((__half*)D.dq, D.nq);
    poison_kernel<__half><<<256, 256>>>((__half*)D.dk, D.nk);
    poison_kernel<__half><<<256, 256>>>((__half*)D.dv, D.nk);
  }
  CK(cudaMemset(D.lse, 0xff, (size_t)a.total_q * a.H * 4));
  run_fwd(D);
  CK(cudaDeviceSynchronize());
  const size_t nl = (size_t)a.total_q * a.H;
  float *oref, *lref, *dqr, *dkr, *dvr;
  CK(cudaMalloc(&oref, std::max<size_t>(D.nq, 1) * 4));
  CK(cudaMalloc(&lref, std::max<size_t>(nl, 1) * 4));
  CK(cudaMalloc(&dqr, std::max<size_t>(D.nq, 1) * 4));
  CK(cudaMalloc(&dkr, std::max<size_t>(D.nk, 1) * 4));
  CK(cudaMalloc(&dvr, std::max<size_t>(D.nk, 1) * 4));
  CK(cudaMemset(dkr, 0, D.nk * 4));
  CK(cudaMemset(dvr, 0, D.nk * 4));
  const int blocks = (nl + 127) / 128;
  if (nl) {
    if (bf) {
      ref_fwd_kernel<__nv_bfloat16><<<blocks, 128>>>(a, (const __nv_bfloat16*)D.q, (const __nv_bfloat16*)D.k, (const __nv_bfloat16*)D.v, oref, lref);
      ref_bwd_kernel<__nv_bfloat16><<<blocks, 128>>>(a, (const __nv_bfloat16*)D.q, (const __nv_bfloat16*)D.k, (const __nv_bfloat16*)D.v,
                                                    (const __nv_bfloat16*)D.dout, oref, lref, dqr, dkr, dvr);
    } else {
      ref_fwd_kernel<__half><<<blocks, 128>>>(a, (const __half*)D.q, (const __half*)D.k, (const __half*)D.v, oref, lref);
      ref_bwd_kernel<__half><<<blocks, 128>>>(a, (const __half*)D.q, (const __half*)D.k, (const __half*)D.v, (const __half*)D.dout, oref, lref,
                                             dqr, dkr, dvr);
    }
    CK(cudaGetLastError());
  }
  run_bwd(D);
  CK(cudaDeviceSynchronize());
  int nf = 0;
  auto O = dev_to_host(D.o, D.nq, c.dtype);
  auto L = fdev_to_host(D.lse, nl);
  double eo = rel_err(O, fdev_to_host(oref, D.nq), &nf);
  int nfl = 0;
  auto Lr = fdev_to_host(lref, nl);
  double el = rel_err(L, Lr, &nfl);
  int nfb = 0;
  auto dQ = dev_to_host(D.dq, D.nq, c.dtype);
  double eq = rel_err(dQ, fdev_to_host(dqr, D.nq), &nfb);
  double ek = rel_err(dev_to_host(D.dk, D.nk, c.dtype), fdev_to_host(dkr, D.nk), &nfb);
  double ev = rel_err(dev_to_host(D.dv, D.nk, c.dtype), fdev_to_host(dvr, D.nk), &nfb);
  // determinism: run backward again, compare dQ bits
  run_bwd(D);
  CK(cudaDeviceSynchronize());
  auto dQ2 = dev_to_host(D.dq, D.nq, c.dtype);
  const bool same = memcmp(dQ.data(), dQ2.data(), dQ.size() * 4) == 0;
  const double tol = bf ? 2e-2 : 5e-3;
  const bool ok = nf == 0 && nfl == 0 && nfb == 0 && eo < tol && el < 1e-3 && eq < 2 * tol && ek < 2 * tol && ev < 2 * tol && (!c.det || same);
  if (!ok) ++g_fail;
  printf("%-26s %-4s d=%3d spl=%2d | O %.1e LSE %.1e nonfin %d/%d | dQ %.1e dK %.1e dV %.1e nonfin %d | det %s | %s\n", c.name.c_str(),
         bf ? "bf16" : "f16", c.d, a.num_splits, eo, el, nf, nfl, eq, ek, ev, nfb, same ? "same" : "diff", ok ? "ok" : "FAIL");
  fflush(stdout);
  for (float* p : {oref, lref, dqr, dkr, dvr}) cudaFree(p);
  free_dev(D);
}

static std::vector<Case> test_cases() {
  std::vector<Case> cs;
  for (int dt : {kBF16, kF16}) {
    for (int d : {64, 128, 256}) {
      Case c; c.dtype = dt; c.d = d; c.name = "plain gqa 300";
      cs.push_back(c);
      c.name = "causal 200x457"; c.causal = true; c.tq = 200; c.tk = 457; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "causal 300x100 (empty)"; c.causal = true; c.tq = 300; c.tk = 100; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "window 32,16"; c.wl = 32; c.wr = 16; c.tq = 333; c.tk = 280; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "softcap+alibi causal"; c.softcap = 5.f; c.alibi = true; c.causal = true; c.amp = 3.f; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "varlen causal"; c.causal = true; c.segq = {77, 0, 130, 1}; c.segk = {90, 5, 130, 300}; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "mqa det"; c.Hkv = 1; c.det = true; c.tq = 129; c.tk = 513; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "decode split"; c.B = 1; c.H = 2; c.Hkv = 1; c.tq = 3; c.tk = 5000; c.alibi = true; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "window left only, det"; c.wl = 50; c.det = true; c.causal = true; c.tq = 400; c.tk = 400; cs.push_back(c);
    }
    for (int d : {32, 96, 136}) {
      Case c; c.dtype = dt; c.d = d; c.name = "odd d causal"; c.causal = true; c.tq = 190; c.tk = 230; cs.push_back(c);
    }
    Case c; c.dtype = dt; c.d = 128; c.name = "T=1"; c.tq = 1; c.tk = 1; cs.push_back(c);
    c.name = "big scores"; c.tq = 256; c.tk = 256; c.amp = 8.f; cs.push_back(c);
    c = Case(); c.dtype = dt; c.d = 128; c.name = "split forced 4"; c.splits = 4; c.tq = 100; c.tk = 1000; c.causal = true; cs.push_back(c);
  }
  return cs;
}

// ------------------------------------------------------------------------------------------------
// timing
// ------------------------------------------------------------------------------------------------
template <typename F>
static float time_ms(F f, int warm, int reps) {
  for (int i = 0; i < warm; ++i) f();
  CK(cudaDeviceSynchronize());
  std::vector<float> ts;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

static void bench(FILE* js) {
  printf("\n%-4s %-6s %-6s %-4s %-4s | %-9s %-9s %-9s\n", "D", "causal", "T", "B", "H", "fwd TF/s", "bwd TF/s", "bwd det");
  bool first = true;
  for (int d : {64, 128})
    for (int causal : {0, 1})
      for (int T : {512, 1024, 2048, 4096, 8192, 16384}) {
        Case c;
        c.d = d; c.causal = causal; c.tq = c.tk = T; c.B = 16384 / T; c.H = c.Hkv = 2048 / d;
        Dev D = make_dev(c, 7);
        const double fl = 4.0 * c.B * c.H * (double)T * T * d / (causal ? 2 : 1);
        float fms = time_ms([&] { run_fwd(D); }, 3, 20);
        float bms = time_ms([&] { run_bwd(D); }, 3, 20);
        D.a.deterministic = 1;
        free_dev(D);
        c.det = true;
        Dev D2 = make_dev(c, 7);
        float dms = time_ms([&] { run_bwd(D2); }, 2, 10);
        free_dev(D2);
        const double f = fl / fms / 1e9, b = 2.5 * fl / bms / 1e9, dd = 2.5 * fl / dms / 1e9;
        printf("%-4d %-6s %-6d %-4d %-4d | %-9.1f %-9.1f %-9.1f\n", d, causal ? "yes" : "no", T, c.B, c.H, f, b, dd);
        fflush(stdout);
        if (js) fprintf(js, "%s{\"D\":%d,\"causal\":%s,\"T\":%d,\"B\":%d,\"H\":%d,\"fwd\":%.1f,\"bwd\":%.1f,\"bwd_det\":%.1f}", first ? "" : ",\n", d,
                        causal ? "true" : "false", T, c.B, c.H, f, b, dd);
        first = false;
      }
}

static void big() {
  for (int T : {25000, 50000, 100000}) {
    Case c;
    c.B = 1; c.H = c.Hkv = 1; c.d = 128; c.tq = c.tk = T;
    size_t f0, tot;
    CK(cudaMemGetInfo(&f0, &tot));
    Dev D = make_dev(c, 11);
    size_t f1;
    CK(cudaMemGetInfo(&f1, &tot));
    const double io = (double)D.nq * 2 * 8;  // q k v o do dq dk dv, bf16
    const double extra = (double)(f0 - f1) - io;  // lse + workspaces (+ allocation rounding)
    const double fl = 4.0 * T * (double)T * 128;
    float fms = 0, bms = 0;
    if (T == 100000) {
      fms = time_ms([&] { run_fwd(D); }, 2, 10);
      bms = time_ms([&] { run_bwd(D); }, 1, 5);
    } else {
      run_fwd(D);
      run_bwd(D);
      CK(cudaDeviceSynchronize());
    }
    printf("big: T=%d H=1 D=128 bf16: fwd %.2f ms (%.1f TF/s), bwd %.2f ms (%.1f TF/s); extra device memory %.1f MB "
           "(lse %.2f MB, fwd ws %.1f MB, bwd ws %.1f MB); inputs+outputs %.1f MB\n",
           T, fms, fms ? fl / fms / 1e9 : 0, bms, bms ? 2.5 * fl / bms / 1e9 : 0, extra / 1e6, T * 4 / 1e6, D.ws_bytes / 1e6, D.bws_bytes / 1e6, io / 1e6);
    fflush(stdout);
    free_dev(D);
  }
}

// ------------------------------------------------------------------------------------------------
// kernel variants: each checked on two cases, then timed on the benchmark shapes
// ------------------------------------------------------------------------------------------------
struct Variant {
  const char* name;
  int d;
  Launcher f, b;
};
static void variants() {
  using BF = __nv_bfloat16;
  Variant vs[] = {
      {"W0 wgmma d128 BN128 2wg", 128, launch_fwd_wg<BF, WgCfg<128, 128, 2>>, nullptr},
      {"W6 wgmma d128 3 stages", 128, launch_fwd_wg<BF, WgCfg<128, 128, 2, 3, false>>, nullptr},
      {"W9 wgmma d128 3st pipelined", 128, launch_fwd_wg<BF, WgCfg<128, 128, 2, 3, false, true>>, nullptr},
      {"W10 wgmma d128 2st pipelined", 128, launch_fwd_wg<BF, WgCfg<128, 128, 2, 2, false, true>>, nullptr},
      {"W3 wgmma d64 BN128 2wg", 64, launch_fwd_wg<BF, WgCfg<64, 128, 2>>, nullptr},
      {"W11 wgmma d64 3st pipelined", 64, launch_fwd_wg<BF, WgCfg<64, 128, 2, 3, false, true>>, nullptr},
      {"W12 wgmma d64 4st pipelined", 64, launch_fwd_wg<BF, WgCfg<64, 128, 2, 4, false, true>>, nullptr},
      {"F0 fwd d128 BM128 BN64 8w", 128, launch_fwd_cfg<BF, FwdCfg<128, 128, 64, 8, 1, true>>, nullptr},
      {"G2 fwd d64 BM64 BN128 4w", 64, launch_fwd_cfg<BF, FwdCfg<64, 64, 128, 4, 1, true>>, nullptr},
      {"BW wgmma bwd d128", 128, nullptr, launch_bwd_wg<BF, BwdWgCfg<128>>},
      {"BW wgmma bwd d64", 64, nullptr, launch_bwd_wg<BF, BwdWgCfg<64>>},
      {"B0 bwd d128 BM64 BN128 8w", 128, nullptr, launch_bwd_cfg<BF, BwdCfg<128, 64, 128, 8, 8>>},
      {"C0 bwd d64 BM64 BN128 8w", 64, nullptr, launch_bwd_cfg<BF, BwdCfg<64, 64, 128, 8, 8>>},
  };
  printf("\n%-30s | %-8s | T=4096 nc  T=16K nc  T=4096 c  T=16K c (TFLOP/s) | 100K fwd ms\n", "variant", "check");
  for (auto& v : vs) {
    g_fwd_override = v.f;
    g_bwd_override = v.b;
    const int before = g_fail;
    Case c; c.d = v.d; c.causal = true; c.tq = 200; c.tk = 457; c.name = std::string(v.name) + " chk1";
    test_case(c, 99);
    c = Case(); c.d = v.d; c.tq = 300; c.tk = 300; c.wl = 40; c.wr = 7; c.softcap = 4.f; c.alibi = true; c.name = std::string(v.name) + " chk2";
    test_case(c, 98);
    const bool ok = g_fail == before;
    printf("%-30s | %-8s |", v.name, ok ? "ok" : "FAIL");
    for (int causal : {0, 1})
      for (int T : {4096, 16384}) {
        Case b;
        b.d = v.d; b.causal = causal; b.tq = b.tk = T; b.B = 16384 / T; b.H = b.Hkv = 2048 / v.d;
        Dev D = make_dev(b, 7);
        const double fl = 4.0 * b.B * b.H * (double)T * T * v.d / (causal ? 2 : 1);
        double tf;
        if (v.f) tf = fl / time_ms([&] { run_fwd(D); }, 3, 15) / 1e9;
        else tf = 2.5 * fl / time_ms([&] { run_bwd(D); }, 3, 15) / 1e9;
        printf(" %-9.1f", tf);
        free_dev(D);
      }
    if (v.f && v.d == 128) {
      Case b;
      b.d = 128; b.B = 1; b.H = b.Hkv = 1; b.tq = b.tk = 100000;
      Dev D = make_dev(b, 11);
      printf(" | %.2f", time_ms([&] { run_fwd(D); }, 2, 10));
      free_dev(D);
    }
    printf("\n");
    fflush(stdout);
  }
  g_fwd_override = g_bwd_override = nullptr;
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  g_arch = prop.major * 10 + prop.minor;
  if (getenv("FA_CUDA_NO_WGMMA")) g_arch = 0;
  printf("device %s, %d SMs, cc %d.%d\n", prop.name, g_sms, prop.major, prop.minor);
  bool t = false, b = false, g = false;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "test")) t = true;
    if (!strcmp(argv[i], "bench")) b = true;
    if (!strcmp(argv[i], "big")) g = true;
    if (!strcmp(argv[i], "variants")) { variants(); return g_fail ? 1 : 0; }
    if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
  }
  if (!t && !b && !g) t = b = g = true;
  if (t) {
    uint64_t seed = 1;
    for (auto& c : test_cases()) test_case(c, seed++);
    printf("tests: %d failed\n", g_fail);
  }
  if (g) big();
  if (b) {
    FILE* js = json ? fopen(json, "w") : nullptr;
    if (js) fprintf(js, "[\n");
    bench(js);
    if (js) { fprintf(js, "\n]\n"); fclose(js); }
  }
  return g_fail ? 1 : 0;
}
