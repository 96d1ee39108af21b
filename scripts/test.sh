#!/usr/bin/env bash
# README command 2: install what is missing, check that every C++ and CUDA
# file is in .clang-format's style (scripts/format.sh --check), build
# everything with warnings as errors under ASan + UBSan (precondition checks
# on), and run the whole suite through CTest: unit and differential tests,
# header self-containment, must-not-compile cases; then the thread tests
# under TSan, each fuzz harness for a minute (scripts/fuzz.sh), the plain Release build of the whole tree
# with its tests run optimised, which is where the CUDA programs and nvcc's
# must-not-compile cases build and run where nvcc is (reported as skipped
# where no GPU is; the sanitizers never reach device programs, so the ASan
# build leaves them out rather than compile them twice), the Python package
# built by pip with its pytest suite, the docs site (scripts/docs.sh check),
# and packaging, with kvpolicy inside a real vLLM tested beside these three.
#
# Two runs at once (two clones on one machine) do not meet: every build tree,
# virtual environment and test file lives in the clone or in a fresh
# temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
# Room on disk, checked before anything is built: a fresh clone's suite
# writes about 13 GiB into it (the vLLM venv's uv cache 9, the ASan tree 2.5,
# the rest 1.5), and a full disk otherwise fails twelve minutes in, inside
# the ASan build, with "No space left on device" from whichever compile hit
# it. A clone whose vLLM venv is already made needs about 4; the compilers'
# and tests' temporary files need under 2 in TMPDIR.
need_room() {  # DIR GIB
    local free_gib=$(( $(df -Pk "$1" | awk 'NR == 2 { print $4 }') / 1048576 ))
    [ "$free_gib" -ge "$2" ] && return 0
    echo "test.sh: $free_gib GiB free on $(df -P "$1" | awk 'NR == 2 { print $6 }') (which holds $1); the suite needs about $2 GiB there." >&2
    echo "test.sh: free some (an old clone's build/ is about 13 GiB: du -sh /tmp/* ~/* | sort -h) and run it again." >&2
    exit 1
}
if [ -x build/vllm-venv/bin/python ]; then need_room . 5; else need_room . 14; fi
need_room "${TMPDIR:-/tmp}" 2
source scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)
# A step that fails ends the suite; what still runs beside it ends with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
# What later steps fetch from PyPI (the docs' tools, the Conan client, the
# peers' pinned releases the Python tests read: about a minute and a half
# of waiting on the network on a fresh machine) is fetched in the
# background while the ASan build compiles; each step that uses it waits
# for it first. A failure here is only reported: that step fetches again
# and fails itself, naming what it could not get.
mkdir -p build
( scripts/docs.sh tools && scripts/check-packaging.sh --tools && python3 python/tests/peers/sources.py ) \
    >build/prefetch.log 2>&1 &
prefetch=$!
# vLLM and torch from PyPI for the tests inside a real vLLM (python/engine_tests;
# about 9 GiB, installed by uv in about 40 s), made beside the ASan build too.
scripts/vllm-venv.sh build/vllm-venv >build/vllm-venv.log 2>&1 &
vllm_venv=$!
prefetched() {
    [ -z "$prefetch" ] && return 0
    wait "$prefetch" || echo "test.sh: fetching ahead failed (build/prefetch.log); the steps below fetch again" >&2
    prefetch=""
}
# Each stage's end, in seconds from the start, so a slow CI run says where
# its time went (the whole suite should stay under 30 minutes).
stage() { echo "test.sh: [$(( $(date +%s) - start )) s] $1 done"; }
# The tree's style first: a file out of it fails in seconds, not after the builds.
scripts/format.sh --check
stage "format check"
# KVPOLICY_REDIS=ON: the Redis tier and its tests (ctest -L redis, real
# redis-server processes on loopback ports, about 10 s) must build and run
# here; install-deps.sh above installed hiredis and redis-server.
cmake --preset asan -DKVPOLICY_REDIS=ON
cmake --build --preset asan -j "$jobs"
stage "ASan + UBSan build"
ctest --preset asan -j "$jobs"
stage "ASan + UBSan tests"
# The thread tests (label `threads`) again under TSan: only their targets are
# built, so this costs under a minute (40 s measured on 2 cores).
cmake --preset tsan
cmake --build --preset tsan -j "$jobs" --target cache_threads
ctest --preset tsan -L threads -j "$jobs"
stage "TSan thread tests"
# The libFuzzer harnesses (fuzz/), each for FUZZ_SECONDS (default 60) from
# the committed corpus; the asan suite above already replayed that corpus and
# every crash reproducer.
scripts/fuzz.sh
stage "fuzzing"
# The build a new user types, exactly as the docs show it: the whole tree
# (tests, examples, tools, and the CUDA programs where nvcc is) in Release
# with the system's g++ and no preset.
# Outside the presets warnings are not errors (a user's compiler may know
# warnings we never saw), so here the log is checked instead: an
# optimisation-only warning (-O2 inlining) fails CI all the same. Then the
# benchmarks join the same tree (only their targets are new), the C++ ones
# compiled unoptimised: CI checks that they build and never times them (half
# their compile time). Then the tests run optimised.
plain_log=build/plain-build.log
{ cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2; } 2>&1 | tee "$plain_log"
{ cmake -S . -B build -DKVPOLICY_BUILD_BENCH=ON -DKVPOLICY_BENCH_UNOPTIMISED=ON && cmake --build build -j "$jobs"; } 2>&1 | tee -a "$plain_log"
if grep -nE '(^|[: ])warning[: #]' "$plain_log"; then
    echo "test.sh: the plain Release build printed the warnings above; fix them (CI treats them as errors)" >&2
    exit 1
fi
stage "plain Release build"
ctest --test-dir build -j "$jobs" --output-on-failure
stage "plain Release tests"
# The Python package (python/, kvpolicy from Python) as users install it:
# pip builds the extension once from this checkout into a fresh virtual
# environment (build isolation fetches scikit-build-core and nanobind from
# PyPI), with the project's warnings as errors, and pytest runs python/tests
# against the installed package, with the plain build's kvpolicy-sim as
# the simulator reference: 2.2 min wall in a clean clone on a 2-core machine,
# 0.5 of them pytest's (see docs/getting-started/python.md).
prefetched
venv=build/python-venv
rm -rf "$venv"
python3 -m venv "$venv"
# KVPOLICY_REDIS=ON: the package's remote tier (TieredCache(remote=...),
# python/tests/test_remote.py against real redis-server processes) must be
# built here, linking hiredis and OpenSSL as install-deps.sh installed them.
# One wheel, built once, goes into this environment and vLLM's below.
rm -rf build/wheel
"$venv/bin/pip" wheel -q --no-deps -w build/wheel \
    --config-settings=cmake.define.KVPOLICY_PYTHON_WARNINGS_AS_ERRORS=ON \
    --config-settings=cmake.define.KVPOLICY_REDIS=ON .
wheel=$(ls build/wheel/kvpolicy-*.whl)
"$venv/bin/pip" install -q "$wheel[test]"  # the extra carries what the peer tests import
# kvpolicy inside a real vLLM 0.33 (python/engine_tests): vLLM's own
# offloading-connector tests with kvpolicy's connector, and the connector in
# vLLM's own Scheduler over a real trace (bench/vllm_replay.py). They run
# beside the steps below, to the end: two minutes on 2 cores, most of it one
# Python process (vLLM's own tests, in one pytest of their own), which left
# the other core idle when it ran alone. Its output is printed when it ends.
wait "$vllm_venv" || { cat build/vllm-venv.log >&2; echo "test.sh: scripts/vllm-venv.sh failed (above)" >&2; exit 1; }
scripts/vllm-venv.sh build/vllm-venv "$wheel"
build/vllm-venv/bin/python -m pytest -q -p no:cacheprovider python/engine_tests >build/vllm-tests.log 2>&1 &
vllm_tests=$!
# -n: one pytest worker per core (pytest-xdist, in the test extra): 32 s
# rather than 50 s on 2 cores.
KVPOLICY_SIM=build/tools/kvpolicy-sim "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$jobs" python/tests
stage "Python package and its tests"
# The docs site (docs/, MkDocs Material; scripts/docs.sh): tests/docs checks
# that every code block of the site that claims to compile or run is the code
# the tests above compiled or ran, verbatim, that the simulator page's flags
# are `kvpolicy-sim --help`'s and its sample run what the tool prints, and
# that the plots' data equal the tables; then `mkdocs build --strict` (a
# broken link, page, anchor or API reference fails), with the C++ API from the
# headers through Doxygen and the Python API from the package just installed.
KVPOLICY_PYTHON="$venv/bin/python" KVPOLICY_SIM=build/tools/kvpolicy-sim scripts/docs.sh check
stage "docs"
# kvpolicy as users take it: the installed package (CMake, pkg-config),
# FetchContent and Conan, each built and run (about a minute).
scripts/check-packaging.sh
stage "packaging"
vllm_rc=0
wait "$vllm_tests" || vllm_rc=$?
cat build/vllm-tests.log
if [ "$vllm_rc" -ne 0 ]; then
    echo "test.sh: kvpolicy inside vLLM (python/engine_tests) failed, above (build/vllm-tests.log)" >&2
    exit 1
fi
stage "kvpolicy inside vLLM"
echo "test.sh: suite built and passed in $(( $(date +%s) - start )) s"
