#!/usr/bin/env bash
# wblocks-sass.sh: SASS instructions per block tile of each block-tile type's
# decoder (kernels/cuda/wblocks.cuh), as doc/cuda-kernels.md quotes them.
# Compiles test/host/wblocks_sass.cu for sm_90 with a real nvcc, disassembles
# it (nvdisasm, or cuobjdump --dump-sass; the pip package nvidia-cuda-nvdisasm
# ships nvdisasm), and prints per type what one lane issues in the tile loop:
# one tile = two rows x 128 values, 16 HMMA included.  No card needed.
#   scripts/wblocks-sass.sh [NVCC]     (default: nvcc on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${1:-nvcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$NVCC" -std=c++17 -O2 -arch=sm_90 -I. -cubin -o "$tmp/p.cubin" test/host/wblocks_sass.cu
if command -v nvdisasm >/dev/null; then
    nvdisasm -c "$tmp/p.cubin" >"$tmp/p.sass"
elif command -v cuobjdump >/dev/null; then
    cuobjdump --dump-sass "$tmp/p.cubin" >"$tmp/p.sass"
else
    echo "wblocks-sass.sh: neither nvdisasm nor cuobjdump on PATH" >&2
    exit 1
fi
python3 - "$tmp/p.sass" <<'PY'
import re, sys
from collections import Counter
# GGML type ids -> names (model/quant.h)
names = {3: 'Q4_1', 6: 'Q5_0', 7: 'Q5_1', 20: 'IQ4_NL', 10: 'Q2_K', 11: 'Q3_K', 12: 'Q4_K', 13: 'Q5_K',
         14: 'Q6_K', 16: 'IQ2_XXS', 17: 'IQ2_XS', 22: 'IQ2_S', 21: 'IQ3_S', 23: 'IQ4_XS'}
txt = open(sys.argv[1]).read()
op = lambda s: re.sub(r'^@!?U?P\w+\s+', '', s).split()[0]
rows = {}
for fn in re.split(r'\n\s*(?://-+ \.text\.|Function : )', txt)[1:]:
    m = re.search(r'probeILi(\d+)E', fn.split('\n', 1)[0])
    if not m:
        continue
    ins, labels = [], {}
    for line in fn.split('\n'):
        lm = re.match(r'^\s*(\.L_x_\d+):', line)
        if lm:
            labels[lm.group(1)] = len(ins)
            continue
        im = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', line)
        if im:
            ins.append((int(im.group(1), 16), im.group(2)))
    addr = {a: i for i, (a, _) in enumerate(ins)}
    loops = []  # backward branches whose body holds HMMA: (first, last, size, hmma)
    for i, (a, s) in enumerate(ins):
        if 'BRA' not in s:
            continue
        lm = re.search(r'`\((\.L_x_\d+)\)', s)
        tm = re.search(r'BRA\s+(?:`\()?0x([0-9a-f]+)', s)
        lo = labels.get(lm.group(1)) if lm else (addr.get(int(tm.group(1), 16)) if tm else None)
        if lo is not None and lo <= i:
            nh = sum(op(x).startswith('HMMA') for _, x in ins[lo:i + 1])
            if nh:
                loops.append((lo, i, i + 1 - lo, nh))
    loops.sort(key=lambda l: l[1] - l[0])
    inner = loops[0]
    if inner[3] == 16:
        total = inner[2]
    else:  # a chunk loop inside the tile loop: its body times its trip count
        outer = next(l for l in loops[1:] if l[0] <= inner[0] and l[1] >= inner[1])
        total = (16 // inner[3]) * inner[2] + outer[2] - inner[2]
    rows[names.get(int(m.group(1)), m.group(1))] = total
for t in names.values():
    if t in rows:
        print(f"{t:8s} {rows[t]:4d} instructions per tile and lane ({(rows[t] - 16) / 128:.2f} a value besides the HMMA)")
PY
