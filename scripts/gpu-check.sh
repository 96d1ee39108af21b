#!/usr/bin/env bash
# The GPU checks in one command, on a machine with a CUDA GPU:
#
#   scripts/gpu-check.sh OUT_DIR
#
# Configures the `cuda` preset with the device programs built for this GPU
# (KVPOLICY_CUDA_TEST_ARCHITECTURES=native), builds the CUDA tests and the GPU
# benchmarks, runs the CUDA tests through CTest, runs each again under
# compute-sanitizer memcheck, then runs the benchmarks. Every step's log, the
# benchmarks' tables and JSON, and a summary go to OUT_DIR. It goes on after a
# failed step so one run collects everything, and exits 1 if any step failed.
set -uo pipefail
out="${1:?usage: scripts/gpu-check.sh OUT_DIR}"
cd "$(dirname "$0")/.."
mkdir -p "$out"
out="$(cd "$out" && pwd)"
source scripts/install-deps.sh
set +e  # install-deps.sh turns -e on; this script collects failures itself

jobs=$(nproc 2>/dev/null || echo 2)
build=build/cuda
failed=()
step() {  # step NAME COMMAND...: run, log to OUT_DIR/NAME.log, remember failures
    local name=$1
    shift
    echo "== $name: $*" | tee -a "$out/summary.txt"
    local start=$(date +%s)
    "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "   rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    [ $rc -eq 0 ] || failed+=("$name")
    return $rc
}

: >"$out/summary.txt"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
cuda_tests=(cuda_device_smoke cuda_select_score cuda_sparse_ring cuda_minference)
benches=(select_bench loader_bench quest_bench minference_bench)

step configure cmake --preset cuda -DKVPOLICY_CUDA_TEST_ARCHITECTURES=native || { echo "configure failed"; exit 1; }
step build cmake --build --preset cuda -j "$jobs" --target "${cuda_tests[@]}" "${benches[@]}" || { echo "build failed"; exit 1; }
step ctest ctest --preset cuda -L cuda --output-on-failure
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in "${cuda_tests[@]}"; do
    step "memcheck_$t" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$build/tests/$t"
done
for b in "${benches[@]}"; do
    step "$b" "$build/bench/$b" --json "$out/$b.json" && cp "$out/$b.log" "$out/$b.txt"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu-check: FAILED: ${failed[*]} (logs in $out)" | tee -a "$out/summary.txt"
    exit 1
fi
echo "gpu-check: all steps passed (logs in $out)" | tee -a "$out/summary.txt"
