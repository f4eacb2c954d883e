#!/usr/bin/env python3
"""Compare two STRATA_TRACE_DIR dumps (e.g. CPU vs CUDA): relative error per step."""
import sys, os, glob, re
import numpy as np
a, b = sys.argv[1], sys.argv[2]
def key(p):
    n = os.path.basename(p)
    layer, what = re.match(r'L(-?\d+)-(.*)\.f32$', n).groups()
    layer = int(layer)
    order = ['embed','attn_norm','q','k','v','q_rope','att','h','out','logits']
    return (layer if what != 'logits' else 10**6, order.index(what) if what in order else 99)
for p in sorted(glob.glob(os.path.join(a, '*.f32')), key=key):
    q = os.path.join(b, os.path.basename(p))
    if not os.path.exists(q):
        continue
    x, y = np.fromfile(p, np.float32).astype(np.float64), np.fromfile(q, np.float32).astype(np.float64)
    rel = np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30)
    print(f"{os.path.basename(p):24s} rel {rel:.3e}")
