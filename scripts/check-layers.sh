#!/usr/bin/env bash
# check-layers.sh: every #include between the project's folders points down.
#
# The floors, lowest first.  A file may include headers of its own folder and
# of any folder on a lower floor; anything else is an arrow pointing up and
# fails the check.  serve/ sits under cli/, whose `serve` command starts it.
# cli/bench sits beside cli: white-box benchmarks, the one
# place outside a folder allowed to read that folder's private header.
set -euo pipefail
cd "$(dirname "$0")/.."
FLOORS=(
    base            # the error record every part fills
    model           # GGUF reader/writer, quant formats, model description
    model/make      # mkmodel, quantize: files made from a description
    text            # tokenizer, pre-tokenizers, Unicode tables, chat templates
    kernels         # ops.h, kernels/cpu, kernels/cuda
    cache           # KV cache, conversation cache, pinned arena
    stagepool       # one worker thread per stage
    engine          # public API, CPU forward pass, sequences, sampling
    engine/cuda     # the CUDA host backend
    park            # capture / restore / shuttle of conversations
    sched           # batch slots and the scheduler
    serve           # the HTTP server: JSON, HTTP/1.1, the OpenAI endpoints
    cli             # strata-cli and its benchmarks
)
floor_of() {            # floor index of a path's folder (longest match wins)
    local p=$1 best=-1 i
    for i in "${!FLOORS[@]}"; do
        case "$p" in "${FLOORS[$i]}"/*) best=$i ;; esac
    done
    echo "$best"
}
bad=0
while IFS= read -r f; do
    from=$(floor_of "$f")
    [ "$from" -ge 0 ] || continue
    while IFS= read -r inc; do
        to=$(floor_of "$inc")
        [ "$to" -ge 0 ] || continue
        if [ "$to" -gt "$from" ]; then
            echo "check-layers: $f includes $inc (${FLOORS[$to]} is above ${FLOORS[$from]})"
            bad=1
        fi
        case "$inc" in *_internal.h)
            own=$(dirname "$inc"); mine=$(dirname "$f")
            if [ "${mine#cli}" != "$mine" ] && [ "${mine#cli/bench}" = "$mine" ]; then
                echo "check-layers: $f includes $own's private header $inc"
                bad=1
            fi ;;
        esac
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^test/')
if [ $bad -eq 0 ]; then echo "check-layers: every include points down (${#FLOORS[@]} floors)"; fi
exit $bad
