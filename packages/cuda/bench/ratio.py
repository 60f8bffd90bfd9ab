# Merges our TFLOP/s (harness bench --json) with torch SDPA peers (peer_sdpa.py --json) measured
# in the same run into one markdown table of absolute numbers and ratios.
import json, sys
ours = {(r['D'], r['causal'], r['T']): r for r in json.load(open(sys.argv[1]))}
peers = {(r['D'], r['causal'], r['T']): r for r in json.load(open(sys.argv[2]))}
print('| D | causal | T | B×H | fwd ours | fwd flash | fwd cuDNN | fwd ours/flash | fwd ours/cuDNN | bwd ours | bwd flash | bwd cuDNN | bwd ours/flash | bwd ours/cuDNN |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
def ratio(a, b):
    return f'{a / b:.2f}×' if isinstance(b, (int, float)) and b else 'n/a'
for k in sorted(ours):
    o, p = ours[k], peers.get(k, {})
    ff, fc = p.get('flash_fwd', 'n/a'), p.get('cudnn_fwd', 'n/a')
    bf, bc = p.get('flash_bwd', 'n/a'), p.get('cudnn_bwd', 'n/a')
    print(f"| {k[0]} | {'yes' if k[1] else 'no'} | {k[2]} | {o['B']}×{o['H']} | {o['fwd']} | {ff} | {fc} | {ratio(o['fwd'], ff)} | {ratio(o['fwd'], fc)} | "
          f"{o['bwd']} | {bf} | {bc} | {ratio(o['bwd'], bf)} | {ratio(o['bwd'], bc)} |")
