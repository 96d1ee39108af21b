#!/usr/bin/env bash
# README command 2: install what is missing, build everything with warnings
# as errors under ASan + UBSan (precondition checks on), and run the whole
# suite through CTest: unit and differential tests, header self-containment,
# must-not-compile cases, and the CUDA programs (compiled where nvcc is,
# reported as skipped where no GPU is); then the thread tests under TSan,
# and each fuzz harness for a minute (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)
# KVPOLICY_REDIS=ON: the Redis tier and its tests (ctest -L redis, real
# redis-server processes on loopback ports, about 10 s) must build and run
# here; install-deps.sh above installed hiredis and redis-server.
cmake --preset asan -DKVPOLICY_REDIS=ON
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs"
# The thread tests (label `threads`) again under TSan: only their targets are
# built, so this costs about half a minute (25 s measured on 2 cores).
cmake --preset tsan
cmake --build --preset tsan -j "$jobs" --target cache_threads
ctest --preset tsan -L threads -j "$jobs"
# The libFuzzer harnesses (fuzz/), each for FUZZ_SECONDS (default 60) from
# the committed corpus; the asan suite above already replayed that corpus and
# every crash reproducer.
scripts/fuzz.sh
# The Release build of the examples, tools and benchmarks: optimisation-only
# warnings (-O2 inlining) are errors too.
cmake --preset release
cmake --build --preset release -j "$jobs"
# kvpolicy as users take it: the installed package (CMake, pkg-config),
# FetchContent and Conan, each built and run (about a minute).
scripts/check-packaging.sh
echo "test.sh: suite built and passed in $(( $(date +%s) - start )) s"
