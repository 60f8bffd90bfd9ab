"""Per-row medians of several bench JSON files in ratio.py's format (ours or peers), for tables
timed as several rounds alternating with the peers in one device call (METHOD: repeat, take the
median). Usage: python3 median.py A1.json A2.json ... > A.json"""
import json
import statistics
import sys

KEYS = ('D', 'causal', 'T', 'B', 'H')
rows = {}
for f in sys.argv[1:]:
    for r in json.load(open(f)):
        rows.setdefault(tuple(r[k] for k in KEYS), []).append(r)
out = []
for key, rs in rows.items():
    m = dict(zip(KEYS, key))
    for field in rs[0]:
        if field in KEYS:
            continue
        xs = [r[field] for r in rs if isinstance(r.get(field), (int, float))]
        if xs:
            m[field] = round(statistics.median(xs), 1)
    m['rounds'] = len(rs)
    out.append(m)
json.dump(out, sys.stdout)
