# Merges our TFLOP/s (harness bench --json, or bench32 --json32) with torch SDPA peers measured in
# the same run (peer_sdpa.py --json: flash and cuDNN; peer_f32.py --json: efficient and math) into
# one markdown table of absolute numbers and ratios.
#   python3 ratio.py OURS.json PEERS.json [--f32]
import json, sys
ours = {(r['D'], r['causal'], r['T']): r for r in json.load(open(sys.argv[1]))}
peers = {(r['D'], r['causal'], r['T']): r for r in json.load(open(sys.argv[2]))}
if '--f32' in sys.argv[3:]:
    a, b = 'efficient', 'math'
    print('| D | causal | T | B×H | fwd ours | fwd efficient | fwd math | ours/efficient | ours/math | bwd ours | bwd efficient | bwd math | ours/efficient | ours/math |')
else:
    a, b = 'flash', 'cudnn'
    print('| D | causal | T | B×H | fwd ours | fwd flash | fwd cuDNN | fwd ours/flash | fwd ours/cuDNN | bwd ours | bwd flash | bwd cuDNN | bwd ours/flash | bwd ours/cuDNN |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
def ratio(x, y):
    return f'{x / y:.2f}×' if isinstance(y, (int, float)) and y else 'n/a'
for k in sorted(ours):
    o, p = ours[k], peers.get(k, {})
    fa, fb = p.get(f'{a}_fwd', 'n/a'), p.get(f'{b}_fwd', 'n/a')
    ba, bb = p.get(f'{a}_bwd', 'n/a'), p.get(f'{b}_bwd', 'n/a')
    print(f"| {k[0]} | {'yes' if k[1] else 'no'} | {k[2]} | {o['B']}×{o['H']} | {o['fwd']} | {fa} | {fb} | {ratio(o['fwd'], fa)} | {ratio(o['fwd'], fb)} | "
          f"{o['bwd']} | {ba} | {bb} | {ratio(o['bwd'], ba)} | {ratio(o['bwd'], bb)} |")
