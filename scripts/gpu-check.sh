#!/usr/bin/env bash
# The GPU checks in one command, on a machine with a CUDA GPU:
#
#   scripts/gpu-check.sh OUT_DIR [STEP...]      STEP: build test sanitize bench (default: all four)
#
# build:    configures the `cuda` preset with the device programs built for
#           this GPU (KVPOLICY_CUDA_TEST_ARCHITECTURES=native) and builds the
#           CUDA tests, the GPU benchmarks and the cuda_offload example;
# test:     runs the CUDA tests through CTest (the nvcc must-not-compile
#           tests included) and the example;
# sanitize: runs every CUDA test program under compute-sanitizer memcheck
#           (with leak check), racecheck and synccheck;
# bench:    runs the benchmarks (tables and JSON), then PyTorch's anchor at
#           flashinfer_bench's shapes (bench/python/torch_anchor.py: SDPA
#           decode and causal prefill per backend, torch.topk) where torch
#           is installed, skipped with a note where it is not.
#   KVPOLICY_GPU_TESTS="cuda_minference" KVPOLICY_GPU_BENCHES="minference_bench" scripts/gpu-check.sh OUT
#           the same steps for the named programs only (an empty
#           KVPOLICY_GPU_BENCHES builds and times no benchmark).
# Every step's log, the benchmarks' output and a summary go to OUT_DIR. It
# goes on after a failed step so one run collects everything, and exits 1 if
# any step failed.
#
# Packages: a GPU machine may reach no registry. If .gpudeps/usr exists (made
# where apt works by `scripts/fetch-deps.sh .gpudeps`, ignored by git, carried
# with the checkout), CMake finds Catch2, range-v3, CLI11 and zlib there and
# apt is not touched; otherwise scripts/install-deps.sh installs them with
# apt. KVPOLICY_GPU_DEPS=DIR names another such folder.
set -uo pipefail
out="${1:?usage: scripts/gpu-check.sh OUT_DIR [build|test|sanitize|bench ...]}"
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build test sanitize bench)
wants() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out"
out="$(cd "$out" && pwd)"

deps="${KVPOLICY_GPU_DEPS:-.gpudeps}"
# This GPU's architecture only, benchmarks included: half the nvcc work of
# the preset's 80;90 (the build step took 223 s on 16 cores with both).
cmake_args=(-DKVPOLICY_CUDA_TEST_ARCHITECTURES=native -DCMAKE_CUDA_ARCHITECTURES=native)
if [ -d "$deps/usr" ]; then
    deps="$(cd "$deps" && pwd)"
    cmake_args+=("-DCMAKE_PREFIX_PATH=$deps/usr")
    # FlashInfer's headers, fetched there too (no registry on a GPU machine).
    [ -d "$deps/flashinfer" ] && cmake_args+=("-DKVPOLICY_FLASHINFER_ROOT=$deps/flashinfer")
    echo "gpu-check: packages from the carried prefix $deps/usr (apt not used):" >&2
    cat "$deps/PACKAGES" >&2 2>/dev/null || true
else
    source scripts/install-deps.sh
    set +e
fi
set +e  # this script collects failures itself
# The preset's default generator is Unix Makefiles; an image with ninja and
# no make (the device machines list ninja) builds with Ninja instead.
if ! command -v make >/dev/null && command -v ninja >/dev/null && [ ! -f build/cuda/CMakeCache.txt ]; then
    cmake_args+=(-G Ninja)
fi
case ":$PATH:" in *":/usr/local/cuda/bin:"*) ;; *) [ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH" ;; esac

jobs=$(nproc 2>/dev/null || echo 2)
build=build/cuda
failed=()
step() {  # step NAME COMMAND...: run, log to OUT_DIR/NAME.log, remember failures
    local name=$1
    shift
    echo "== $name: $*" | tee -a "$out/summary.txt"
    local start
    start=$(date +%s)
    "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "   rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    [ $rc -eq 0 ] || failed+=("$name")
    return $rc
}

touch "$out/summary.txt"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
# KVPOLICY_GPU_TESTS / KVPOLICY_GPU_BENCHES (space-separated names) narrow
# every step to those programs: a short device lease builds, tests,
# sanitizes and times only what changed.
# The cuda_flashinfer_* tests and flashinfer_bench exist where the
# configure step found FlashInfer's headers (carried in .gpudeps/flashinfer
# by scripts/fetch-deps.sh); the build step fails, naming them, where not.
read -r -a cuda_tests <<<"${KVPOLICY_GPU_TESTS:-cuda_device_smoke cuda_select_score cuda_sparse_ring cuda_16bit cuda_minference cuda_flashinfer_decode cuda_flashinfer_prefill cuda_flashinfer_top_k}"
read -r -a benches <<<"${KVPOLICY_GPU_BENCHES-select_bench loader_bench quest_bench minference_bench flashinfer_bench}"
test_regex="^cuda: ($(IFS='|'; echo "${cuda_tests[*]}"))\$|^compile_fail: cuda"

if wants build; then
    step configure cmake --preset cuda "${cmake_args[@]}" || { echo "configure failed (log: $out/configure.log)"; exit 1; }
    step build cmake --build --preset cuda -j "$jobs" --target "${cuda_tests[@]}" "${benches[@]}" cuda_offload ||
        { echo "build failed (log: $out/build.log)"; exit 1; }
fi
if wants test; then
    step ctest ctest --preset cuda -L "cuda|compile_fail" -R "$test_regex" --output-on-failure
    step cuda_offload "$build/examples/cuda_offload"
fi
if wants sanitize; then
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for t in "${cuda_tests[@]}"; do
        # Big inputs shrink tenfold under the sanitizers (cuda_test.cuh's
        # large_input_divisor): racecheck ran a 10^6-score selection past
        # five minutes; the full sizes run in the test step.
        export KVPOLICY_CUDA_TEST_SCALE=small
        step "memcheck_$t" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$build/tests/$t"
        step "racecheck_$t" "$sanitizer" --tool racecheck --racecheck-report all --error-exitcode 1 "$build/tests/$t"
        step "synccheck_$t" "$sanitizer" --tool synccheck --error-exitcode 1 "$build/tests/$t"
    done
fi
if wants bench; then
    for b in "${benches[@]}"; do
        extra=()
        [ "$b" = flashinfer_bench ] && extra=(--reps 10)  # its 128K prefill rows keep the step short
        step "$b" "$build/bench/$b" "${extra[@]}" --json "$out/$b.json" && cp "$out/$b.log" "$out/$b.txt"
    done
    # PyTorch's SDPA and torch.topk at flashinfer_bench's shapes, in the same
    # run; where no Python has torch, a note instead of a failure.
    py=$(command -v python3 || command -v python || true)
    if [ -n "$py" ] && "$py" -c "import torch" >/dev/null 2>&1; then
        step torch_anchor "$py" bench/python/torch_anchor.py --reps 10 --json "$out/torch_anchor.json" &&
            cp "$out/torch_anchor.log" "$out/torch_anchor.txt"
    else
        echo "== torch_anchor: skipped: no python with torch here (pip install torch to time SDPA and torch.topk beside flashinfer_bench)" |
            tee -a "$out/summary.txt"
    fi
fi

if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu-check: FAILED: ${failed[*]} (logs in $out)" | tee -a "$out/summary.txt"
    exit 1
fi
echo "gpu-check: steps ${steps[*]} passed (logs in $out)" | tee -a "$out/summary.txt"
