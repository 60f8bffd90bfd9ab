# Device script: torch 2.11's CPU scaled_dot_product_attention (its flash-attention CPU kernel),
# f32, B 1, H 8, D 64, the shapes of cpu-native.mjs, at 16 and 2 threads: GFLOP/s forward and backward.
import os, time, torch
import torch.nn.functional as F
H, D = 8, 64
for threads in [int(x) for x in os.environ.get("THREADS", "16,2").split(",")]:
    torch.set_num_threads(threads)
    for T in (2048, 4096, 8192):
        for causal in (False, True):
            q, k, v = (torch.randn(1, H, T, D, dtype=torch.float32, requires_grad=True) for _ in range(3))
            do = torch.randn(1, H, T, D)
            fl = 4 * H * T * T * D / (2 if causal else 1)
            fw, bw = [], []
            for i in range(6):
                t0 = time.perf_counter(); o = F.scaled_dot_product_attention(q, k, v, is_causal=causal); t1 = time.perf_counter()
                o.backward(do); t2 = time.perf_counter()
                q.grad = k.grad = v.grad = None
                if i: fw.append(t1 - t0); bw.append(t2 - t1)
            fw.sort(); bw.sort()
            print(f"torch {torch.__version__} cpu x{threads} T={T} {'causal' if causal else 'full'}: forward {fl / fw[len(fw)//2] / 1e9:.1f} GFLOP/s, backward {2.5 * fl / bw[len(bw)//2] / 1e9:.1f} GFLOP/s", flush=True)
