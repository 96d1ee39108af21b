#!/usr/bin/env bash
# README command 1: install what is missing, build Release, run the main
# program on its built-in default workload. Extra arguments go to the program.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset release >/dev/null
cmake --build --preset release --target two_tier_scenario -j "$jobs" >/dev/null
exec build/release/examples/two_tier_scenario "$@"
