#!/usr/bin/env bash
# Installs what kvpolicy needs from Debian's packages; quiet and quick when
# everything is already there. Run as root (or with sudo available).
set -euo pipefail

# clang-14 and libclang-rt-14-dev: the libFuzzer harnesses (scripts/fuzz.sh);
# clang-format-14: the tree's style (.clang-format, scripts/format.sh).
# python3-dev and python3-venv: the Python package's build and tests (python/).
# libhiredis-dev: the Redis remote tier (kvpolicy::redis); redis-server and
# redis-tools: the servers its tests start on loopback ports (ctest -L redis).
# libssl-dev: the Redis tier's SHA-256 block identity and HMAC (OpenSSL's libcrypto).
# doxygen: the docs site's C++ API pages (scripts/docs.sh; MkDocs itself comes
# from PyPI into build/docs-venv).
packages=(cmake g++ make catch2 librange-v3-dev zlib1g-dev libcli11-dev gnuplot-nox pkg-config python3-dev python3-venv
          clang-14 libclang-rt-14-dev clang-format-14 libhiredis-dev libssl-dev redis-server redis-tools doxygen)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >/dev/null
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc lives here on the CUDA images; CI's environment may not have it on PATH.
if [ -x /usr/local/cuda/bin/nvcc ]; then
    case ":$PATH:" in *":/usr/local/cuda/bin:"*) ;; *) export PATH="/usr/local/cuda/bin:$PATH" ;; esac
fi
