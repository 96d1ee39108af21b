#!/usr/bin/env bash
# CI's packaging check (scripts/test.sh runs it last): kvpolicy taken the
# three ways users take it, each built and run, so a broken install fails CI.
#
#  1. `cmake --install` into a temporary prefix (with kvpolicy::cuda where
#     nvcc is); examples/ configured and built as an outside project against
#     it (find_package), warnings as errors, and run (the CUDA one only
#     reports that there is no GPU where there is none);
#     test_package/ built against it too (plus its CUDA consumer where nvcc
#     is, and its kvpolicy::redis consumer where hiredis is), and
#     `pkg-config --cflags kvpolicy` checked by compiling with it.
#  2. kvpolicy as a subproject: test_package/ through FetchContent, pointed at
#     this checkout (FETCHCONTENT_SOURCE_DIR_KVPOLICY), so nothing is cloned.
#  3. Conan 2: the client from PyPI in a virtual environment, a throwaway
#     CONAN_HOME with every remote disabled, range-v3, zlib and hiredis taken
#     from the system through the profile's [platform_requires]; `conan create`
#     makes the package (with_redis where hiredis is) and builds and runs
#     test_package/ against it.
#  4. README.md or the docs site (docs/) quotes the `example-begin` blocks of
#     test_package/CMakeLists.txt and of this script verbatim.
#
# Builds under build/packaging/, installs under a temporary directory that is
# removed at exit. Extra time in CI: about a minute (see the last line).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh

start=$(date +%s)
jobs=$(nproc 2>/dev/null || echo 2)
build="$PWD/build/packaging"
work=$(mktemp -d /tmp/kvpolicy-packaging.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
mkdir -p "$build"
step() { echo "check-packaging: $*"; }
# The Conan client from PyPI in build/packaging/conan-venv (kept between
# runs). `scripts/check-packaging.sh --tools` does only this: scripts/test.sh
# runs it in the background while it compiles.
venv="$build/conan-venv"
install_conan() {
    [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check 'conan>=2,<3'
}
if [ "${1:-}" = --tools ]; then
    install_conan
    exit 0
fi

have_nvcc=OFF
command -v nvcc >/dev/null && have_nvcc=ON
have_hiredis=OFF  # kvpolicy::redis is built, installed and consumed where hiredis is
pkg-config --exists hiredis && have_hiredis=ON

# --- 1. the installed package ------------------------------------------------
step "cmake --install (kvpolicy::cuda: $have_nvcc, kvpolicy::redis: $have_hiredis)"
{
    # example-begin sh-install
    cmake -S . -B "$build/install" -DKVPOLICY_BUILD_TESTS=OFF -DKVPOLICY_BUILD_EXAMPLES=OFF
    cmake --install "$build/install" --prefix "$prefix"
    # example-end
} >/dev/null
for f in share/cmake/kvpolicy/kvpolicyConfig.cmake share/cmake/kvpolicy/kvpolicyConfigVersion.cmake \
         share/pkgconfig/kvpolicy.pc include/kvpolicy/kvpolicy.hpp; do
    [ -f "$prefix/$f" ] || { echo "check-packaging: the install lacks $f" >&2; exit 1; }
done
if [ "$have_hiredis" = ON ] && [ ! -f "$prefix/include/kvpolicy/redis.hpp" ] ||
   [ "$have_hiredis" = ON ] && [ ! -f "$prefix/share/cmake/kvpolicy/kvpolicyRedisTargets.cmake" ]; then
    echo "check-packaging: hiredis is here but the install lacks kvpolicy::redis" >&2
    exit 1
fi
if [ "$have_nvcc" = ON ] && [ ! -f "$prefix/include/kvpolicy/cuda.cuh" ]; then
    echo "check-packaging: nvcc is here but the install lacks the device headers" >&2
    exit 1
fi

step "examples/ as an outside project against the install"
rm -rf "$build/examples"
cmake -S examples -B "$build/examples" -DCMAKE_PREFIX_PATH="$prefix" -DKVPOLICY_WARNINGS_AS_ERRORS=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build/examples" -j "$jobs" >/dev/null
examples=(minimal_two_tier custom_policy two_tier_scenario replay_trace)
[ "$have_nvcc" = OFF ] || examples+=(cuda_offload)  # says so and exits 0 where there is no GPU
for example in "${examples[@]}"; do
    "$build/examples/$example" >/dev/null || { echo "check-packaging: example $example failed" >&2; exit 1; }
done
trace=../shared/traces/mooncake/synthetic_trace.jsonl  # where the shared traces are checked out
if [ -f "$trace" ]; then
    "$build/examples/replay_trace" "$trace" >/dev/null || { echo "check-packaging: replay_trace $trace failed" >&2; exit 1; }
fi

step "test_package/ against the install (CUDA consumer: $have_nvcc, Redis consumer: $have_hiredis)"
rm -rf "$build/test_package"
cmake -S test_package -B "$build/test_package" -DCMAKE_PREFIX_PATH="$prefix" \
    -DKVPOLICY_TEST_PACKAGE_CUDA="$have_nvcc" -DKVPOLICY_TEST_PACKAGE_REDIS="$have_hiredis" >/dev/null
cmake --build "$build/test_package" -j "$jobs" >/dev/null
"$build/test_package/test_package"
[ "$have_nvcc" = OFF ] || "$build/test_package/test_package_cuda"
[ "$have_hiredis" = OFF ] || "$build/test_package/test_package_redis"

step "pkg-config"
export PKG_CONFIG_PATH="$prefix/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --print-errors --cflags kvpolicy >/dev/null
pkg-config --print-errors --cflags --libs kvpolicy-sim >/dev/null
# example-begin sh-pkg-config
c++ -std=c++20 $(pkg-config --cflags kvpolicy-sim) test_package/test_package.cpp \
    $(pkg-config --libs kvpolicy-sim) -o "$work/test_package_pc"
# example-end
"$work/test_package_pc" >/dev/null

# --- 2. a subproject through FetchContent ------------------------------------
step "test_package/ with kvpolicy through FetchContent"
rm -rf "$build/fetch"
cmake -S test_package -B "$build/fetch" -DKVPOLICY_TEST_PACKAGE_FETCH=ON -DKVPOLICY_TEST_PACKAGE_REDIS="$have_hiredis" \
    -DFETCHCONTENT_SOURCE_DIR_KVPOLICY="$PWD" -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DKVPOLICY_CUDA=OFF >/dev/null
cmake --build "$build/fetch" -j "$jobs" >/dev/null
"$build/fetch/test_package"
[ "$have_hiredis" = OFF ] || "$build/fetch/test_package_redis"

# --- 3. Conan ----------------------------------------------------------------
step "conan create (offline; range-v3, zlib and hiredis from the system)"
install_conan
export PATH="$venv/bin:$PATH" CONAN_HOME="$work/conan-home"
conan profile detect >/dev/null 2>&1
conan remote disable '*' >/dev/null  # never ask ConanCenter: all comes from platform_requires
range_v3_dir=$(sed -n 's/^range-v3_DIR:PATH=//p' "$build/install/CMakeCache.txt")
range_v3_version=$(sed -n 's/^set(PACKAGE_VERSION "\([0-9.]*\)")$/\1/p' "$range_v3_dir/range-v3-config-version.cmake")
zlib_version=$(pkg-config --modversion zlib)
redis_option=False
hiredis_version=0.14.1  # named in the profile only; required by the package only with with_redis=True
if [ "$have_hiredis" = ON ]; then
    redis_option=True
    hiredis_version=$(pkg-config --modversion hiredis)
fi
cuda_option=False
[ "$have_nvcc" = OFF ] || cuda_option=True
profile="$work/system-deps"
cat > "$profile" <<EOF
# example-begin conan-profile
include(default)
[settings]
compiler.cppstd=20
[platform_requires]
range-v3/$range_v3_version
zlib/$zlib_version
hiredis/$hiredis_version
[conf]
tools.cmake.cmaketoolchain:user_presets=
# example-end
EOF
# example-begin conan-create
conan create . -pr:a "$profile" -o "&:cuda=$cuda_option" -o "&:with_redis=$redis_option" -vwarning  # then builds and runs test_package/
# example-end

# --- 4. the README and the docs quote what was built -----------------------------
step "README and docs quote"
python3 - README.md test_package/CMakeLists.txt scripts/check-packaging.sh <<'PY'
import pathlib, re, sys, textwrap
readme = open(sys.argv[1]).read() + "".join(p.read_text() for p in sorted(pathlib.Path("docs").rglob("*.md")))
missing = []
for path in sys.argv[2:]:
    text = open(path).read()
    for name, body in re.findall(r"^[ \t]*# example-begin (\S+)\n(.*?)^[ \t]*# example-end$", text, re.M | re.S):
        if textwrap.dedent(body) not in readme:
            missing.append(f"{path} [{name}]:\n{textwrap.dedent(body)}")
if missing:
    sys.exit("check-packaging: README.md or a page under docs/ must quote, verbatim:\n\n" + "\n".join(missing))
PY

echo "check-packaging: install, examples, pkg-config, FetchContent and Conan passed in $(( $(date +%s) - start )) s"
