# One cuDNN (or flash) SDPA forward, bf16, B·T = 16K tokens, H 16, D 128, for ncu: prof_fwd.py cudnn 4096 causal
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
be = {'cudnn': SDPBackend.CUDNN_ATTENTION, 'flash': SDPBackend.FLASH_ATTENTION}[sys.argv[1]]
T = int(sys.argv[2]); causal = len(sys.argv) > 3 and sys.argv[3] == 'causal'
q, k, v = (torch.randn(16384 // T, 16, T, 128, device='cuda', dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(be):
    for _ in range(3):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
torch.cuda.synchronize()
