#!/usr/bin/env bash
# A virtual environment with vLLM and torch as a vLLM user installs them from
# PyPI (pinned below), for kvpolicy's tests inside a real vLLM
# (python/engine_tests) and the replay through vLLM's own scheduler
# (bench/vllm_replay.py):
#
#   scripts/vllm-venv.sh [VENV]            make VENV (default build/vllm-venv)
#   scripts/vllm-venv.sh VENV WHEEL        ... and install kvpolicy's WHEEL in it
#
# torch comes with its CUDA libraries (PyPI's Linux torch is the CUDA
# build; it runs on the CPU without a GPU) and vLLM with its dependencies:
# about 9 GiB. uv (from PyPI, into the venv itself) installs them: 36 s of
# wall and 51 s of CPU on a 2-core machine, where pip took 121 s and 96 s,
# the CPU taken from the ASan build that compiles beside it. Its cache lives
# beside VENV (uv-cache), so the venv's files are hard links into it. It is
# made once: a VENV whose pins file equals this script's pins is reused.
# scripts/test.sh makes it in the background while the C++ builds compile.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build/vllm-venv}
wheel=${2:-}
pins="vllm==0.33.0 torch==2.14.0 pytest==9.2.0"
export UV_CACHE_DIR=${UV_CACHE_DIR:-$(dirname "$venv")/uv-cache}
uv() { "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" "$@"; }

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check uv==0.13.9
    # shellcheck disable=SC2086  # the pins are words
    uv $pins
    echo "$pins" >"$venv/pins"
fi
if [ -n "$wheel" ]; then
    # A VENV that pip made before (no uv in it) gets uv first.
    [ -x "$venv/bin/uv" ] || "$venv/bin/python" -m pip install -q --disable-pip-version-check uv==0.13.9
    uv --no-deps --reinstall "$wheel"
fi
