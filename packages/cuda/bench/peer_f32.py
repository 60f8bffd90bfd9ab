"""Peer timings for f32 attention on the GPU machine: torch scaled_dot_product_attention's
efficient and math backends (flash and cuDNN take no f32), float32 inputs, the shapes of
`harness bench32`: B*T = 16K tokens, hidden 2048 (H = 2048 / D).

Usage: python3 peer_f32.py [--json FILE]
FLOPs: forward 4*B*H*T*T*D (half when causal), backward 2.5x forward. Median of triton's do_bench.
"""
import argparse, json
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import triton

ap = argparse.ArgumentParser()
ap.add_argument('--json')
a = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False  # the math backend's matmuls stay float32
torch.backends.cudnn.allow_tf32 = False
rows = []
print(torch.__version__, torch.cuda.get_device_name(), flush=True)
for d, causal, T in ((128, False, 4096), (128, False, 16384), (128, True, 4096), (128, True, 16384), (64, False, 16384)):
    B, H = 16384 // T, 2048 // d
    q, k, v = (torch.randn(B, H, T, d, device='cuda', dtype=torch.float32, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)
    fl = 4 * B * H * T * T * d / (2 if causal else 1)
    row = dict(D=d, causal=causal, T=T, B=B, H=H)
    for name, be in (('efficient', SDPBackend.EFFICIENT_ATTENTION), ('math', SDPBackend.MATH)):
        try:
            with sdpa_kernel(be):
                f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                ms = triton.testing.do_bench(f, warmup=25, rep=100, return_mode='median')
                o = f()
                msb = triton.testing.do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), warmup=25, rep=100, return_mode='median')
                del o
            row[name + '_fwd'] = round(fl / ms / 1e9, 1)
            row[name + '_bwd'] = round(2.5 * fl / msb / 1e9, 1)
        except Exception as e:  # a backend that cannot take this shape says why
            row[name] = 'unavailable: ' + str(e).splitlines()[0][:80]
        torch.cuda.empty_cache()
    rows.append(row)
    print(json.dumps(row), flush=True)
    del q, k, v, do
    torch.cuda.empty_cache()
if a.json:
    json.dump(rows, open(a.json, 'w'), indent=1)
