// harness calltime (session 7, for the next device session): where a backward call's time goes
// outside its main kernel. On the bench shapes, the library's whole bwd() (median of calls timed
// one by one, as `bench` does, and the mean of 20 calls enqueued back to back, which hides the
// host's work between calls) against its pieces launched alone on the same buffers: the dQ
// accumulator's memset, the Dsum pass (bwd_pre), the dQ conversion (bwd_post); "rest" is the whole
// call minus those three (the main kernel, the tile counter's memset, the launch gaps).
#pragma once
#include "harness_problem.cuh"

// The mean of n calls of f() enqueued back to back between two events, after `warm` calls.
template <typename F>
static float time_b2b_ms(F f, int warm, int n) {
  for (int i = 0; i < warm; ++i) f();
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < n; ++i) f();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ms / n;
}

static void calltime() {
  printf("\n%-4s %-6s %-6s | %-8s %-8s | %-8s %-8s %-8s %-8s | %-8s (bf16 backward, ms)\n", "D", "causal", "T", "bwd", "bwd b2b", "memset", "Dsum",
         "convert", "rest", "fwd");
  struct Row { int d, causal, T; };
  for (Row r : {Row{128, 0, 4096}, Row{128, 1, 4096}, Row{128, 1, 8192}, Row{128, 0, 16384}, Row{64, 0, 4096}, Row{64, 1, 4096}}) {
    Case c;
    c.d = r.d; c.causal = r.causal; c.tq = c.tk = r.T; c.B = 16384 / r.T; c.H = c.Hkv = 2048 / r.d;
    Dev D = make_dev(c, 7);
    run_fwd(D);
    const float fwd = time_ms([&] { run_fwd(D); }, 3, 20);
    const float full = time_ms([&] { run_bwd(D); }, 3, 20);
    const float b2b = time_b2b_ms([&] { run_bwd(D); }, 3, 20);
    FaTensors t = tensors(D);
    bwd_setup(&D.a, D.bws);
    FaArgs k;
    kernel_view(D, D.bws, true, &k, &t);
    const size_t acc = DqTiles::floats(k.total_q, k.B, k.H, r.d) * sizeof(float);
    const float set = time_ms([&] { CK(cudaMemsetAsync(k.dq_accum, 0, acc, 0)); }, 3, 20);
    const float pre = time_ms([&] { CK(bwd_pre<ElemBF16>(&k, t, 0)); }, 3, 20);
    k.dq_tiled = 1;
    const float post = time_ms([&] { CK(r.d == 64 ? (bwd_post<ElemBF16, 64>(&k, t, 0)) : (bwd_post<ElemBF16, 128>(&k, t, 0))); }, 3, 20);
    printf("%-4d %-6s %-6d | %-8.3f %-8.3f | %-8.3f %-8.3f %-8.3f %-8.3f | %-8.3f\n", r.d, r.causal ? "yes" : "no", r.T, full, b2b, set, pre, post,
           full - set - pre - post, fwd);
    fflush(stdout);
    free_dev(D);
  }
}
