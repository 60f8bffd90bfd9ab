# One cuDNN (or flash) SDPA forward+backward, bf16, B·T = 16K tokens, D 128 (H 16) or 64 (H 32), for ncu: prof_bwd.py cudnn 4096 [causal] [64]
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
be = {'cudnn': SDPBackend.CUDNN_ATTENTION, 'flash': SDPBackend.FLASH_ATTENTION}[sys.argv[1]]
T = int(sys.argv[2]); causal = 'causal' in sys.argv[3:]; D = 64 if '64' in sys.argv[3:] else 128
q, k, v = (torch.randn(16384 // T, 2048 // D, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(be):
    for _ in range(3):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        o.backward(torch.ones_like(o))
torch.cuda.synchronize()
