# Decode peers for the KV-cache benchmark (issue 12): Tq = 1 over a contiguous cache, GQA H 32 / Hkv
# 8, D 128, torch SDPA, CUDA events, median of 20 after 2 warm-up calls. bf16: flash, cuDNN,
# efficient with enable_gqa. f32 (no flash/cuDNN kernel for f32): efficient on K/V expanded to the
# 32 query heads beforehand (repeat_interleave, not timed; the kernel then reads 4x the cache bytes)
# and math with enable_gqa. GB/s counts the GQA cache's bytes (what our kernel reads). Prints one
# JSON line per (backend, dtype, shape); --json FILE also writes them as a list.
import json, sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
def timeit(fn, reps=20):
    for _ in range(2): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]
rows = []
def run(name, dtype, B, Tk, byts, fn, reps=20):
    try:
        f = timeit(fn, reps)
        row = {'decode': name, 'dtype': dtype, 'B': B, 'Tk': Tk, 'us': round(f * 1000, 1), 'GBps': round(byts / f / 1e6, 0)}
    except Exception as e:
        row = {'decode': name, 'dtype': dtype, 'B': B, 'Tk': Tk, 'error': str(e)[:120]}
    rows.append(row); print(json.dumps(row), flush=True)
H, Hkv, D = 32, 8, 128
for B, Tk in ((1, 32768), (8, 32768), (64, 4096), (1, 131072)):
    q = torch.randn(B, H, 1, D, device='cuda', dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, Tk, D, device='cuda', dtype=torch.bfloat16); v = torch.randn_like(k)
    byts = 2 * B * Hkv * Tk * D * 2
    for name, be in (('flash', SDPBackend.FLASH_ATTENTION), ('cudnn', SDPBackend.CUDNN_ATTENTION), ('efficient', SDPBackend.EFFICIENT_ATTENTION)):
        with sdpa_kernel(be):
            run(name, 'bf16', B, Tk, byts, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    del q, k, v; torch.cuda.empty_cache()
for B, Tk in ((1, 32768), (8, 32768), (64, 4096), (1, 131072)):
    q = torch.randn(B, H, 1, D, device='cuda', dtype=torch.float32)
    k = torch.randn(B, Hkv, Tk, D, device='cuda', dtype=torch.float32); v = torch.randn_like(k)
    byts = 2 * B * Hkv * Tk * D * 4
    ke, ve = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        run('efficient-expanded', 'f32', B, Tk, byts, lambda: F.scaled_dot_product_attention(q, ke, ve))
    del ke, ve; torch.cuda.empty_cache()
    with sdpa_kernel(SDPBackend.MATH):
        run('math', 'f32', B, Tk, byts, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 10)
    del q, k, v; torch.cuda.empty_cache()
if '--json' in sys.argv:
    with open(sys.argv[sys.argv.index('--json') + 1], 'w') as f: json.dump(rows, f)
