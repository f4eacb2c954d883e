#!/usr/bin/env bash
# The GPU box has no network and a call carries at most 64 MiB, so the demo
# model (94 MB) travels in two parts over two back-to-back calls:
#   split -b 50000000 -d MODEL .carry/a/demo.part   (part00 -> .carry/a, part01 -> .carry/b)
# Each call runs this script; parts collect in /tmp/strata-model (kept while
# the machine stays warm) and are joined and checked against demo.sha256.
# Prints the model path when it is complete.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=/tmp/strata-model
mkdir -p "$dir"
for f in .carry/a/* .carry/b/*; do
    [ -f "$f" ] && cp "$f" "$dir/"
done
model="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$model" ] && [ -f "$dir/demo.part00" ] && [ -f "$dir/demo.part01" ]; then
    cat "$dir"/demo.part0* > "$model.tmp"
    if [ "$(sha256sum "$model.tmp" | cut -d' ' -f1)" = "$(cat "$dir/demo.sha256")" ]; then
        mv "$model.tmp" "$model"
    else
        echo "demo model parts do not match demo.sha256" >&2
        rm -f "$model.tmp"
    fi
fi
if [ -f "$model" ]; then echo "$model"; fi
