#!/usr/bin/env bash
# The tree's C++ and CUDA files in .clang-format's style (clang-format 14,
# Debian's clang-format-14, which scripts/install-deps.sh installs):
#
#   scripts/format.sh           format every tracked .hpp/.cpp/.cu/.cuh/.h in place
#   scripts/format.sh --check   change nothing; list the files that differ and fail
#
# scripts/test.sh runs the check first, so a file out of style fails the
# suite in seconds rather than after the builds.
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$format" ]; then
    echo "format.sh: clang-format-14 not found; scripts/install-deps.sh installs it" >&2
    exit 1
fi
mapfile -d '' files < <(git ls-files -z -- '*.hpp' '*.cpp' '*.cu' '*.cuh' '*.h')
if [ "${1:-}" = "--check" ]; then
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    if ! "$format" --style=file --dry-run -Werror "${files[@]}" 2>"$log"; then
        echo "format.sh: not in .clang-format's style (scripts/format.sh fixes them):" >&2
        grep -o '^[^:]*:[0-9]*:[0-9]*: error' "$log" | cut -d: -f1 | sort -u | sed 's/^/  /' >&2
        exit 1
    fi
    echo "format.sh: ${#files[@]} files in style"
else
    "$format" --style=file -i "${files[@]}"
fi
