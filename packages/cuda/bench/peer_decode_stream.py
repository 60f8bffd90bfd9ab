# Torch peer for bench/kv-stream-device.mjs (issue 24): a decode step as model code writes it in
# eager mode, one appended token (H 32 / Hkv 8, D 128, bf16, contiguous cache [B, Hkv, cap, D]):
# the new key and value copied into the cache at the step's position, then SDPA over the cache's
# first len + 1 rows (enable_gqa; torch picks its backend). Wall clock like ours: "awaited" syncs
# after each call (median of 30); "pipelined" issues 30 calls then syncs (mean); "32-layer step"
# issues one call a layer (four cache pairs cycled, as ours) and syncs once (median of 6).
import time, torch, torch.nn.functional as F
H, Hkv, D = 32, 8, 128
print('| decode, bf16, 1 token appended (torch eager) | awaited µs | pipelined µs/call | 32-layer step µs |')
print('|---|---|---|---|')
for B, Tk in ((1, 32768), (8, 32768), (64, 4096), (1, 131072)):
    cap, pos = Tk + 64, Tk - 40
    pairs = [(torch.randn(B, Hkv, cap, D, device='cuda', dtype=torch.bfloat16), torch.randn(B, Hkv, cap, D, device='cuda', dtype=torch.bfloat16)) for _ in range(4)]
    q = torch.randn(B, H, 1, D, device='cuda', dtype=torch.bfloat16)
    kn = torch.randn(B, Hkv, 1, D, device='cuda', dtype=torch.bfloat16); vn = torch.randn_like(kn)
    def call(kc, vc):
        kc[:, :, pos:pos + 1] = kn; vc[:, :, pos:pos + 1] = vn
        return F.scaled_dot_product_attention(q, kc[:, :, :pos + 1], vc[:, :, :pos + 1], enable_gqa=True)
    for _ in range(5): call(*pairs[0])
    torch.cuda.synchronize()
    aw = []
    for _ in range(30):
        t0 = time.perf_counter(); call(*pairs[0]); torch.cuda.synchronize(); aw.append(time.perf_counter() - t0)
    aw.sort()
    t0 = time.perf_counter()
    for _ in range(30): call(*pairs[0])
    torch.cuda.synchronize(); pipe = (time.perf_counter() - t0) / 30
    steps = []
    for i in range(8):
        t0 = time.perf_counter()
        for l in range(32): call(*pairs[l % 4])
        torch.cuda.synchronize()
        if i >= 2: steps.append(time.perf_counter() - t0)
    steps.sort()
    print(f'| B{B} Tk{Tk} | {aw[15] * 1e6:.0f} | {pipe * 1e6:.0f} | {steps[3] * 1e6:.0f} |', flush=True)
    del pairs, q, kn, vn; torch.cuda.empty_cache()
