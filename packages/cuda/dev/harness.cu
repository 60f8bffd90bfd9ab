// Standalone check-and-time harness for the @fa CUDA kernels (no Node needed).
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Icsrc dev/harness.cu csrc/fa_*.cu -o harness
//   ./harness [test] [bench] [bench32] [big] [variants] [tcrate]
//
// test:     random inputs (never zeros) for every option, every dtype (f32 on both of its paths),
//           every head-dim bucket and head dims off the multiples of 8; compares forward (O, LSE)
//           and backward (dQ, dK, dV) with a naive double-precision CUDA reference; checks
//           deterministic dQ is bit-identical across runs; prints one row per case.
// bench:    bf16 forward/backward TFLOP/s, D in {64,128}, causal and not, T 512..16K, B*T = 16K
//           tokens, hidden 2048 (FlashAttention paper shapes), CUDA-event median.
// bench32:  the same for f32 at D = 128 (and D = 64 at 16K): tensor-core split and FFMA paths.
// big:      one head, T = 100 000, D = 128, bf16: forward and backward time and extra memory.
// variants: kernel variants (dev/harness_variants.cuh); tcrate: f16 vs tf32 wgmma rate.
// calltime: a backward call's time outside its main kernel (dev/harness_calltime.cuh).
#include "harness_problem.cuh"
#include "harness_tcrate.cuh"
#include "harness_variants.cuh"
#include "harness_calltime.cuh"

static std::vector<Case> test_cases() {
  std::vector<Case> cs;
  for (int dt : {kBF16, kF16, kF32}) {
    for (int d : {64, 128, 256}) {
      Case c; c.dtype = dt; c.d = d; c.name = "plain gqa 300";
      cs.push_back(c);
      c.name = "causal 200x457"; c.causal = true; c.tq = 200; c.tk = 457; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "causal 300x100 (empty)"; c.causal = true; c.tq = 300; c.tk = 100; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "window 32,16"; c.wl = 32; c.wr = 16; c.tq = 333; c.tk = 280; cs.push_back(c);
      // windows near INT_MAX bound nothing (fwd()/bwd() make them -1: 32-bit key ranges overflowed)
      c = Case(); c.dtype = dt; c.d = d; c.name = "windows near INT_MAX"; c.wl = 2147483647; c.wr = 2147483600; c.tq = 200; c.tk = 457; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "softcap+alibi causal"; c.softcap = 5.f; c.alibi = true; c.causal = true; c.amp = 3.f; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "varlen causal"; c.causal = true; c.segq = {77, 0, 130, 1}; c.segk = {90, 5, 130, 300}; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "mqa det"; c.Hkv = 1; c.det = true; c.tq = 129; c.tk = 513; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "decode split"; c.B = 1; c.H = 2; c.Hkv = 1; c.tq = 3; c.tk = 5000; c.alibi = true; cs.push_back(c);
      c = Case(); c.dtype = dt; c.d = d; c.name = "window left only, det"; c.wl = 50; c.det = true; c.causal = true; c.tq = 400; c.tk = 400; cs.push_back(c);
      if (d <= 128) {  // the persistent kernels' tile ring and writer turns over several tiles a CTA (~4)
        c = Case(); c.dtype = dt; c.d = d; c.name = "many tiles a CTA"; c.B = 8; c.H = c.Hkv = 32; c.tq = c.tk = 200; cs.push_back(c);
        c.name = "many tiles a CTA, det causal"; c.det = true; c.causal = true; cs.push_back(c);
      }
    }
    // head dims off the kernels' buckets: multiples of 8 run zero-padded in the bucket, the
    // others are first copied (f16/bf16) or split (f32) into a layout padded to a multiple of 8
    for (int d : {1, 5, 13, 32, 96, 100, 136, 200}) {
      Case c; c.dtype = dt; c.d = d; c.name = "odd d causal"; c.causal = true; c.tq = 190; c.tk = 230; cs.push_back(c);
    }
    Case c; c.dtype = dt; c.d = 13; c.name = "odd d varlen gqa det"; c.segq = {40, 0, 77}; c.segk = {65, 9, 77}; c.H = 6; c.Hkv = 2; c.det = true; cs.push_back(c);
    c = Case(); c.dtype = dt; c.d = 128; c.name = "T=1"; c.tq = 1; c.tk = 1; cs.push_back(c);
    c.name = "big scores"; c.tq = 256; c.tk = 256; c.amp = 8.f; cs.push_back(c);
    c = Case(); c.dtype = dt; c.d = 128; c.name = "split forced 4"; c.splits = 4; c.tq = 100; c.tk = 1000; c.causal = true; cs.push_back(c);
  }
  // f32: the split kernels on mma.sync (what an A100 runs), magnitudes far from 1 (the per-tensor
  // power-of-two scaling), and the FFMA path
  for (int d : {64, 128}) {
    Case c; c.dtype = kF32; c.d = d; c.arch = 80; c.name = "mma.sync causal"; c.causal = true; c.tq = 200; c.tk = 457; cs.push_back(c);
    c.name = "mma.sync det window"; c.causal = false; c.wl = 30; c.wr = 3; c.det = true; cs.push_back(c);
  }
  for (int path : {kF32Auto, kF32Ffma}) {
    Case c; c.dtype = kF32; c.f32_path = path; c.d = 128; c.name = "tiny values (1e-3, 1e-9)"; c.amp = 1e-3f; c.vamp = 1e-9f; c.causal = true; cs.push_back(c);
    c.name = "huge values (1e-3, 1e9)"; c.vamp = 1e9f; cs.push_back(c);
    c = Case(); c.dtype = kF32; c.f32_path = path; c.d = 64; c.name = "large q, k (x20)"; c.amp = 20.f; c.vamp = 1.f; c.tq = 65; c.tk = 129; cs.push_back(c);
  }
  for (int d : {1, 64, 128, 200, 256}) {
    Case c; c.dtype = kF32; c.f32_path = kF32Ffma; c.d = d; c.name = "ffma plain gqa 300"; cs.push_back(c);
    c = Case(); c.dtype = kF32; c.f32_path = kF32Ffma; c.d = d; c.name = "ffma softcap+alibi win"; c.softcap = 5.f; c.alibi = true; c.wl = 40; c.wr = 7; c.amp = 3.f; cs.push_back(c);
    c = Case(); c.dtype = kF32; c.f32_path = kF32Ffma; c.d = d; c.name = "ffma varlen causal"; c.causal = true; c.segq = {77, 0, 130, 1}; c.segk = {90, 5, 130, 300}; cs.push_back(c);
    c = Case(); c.dtype = kF32; c.f32_path = kF32Ffma; c.d = d; c.name = "ffma decode mqa"; c.B = 1; c.H = 4; c.Hkv = 1; c.tq = 3; c.tk = 2000; cs.push_back(c);
  }
  return cs;
}

static void bench(FILE* js) {
  printf("\n%-4s %-6s %-6s %-4s %-4s | %-9s %-9s %-9s\n", "D", "causal", "T", "B", "H", "fwd TF/s", "bwd TF/s", "bwd det");
  bool first = true;
  const char* only_d = getenv("FA_BENCH_D");  // e.g. 128: only that head dim's rows
  for (int d : {64, 128})
    for (int causal : {0, 1})
      for (int T : {512, 1024, 2048, 4096, 8192, 16384}) {
        if (only_d && *only_d && atoi(only_d) != d) continue;
        Case c;
        c.d = d; c.causal = causal; c.tq = c.tk = T; c.B = 16384 / T; c.H = c.Hkv = 2048 / d;
        Dev D = make_dev(c, 7);
        const double fl = 4.0 * c.B * c.H * (double)T * T * d / (causal ? 2 : 1);
        float fms = time_ms([&] { run_fwd(D); }, 3, 20);
        float bms = time_ms([&] { run_bwd(D); }, 3, 20);
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

// f32 rows (random f32 inputs, device tensors, the API's full call: preparation included).
static void bench32(FILE* js) {
  printf("\n%-4s %-6s %-6s %-4s %-4s | %-9s %-9s %-9s | %-9s %-9s (f32 TFLOP/s: tensor cores | FFMA)\n", "D", "causal", "T", "B", "H", "fwd", "bwd", "bwd det",
         "ffma fwd", "ffma bwd");
  bool first = true;
  struct Row { int d, causal, T; };
  for (Row r : {Row{128, 0, 4096}, Row{128, 0, 16384}, Row{128, 1, 4096}, Row{128, 1, 16384}, Row{64, 0, 16384}}) {
    Case c;
    c.dtype = kF32; c.d = r.d; c.causal = r.causal; c.tq = c.tk = r.T; c.B = 16384 / r.T; c.H = c.Hkv = 2048 / r.d;
    const double fl = 4.0 * c.B * c.H * (double)r.T * r.T * r.d / (r.causal ? 2 : 1);
    Dev D = make_dev(c, 7);
    const double f = fl / time_ms([&] { run_fwd(D); }, 3, 15) / 1e9;
    const double b = 2.5 * fl / time_ms([&] { run_bwd(D); }, 3, 15) / 1e9;
    free_dev(D);
    c.det = true;
    Dev D2 = make_dev(c, 7);
    const double dd = 2.5 * fl / time_ms([&] { run_bwd(D2); }, 2, 8) / 1e9;
    free_dev(D2);
    double ff = 0, fb = 0;
    if (r.T == 4096 && !r.causal) {  // the FFMA path once (it is slow)
      c.det = false;
      c.f32_path = kF32Ffma;
      Dev D3 = make_dev(c, 7);
      ff = fl / time_ms([&] { run_fwd(D3); }, 1, 3) / 1e9;
      fb = 2.5 * fl / time_ms([&] { run_bwd(D3); }, 1, 3) / 1e9;
      free_dev(D3);
    }
    printf("%-4d %-6s %-6d %-4d %-4d | %-9.1f %-9.1f %-9.1f | %-9.1f %-9.1f\n", r.d, r.causal ? "yes" : "no", r.T, c.B, c.H, f, b, dd, ff, fb);
    fflush(stdout);
    if (js) fprintf(js, "%s{\"D\":%d,\"causal\":%s,\"T\":%d,\"B\":%d,\"H\":%d,\"fwd\":%.1f,\"bwd\":%.1f,\"bwd_det\":%.1f,\"ffma_fwd\":%.1f,\"ffma_bwd\":%.1f}",
                    first ? "" : ",\n", r.d, r.causal ? "true" : "false", r.T, c.B, c.H, f, b, dd, ff, fb);
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

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  g_arch = prop.major * 10 + prop.minor;
  g_smem_limit = prop.sharedMemPerBlockOptin;
  if (getenv("FA_CUDA_NO_WGMMA")) g_arch = 0;
  printf("device %s, %d SMs, cc %d.%d, %zu bytes of shared memory per block\n", prop.name, g_sms, prop.major, prop.minor, g_smem_limit);
  bool t = false, b = false, b32 = false, g = false;
  const char* json = nullptr;
  const char* json32 = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "test")) t = true;
    if (!strcmp(argv[i], "bench")) b = true;
    if (!strcmp(argv[i], "bench32")) b32 = true;
    if (!strcmp(argv[i], "big")) g = true;
    if (!strcmp(argv[i], "tcrate")) tcrate();
    if (!strcmp(argv[i], "variants")) variants();
    if (!strcmp(argv[i], "calltime")) calltime();
    if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    if (!strcmp(argv[i], "--json32") && i + 1 < argc) json32 = argv[++i];
  }
  if (argc == 1) t = b = g = true;
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
  if (b32) {
    FILE* js = json32 ? fopen(json32, "w") : nullptr;
    if (js) fprintf(js, "[\n");
    bench32(js);
    if (js) { fprintf(js, "\n]\n"); fclose(js); }
  }
  if (g_fail) printf("harness: %d checks FAILED\n", g_fail);
  return g_fail ? 1 : 0;
}
