#!/usr/bin/env bash
# multigpu.sh: the layer split on several cards, in one command — build,
# make the models on the machine, check that N cards answer exactly as one
# card, measure the seed's workload and the split's overhead, logs under $OUT.
#
#   scripts/multigpu.sh                 # N = every card nvidia-smi lists
#   NGPU=4 SHARE=1 scripts/multigpu.sh  # rehearsal: 4 stages sharing card 0
#   QUICK=1 ...                         # smaller models and fewer tokens
#
# What it runs (each step's output in $OUT/<step>.txt, a summary at the end):
#  1. correctness: greedy answers of 8 clients x 2 rounds (bench --clients
#     --answers) on one card, then split over the N cards with --batch 8
#     --batch-groups N, with STRATA_STAGE_COPY_PARALLEL=0 and 1, and with
#     the conversation cache parking every follow-up; every sha256 must
#     equal the one card's;
#  2. the seed's workload (bench --conversations): capture fresh / reused,
#     slot shuttle, restore per 100K tokens, serial vs parallel copies in one
#     run, on the 48-layer 30B-A3B shape split 13,26,38 (4 cards) or 24
#     (2 cards);
#  3. decode and prefill of a model that fits on one card, on one card and
#     split over N (the split's overhead), and --batch 8 --batch-groups N vs
#     --batch-groups 1;
#  4. the cards' topology (nvidia-smi topo -m): whether the hidden state's
#     hand-off can use peer copies (the engine takes them when
#     cudaDeviceCanAccessPeer allows, and says so at load).
# NVLink multicast stays off: the engine does not use it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/strata-multigpu}"
BUILD="${BUILD:-/tmp/strata-build}"
MODELS="${MODELS:-/tmp/strata-models}"
mkdir -p "$OUT/answers" "$MODELS"
export NCCL_NVLS_ENABLE=0
CARDS=$(nvidia-smi -L 2>/dev/null | wc -l)
NGPU="${NGPU:-$CARDS}"
[ "$NGPU" -ge 1 ] || { echo "multigpu.sh: no card found"; exit 1; }
if [ "${SHARE:-0}" = 1 ] || [ "$CARDS" -lt "$NGPU" ]; then
    devs=$(printf '0,%.0s' $(seq "$NGPU")); devs=${devs%,}
    echo "rehearsal: $NGPU stages share card 0 ($CARDS card(s) present)"
else
    devs=$(seq -s, 0 $((NGPU - 1)))
fi
echo "cards: $CARDS, stages: $NGPU on devices $devs" | tee "$OUT/summary.txt"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1

args=(BUILD="$BUILD" CUDA=1 CUDA_ARCH="${CUDA_ARCH:-sm_90}")
if ! pkg-config --exists check 2>/dev/null && ls .deps/*.deb >/dev/null 2>&1; then
    for f in .deps/*.deb; do dpkg -x "$f" /tmp/strata-check; done
    args+=(CHECK_PREFIX=/tmp/strata-check)
fi
make -j"$(nproc)" "${args[@]}" all >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; exit 1; }
CLI="$BUILD/strata-cli"
echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)} (set COMMIT= when the copy's .git is not the tree's)" | tee -a "$OUT/summary.txt"

# Layer splits: N equal parts of L layers ("13,26,38" for 48 over 4 is the seed's).
split_of() { # layers, parts
    local L=$1 n=$2 s="" i
    [ "$L" = 48 ] && [ "$n" = 4 ] && { echo "13,26,38"; return; }
    for ((i = 1; i < n; i++)); do s="$s$((L * i / n)),"; done
    echo "${s%,}"
}
mk() { # file, mkmodel arguments
    [ -s "$MODELS/$1" ] && return 0
    local f=$1; shift
    "$CLI" mkmodel "$@" --block-pool 16384 -o "$MODELS/$f" >"$OUT/mkmodel-$f.log" 2>&1
}
step() { # name, command...
    local name=$1; shift
    echo "== $name: $*" | tee -a "$OUT/summary.txt"
    "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    tail -n 12 "$OUT/$name.txt"
    [ $rc = 0 ] || echo "   FAILED (exit $rc)" | tee -a "$OUT/summary.txt"
    return $rc
}

if [ -n "${QUICK:-}" ]; then
    dense="--arch llama --layers 16 --dim 2048 --heads 16 --kv-heads 8 --ff 5632 --vocab 32000 --ctx 131072"
    moe="--arch qwen3moe --layers 48 --dim 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 16 --experts-used 8 --ff-exp 768 --ff 6144 --vocab 151936 --ctx 131072"
    conv_tokens=20000; dense_layers=16
else
    dense="--arch llama --layers 32 --dim 4096 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256 --rope-base 500000 --ctx 131072"
    moe="--arch qwen3moe --layers 48 --dim 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --experts-used 8 --ff-exp 768 --ff 6144 --vocab 151936 --ctx 131072"
    conv_tokens=110000; dense_layers=32
fi
mk dense.gguf $dense --type iq3_xxs || { echo "mkmodel dense failed"; exit 1; }
mk moe48.gguf $moe --type iq3_xxs || { echo "mkmodel moe failed"; exit 1; }
dsplit=$(split_of $dense_layers "$NGPU")
msplit=$(split_of 48 "$NGPU")
fail=0

# 1. correctness
clients="--clients 8 --rounds 2 --prompt-tokens 200 --gen-tokens 48 -m $MODELS/dense.gguf --backend cuda"
step answers-1card "$CLI" bench $clients --batch 8 --answers "$OUT/answers/1card.ids" || fail=1
want=$(sha256sum < "$OUT/answers/1card.ids" | cut -d' ' -f1)
for par in 0 1; do
    if [ "$NGPU" -gt 1 ]; then
        STRATA_STAGE_COPY_PARALLEL=$par step "answers-split-par$par" "$CLI" bench $clients --batch 8 \
            --batch-groups "$NGPU" --layer-split "$dsplit" --devices "$devs" \
            --answers "$OUT/answers/split-par$par.ids" || fail=1
        STRATA_STAGE_COPY_PARALLEL=$par step "answers-parked-par$par" "$CLI" bench $clients --batch 8 \
            --layer-split "$dsplit" --devices "$devs" --conversation-cache-mib 8192 \
            --answers "$OUT/answers/parked-par$par.ids" || fail=1
    fi
done
step answers-parked-1card "$CLI" bench $clients --batch 8 --conversation-cache-mib 8192 \
    --answers "$OUT/answers/parked-1card.ids" || fail=1
parked=$(sha256sum < "$OUT/answers/parked-1card.ids" | cut -d' ' -f1)
for f in "$OUT"/answers/*.ids; do
    got=$(sha256sum < "$f" | cut -d' ' -f1)
    ref=$want; case "$f" in *parked*) ref=$parked ;; esac
    if [ "$got" = "$ref" ]; then r=same; else r=DIFFERENT; fail=1; fi
    echo "sha256 $(basename "$f"): $got ($r as on one card)" | tee -a "$OUT/summary.txt"
done

# 2. the seed's workload
if [ "$NGPU" -gt 1 ]; then
    step workload "$CLI" bench --conversations -m "$MODELS/moe48.gguf" --clients 9 --rounds 3 \
        --tokens "$conv_tokens" --followup 128 --batch 4 --kv k8v4 --layer-split "$msplit" \
        --devices "$devs" --backend cuda || fail=1
fi

# 3. the split's overhead, and batch groups
step dense-1card "$CLI" bench -m "$MODELS/dense.gguf" -p 512 -n 64 --batch 1,8 --backend cuda || fail=1
if [ "$NGPU" -gt 1 ]; then
    step dense-split "$CLI" bench -m "$MODELS/dense.gguf" -p 512 -n 64 --batch 1,8 \
        --layer-split "$dsplit" --devices "$devs" --backend cuda || fail=1
    step dense-split-groups "$CLI" bench -m "$MODELS/dense.gguf" -p 512 -n 64 --batch 8 \
        --batch-groups "$NGPU" --layer-split "$dsplit" --devices "$devs" --backend cuda || fail=1
fi

echo "== done: $( [ $fail = 0 ] && echo all steps passed || echo SOME STEPS FAILED )" | tee -a "$OUT/summary.txt"
exit $fail
