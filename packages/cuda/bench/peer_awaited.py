"""torch SDPA timed as bench/node-rows.mjs times ours: wall clock, each call awaited
(torch.cuda.synchronize) before the next, median of 30 after a warm-up; and 30 calls issued back
to back, then one synchronize (mean). bf16, the bench shapes (batch = tokens // T, heads =
hidden // D). Writes two JSON files in peer_sdpa.py's format, so ratio.py sets ours-awaited
against torch-awaited:  python3 peer_awaited.py --dims 128 --seqlens 1024,4096 AWAITED.json PIPELINED.json
"""
import argparse, json, statistics, time
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

ap = argparse.ArgumentParser()
ap.add_argument('--dims', default='128')
ap.add_argument('--seqlens', default='1024,4096,8192,16384')
ap.add_argument('--tokens', type=int, default=16384)
ap.add_argument('--hidden', type=int, default=2048)
ap.add_argument('out', nargs=2)
a = ap.parse_args()
backends = {'flash': SDPBackend.FLASH_ATTENTION, 'cudnn': SDPBackend.CUDNN_ATTENTION}
N = 30


def awaited(f):
    ts = []
    for i in range(N + 5):
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        if i >= 5:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def back_to_back(f):
    f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(N):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / N * 1e3


rows_a, rows_p = [], []
print(torch.__version__, torch.cuda.get_device_name())
for d in map(int, a.dims.split(',')):
    for causal in (False, True):
        for T in map(int, a.seqlens.split(',')):
            B, H = max(1, a.tokens // T), a.hidden // d
            q, k, v = (torch.randn(B, H, T, d, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
            do = torch.randn_like(q)
            fl = 4 * B * H * T * T * d / (2 if causal else 1)
            ra, rp = dict(D=d, causal=causal, T=T, B=B, H=H), dict(D=d, causal=causal, T=T, B=B, H=H)
            for name, be in backends.items():
                with sdpa_kernel(be):
                    f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    o = f()
                    g = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                    for r, timer in ((ra, awaited), (rp, back_to_back)):
                        r[name + '_fwd'] = round(fl / timer(f) / 1e9, 1)
                        r[name + '_bwd'] = round(2.5 * fl / timer(g) / 1e9, 1)
            rows_a.append(ra)
            rows_p.append(rp)
            print(json.dumps(ra), json.dumps(rp), flush=True)
json.dump(rows_a, open(a.out[0], 'w'))
json.dump(rows_p, open(a.out[1], 'w'))
