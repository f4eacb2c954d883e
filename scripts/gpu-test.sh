#!/usr/bin/env bash
# The whole GPU test on a CUDA machine, from a fresh copy of the tree:
# take libcheck along when the box lacks it (.deps/*.deb, fetched here with
# `scripts/fetch-deps.sh`), build with CUDA, run every suite (the GPU ones run
# instead of skipping), then compute-sanitizer over the GPU suites.
#
#   scripts/gpu-test.sh            # logs under $OUT (or /tmp/strata-gpu)
#   SANITIZE=0 scripts/gpu-test.sh # skip the compute-sanitizer pass
#   SAN_TOOLS=racecheck SAN_LIMIT=500 ...  one tool, a longer limit per run
#   TESTS=0 GPU_SUITES="cuda_engine" SAN_TOOLS=memcheck ...  sanitizer only
#   CARD_ONLY=1 SANITIZE=0 scripts/gpu-test.sh  only the suites with card
#   cases (CARD_SUITES), the CPU ones being CI's
#   (a device call lasts at most 10 minutes: the whole test and both tools
#   in one call leave the slowest sanitizer runs unfinished)
#
# The tests run with STRATA_REQUIRE=model,gpu (override it to relax or to
# add python where the box has the oracles' packages): a GPU suite that skips
# here, or a test missing the demo model, fails instead of passing silently.
# The card machines this was written for have no pip, so the Python oracle
# tests (which CI runs strictly) are allowed to skip here.  The exit status is nonzero if
# the tests failed or any sanitizer run found an error, failed a test or ran
# past its limit.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/strata-gpu}"
BUILD="${BUILD:-/tmp/strata-build}"   # outside the tree: survives re-copies
mkdir -p "$OUT"
args=(BUILD="$BUILD" CUDA=1 CUDA_ARCH="${CUDA_ARCH:-sm_90}")
if ! pkg-config --exists check 2>/dev/null; then
    prefix=/tmp/strata-check
    for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
    args+=(CHECK_PREFIX="$prefix")
fi
export STRATA_REQUIRE="${STRATA_REQUIRE-model,gpu}"
echo "STRATA_REQUIRE=$STRATA_REQUIRE"
model=$(scripts/gpu-model.sh || true)
if [ -n "$model" ]; then export STRATA_MODEL="$model"; echo "demo model: $model"; else echo "demo model: absent (its tests skip)"; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== build"
if ! make -j"$(nproc)" "${args[@]}" all "$BUILD/strata-tests" >"$OUT/build.log" 2>&1; then
    tail -n 40 "$OUT/build.log"; exit 1
fi
rc=0
CARD_SUITES=${CARD_SUITES:-cuda_matvec cuda_matmul cuda_types cuda_ops cuda_fuse cuda_attention cuda_rotate cuda_gemma3 cuda_engine batch_groups park_cuda scheduler scheduler_kv cli chat_cli hardening_cli}
# the card's block-type decoders on the host against the CPU's (seconds)
echo "== blocks-check"
make "${args[@]}" blocks-check >"$OUT/blocks-check.log" 2>&1 || rc=1
tail -n 1 "$OUT/blocks-check.log"
if [ "${TESTS:-1}" = 1 ] && [ -n "${CARD_ONLY:-}" ]; then
    # only the suites that run on the card (CI runs the others): about a
    # third of the whole test's device time; one log, since a device call
    # brings back only a few files
    echo "== card suites"
    : > "$OUT/test.log"
    for suite in $CARD_SUITES; do
        CK_RUN_SUITE=$suite make "${args[@]}" test >> "$OUT/test.log" 2>&1 || rc=1
        echo "$suite: $(grep -E '^[0-9]+%: Checks' "$OUT/test.log" | tail -n 1)"
    done
    grep -E ':[EF]:|^SKIP' "$OUT/test.log"
elif [ "${TESTS:-1}" = 1 ]; then
    echo "== test"
    make "${args[@]}" test 2>&1 | tee "$OUT/test.log" | tail -n 60
    rc=${PIPESTATUS[0]}
    # every skip, even if more than the tail shows
    grep '^SKIP' "$OUT/test.log"
fi
# compute-sanitizer: every (tool, suite) pair at the same time (they share
# the card; each is CPU-heavy), each with its own time limit and log; the
# demo model's tests (run above) are left out here: generated models only.
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer (limit ${SAN_LIMIT:-420} s each)"
    pairs=()
    pids=()
    # racecheck follows every shared-memory access: the engine suites (whole
    # models) would take far longer than the kernel suites, whose kernels
    # they only string together.  Every sanitizer run takes the suites'
    # small sets (STRATA_TEST_SMALL: every code path, fewer kernel shapes,
    # 32 greedy steps instead of 256): the tools slow each launch a
    # hundredfold, and a device call lasts at most 10 minutes
    mem_suites=${GPU_SUITES:-cuda_matvec cuda_matmul cuda_types cuda_ops cuda_fuse cuda_attention cuda_gemma3 cuda_engine batch_groups park_cuda}
    race_suites=${RACE_SUITES:-cuda_matvec cuda_matmul cuda_types cuda_ops cuda_fuse cuda_attention cuda_gemma3}
    for tool in ${SAN_TOOLS:-memcheck racecheck}; do
        suites=$mem_suites
        [ "$tool" = racecheck ] && suites=$race_suites
        for suite in $suites; do
            pairs+=("$tool:$suite")
            # the demo model is left out (env -u), so "model" is not required
            env -u STRATA_MODEL STRATA_REQUIRE=gpu STRATA_TEST_SMALL=1 CK_FORK=no CK_RUN_SUITE="$suite" \
                STRATA_CLI="$BUILD/strata-cli" STRATA_ROOT="$PWD" \
                timeout "${SAN_LIMIT:-420}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
                "$BUILD/strata-tests" >"$OUT/sanitizer-$tool-$suite.log" 2>&1 &
            pids+=($!)
        done
    done
    for i in "${!pairs[@]}"; do
        p=${pairs[$i]}
        wait "${pids[$i]}"
        st=$?
        log="$OUT/sanitizer-${p%%:*}-${p#*:}.log"
        case $st in
            0) verdict=ok ;;
            9) verdict="FAILED: sanitizer errors" ;;
            124|137) verdict="FAILED: past the ${SAN_LIMIT:-420} s limit" ;;
            *) verdict="FAILED: exit $st (a test failed)" ;;
        esac
        [ "$st" = 0 ] || rc=1
        echo "compute-sanitizer ${p%%:*} ${p#*:}: $verdict; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1) $(grep -E '^[0-9]+%: Checks' "$log" | tail -n 1)"
    done
fi
exit "$rc"
