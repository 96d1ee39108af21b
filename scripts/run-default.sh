#!/usr/bin/env bash
# README command 1: install what is missing, build Release, and run
# kvpolicy-sim on its built-in workload (multi-turn chat sessions) with every
# registered policy at five capacities: a ranked table, and a plot in
# build/kvpolicy-sim.png. Extra arguments go to kvpolicy-sim and override these.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset release >/dev/null
cmake --build --preset release --target kvpolicy-sim -j "$jobs" >/dev/null
exec build/release/tools/kvpolicy-sim --policy all --capacity 1000,2000,4000,8000,16000 \
    --plot build/kvpolicy-sim.png "$@"
