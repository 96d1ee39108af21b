#!/usr/bin/env bash
# Fetches the packages the CUDA build needs into a prefix that travels with
# the checkout, for a GPU machine that reaches no package registry:
#
#   scripts/fetch-deps.sh DIR        (run where apt works; no root needed)
#
# The GPU build (scripts/gpu-check.sh: the `cuda` preset, its CUDA tests,
# benchmarks and the cuda_offload example) finds with find_package: Catch2 2
# (tests), range-v3 (the library), CLI11 (tools/, built with the examples)
# and zlib (the simulator's target, which tests/CMakeLists.txt links). All but
# zlib are header-only; zlib's runtime library comes along with its headers.
# They are Debian 12's packages (`apt-get download`), unpacked with dpkg -x
# into DIR/usr, so DIR/usr is a CMake prefix (CMAKE_PREFIX_PATH). About 7 MiB.
# The README's GPU section names DIR `.gpudeps` (ignored by git, carried to
# the device machine). DIR/flashinfer gets FlashInfer's headers and the CCCL
# they build against, from the pinned flashinfer-python wheel on PyPI (about
# 31 MiB; cmake/KvpolicyFlashInfer.cmake), which gpu-check.sh passes as
# KVPOLICY_FLASHINFER_ROOT.
set -euo pipefail
dir="${1:?usage: scripts/fetch-deps.sh DIR}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
packages=(catch2 librange-v3-dev libcli11-dev zlib1g-dev zlib1g)

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# It replaces DIR/usr and DIR/lib: refuse a folder that holds anything else.
for entry in "$dir"/* "$dir"/.[!.]*; do
    [ -e "$entry" ] || continue
    case "${entry##*/}" in usr | lib | PACKAGES | flashinfer) ;; *)
        echo "fetch-deps: $dir holds other files ($entry); give an empty or earlier fetch-deps folder" >&2
        exit 1
        ;;
    esac
done
debs="$(mktemp -d)"
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && apt-get download -q "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
for p in "${packages[@]}"; do
    ls "$debs"/"${p}"_*.deb >/dev/null 2>&1 || { echo "fetch-deps: apt-get download $p failed" >&2; exit 1; }
done
rm -rf "${dir:?}/usr" "${dir:?}/lib"
for deb in "$debs"/*.deb; do
    dpkg -x "$deb" "$dir"
done
# Absolute links (zlib1g-dev's libz.so -> /lib/...) would point into the
# machine's own /: point them into the prefix instead, relative, so the
# folder can move.
find "$dir" -type l | while read -r link; do
    target="$(readlink "$link")"
    case "$target" in /*) [ -e "$dir$target" ] && ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$dir$target")" "$link" ;; esac
done
cmake -D KVPOLICY_FLASHINFER_DEST="$dir/flashinfer" -P "$repo/cmake/KvpolicyFlashInfer.cmake" >&2
# What was fetched, for the record (gpu-check.sh prints it).
{
    for deb in "$debs"/*.deb; do
        dpkg-deb -f "$deb" Package Version | paste -sd' '
    done
    echo "flashinfer-python $(cat "$dir/flashinfer/VERSION")"
} >"$dir/PACKAGES"
echo "fetch-deps: $(wc -l <"$dir/PACKAGES") packages in $dir ($(du -sh "$dir" | cut -f1)); prefix: $dir/usr" >&2
