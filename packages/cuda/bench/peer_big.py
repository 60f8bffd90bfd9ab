# torch SDPA at one head, T = 100 000, D = 128, bf16: forward (and backward) times and memory.
import torch, triton
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
T, D = 100000, 128
q, k, v = (torch.randn(1, 1, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
do = torch.randn_like(q)
for name, be in [('flash', SDPBackend.FLASH_ATTENTION), ('cudnn', SDPBackend.CUDNN_ATTENTION)]:
    try:
        with sdpa_kernel(be):
            f = lambda: F.scaled_dot_product_attention(q, k, v)
            f(); torch.cuda.synchronize()
            base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
            ms = triton.testing.do_bench(f, warmup=5, rep=50, return_mode='median')
            peak = torch.cuda.max_memory_allocated() - base
            o = f()
            msb = triton.testing.do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), warmup=3, rep=30, return_mode='median')
        print(f'peer big {name}: fwd {ms:.2f} ms, bwd {msb:.2f} ms, fwd extra peak {peak/1e6:.1f} MB', flush=True)
    except Exception as e:
        print(f'peer big {name}: unavailable: {str(e).splitlines()[0][:100]}')
