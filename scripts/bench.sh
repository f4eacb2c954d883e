#!/usr/bin/env bash
# `make bench`: the standard benchmark set.  On a CUDA machine: the kernel
# bench (weights and attention against the card's own measured bandwidth),
# then prompt/decode rates of generated 8B-class dense and 30B-A3B-class MoE
# models (made here with mkmodel, not carried), then the demo model when it is
# present.  Without CUDA: the quantizer/CPU-matvec bench and the demo model on
# the CPU.  Output goes to stdout and, one file per run, to $OUT.
#
#   BUILD=build MODELS=/tmp/strata-models OUT=/tmp/strata-bench scripts/bench.sh
#   QUICK=1 ...   only the kernels and the demo model
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
CLI="$BUILD/strata-cli"
MODELS="${MODELS:-/tmp/strata-models}"
OUT="${OUT:-/tmp/strata-bench}"
mkdir -p "$MODELS" "$OUT"
demo="${STRATA_MODEL:-$HOME/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf}"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%F)"

run() { # name, then the command
    local name=$1; shift
    echo "== $name: $*"
    "$@" 2>&1 | tee "$OUT/$name.txt"
}

mk() { # file, then mkmodel arguments
    local f="$MODELS/$1"; shift
    [ -s "$f" ] || "$CLI" mkmodel "$@" --block-pool 16384 -o "$f" >"$OUT/mkmodel-$(basename "$f").log" 2>&1 \
        || { echo "mkmodel $f failed (see $OUT)"; return 1; }
}

if "$CLI" bench --help 2>/dev/null | grep -q -- --kernels && command -v nvidia-smi >/dev/null; then
    run kernels "$CLI" bench --kernels
    if [ -z "${QUICK:-}" ]; then
        dense="--arch llama --layers 32 --dim 4096 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256 --rope-base 500000 --ctx 8192"
        moe="--arch qwen3moe --layers 48 --dim 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --experts-used 8 --ff-exp 768 --ff 6144 --vocab 151936 --ctx 8192"
        for t in iq3_xxs q2_0; do
            mk "dense8b-$t.gguf" $dense --type $t && run "dense8b-$t" "$CLI" bench -m "$MODELS/dense8b-$t.gguf" -p 512 -n 128 --batch 1,2,4,8 --backend cuda
        done
        mk moe30b-iq3_xxs.gguf $moe --type iq3_xxs && run moe30b-iq3_xxs "$CLI" bench -m "$MODELS/moe30b-iq3_xxs.gguf" -p 512 -n 64 --batch 1,8 --backend cuda
        # decode at a long context (K/V read next to the weights)
        run dense8b-iq3_xxs-ctx "$CLI" bench -m "$MODELS/dense8b-iq3_xxs.gguf" -p 16 -n 32 --batch 1 --ctx 32768 --reps 2 --backend cuda
        # serving: slots vs one at a time; follow-ups restored vs re-read
        run clients "$CLI" bench -m "$MODELS/dense8b-iq3_xxs.gguf" --clients 8 --rounds 2 --prompt-tokens 256 --gen-tokens 64 --batch 8 --backend cuda
        run clients-cache "$CLI" bench -m "$MODELS/dense8b-iq3_xxs.gguf" --clients 4 --rounds 3 --prompt-tokens 2048 --gen-tokens 32 --batch 4 --conversation-cache-mib 4096 --backend cuda
        # parked conversations: capture / restore / shuttle against the D2H limit, two stages on one card
        small="--arch llama --layers 16 --dim 2048 --heads 16 --kv-heads 8 --ff 5632 --vocab 32000 --ctx 131072"
        mk conv1b-q8_0.gguf $small --type q8_0 && run conversations "$CLI" bench --conversations -m "$MODELS/conv1b-q8_0.gguf" --clients 4 --rounds 2 --tokens 100000 --followup 128 --batch 4 --layer-split 8 --backend cuda
    fi
    [ -f "$demo" ] && run demo-cuda "$CLI" bench -m "$demo" -p 512 -n 128 --batch 1,4 --backend cuda
else
    run quant "$CLI" bench --quant
    [ -f "$demo" ] && run demo-cpu "$CLI" bench -m "$demo" -p 64 -n 16 --batch 1 --backend cpu
fi
