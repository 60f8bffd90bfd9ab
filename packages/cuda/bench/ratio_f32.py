# Merges our f32 TFLOP/s (harness bench32 --json32) with torch SDPA's f32 peers (peer_f32.py
# --json) measured in the same run into one markdown table of absolute numbers and ratios.
import json, sys
ours = {(r['D'], r['causal'], r['T']): r for r in json.load(open(sys.argv[1]))}
peers = {(r['D'], r['causal'], r['T']): r for r in json.load(open(sys.argv[2]))}
print('| D | causal | T | B×H | fwd ours | fwd efficient | fwd math | ours/efficient | ours/math | bwd ours | bwd efficient | bwd math | ours/efficient | ours/math |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
def ratio(a, b):
    return f'{a / b:.2f}×' if isinstance(b, (int, float)) and b else 'n/a'
for k in sorted(ours):
    o, p = ours[k], peers.get(k, {})
    fe, fm = p.get('efficient_fwd', 'n/a'), p.get('math_fwd', 'n/a')
    be, bm = p.get('efficient_bwd', 'n/a'), p.get('math_bwd', 'n/a')
    print(f"| {k[0]} | {'yes' if k[1] else 'no'} | {k[2]} | {o['B']}×{o['H']} | {o['fwd']} | {fe} | {fm} | {ratio(o['fwd'], fe)} | {ratio(o['fwd'], fm)} | "
          f"{o['bwd']} | {be} | {bm} | {ratio(o['bwd'], be)} | {ratio(o['bwd'], bm)} |")
