#!/usr/bin/env bash
# The documentation site (docs/, MkDocs Material), built or served locally:
#
#   scripts/docs.sh          build into build/site with `mkdocs build --strict`
#                            (a broken link, a missing page or anchor, an
#                            unresolved API reference fails)
#   scripts/docs.sh serve    the same, then serve it at http://127.0.0.1:8000
#                            with live reload (pages under docs/ only)
#   scripts/docs.sh check    tests/docs (every compiled or run code block in
#                            the site equals its source; the simulator page's
#                            flags equal `kvpolicy-sim --help`; its sample run
#                            equals a real run; the plots' data equal the
#                            tables), then the strict build; scripts/test.sh
#                            runs this
#   scripts/docs.sh plots    regenerate docs/*.png and docs/data/*.csv from
#                            the tables in the pages (scripts/docs-plots.py)
#   scripts/docs.sh tools    only install the tools below (scripts/test.sh
#                            does it in the background while it compiles)
#
# Tools: MkDocs Material, mkdocstrings and pytest from PyPI in build/docs-venv
# (pinned in scripts/docs-requirements.txt; installed once; `plots` adds
# matplotlib),
# Doxygen from Debian (scripts/install-deps.sh). The C++ API pages are
# generated into docs/api/cpp/ (git-ignored) by scripts/docs-api.py on every
# build. The Python API page reads the signatures and docstrings of an
# installed kvpolicy (those its type stubs hold): KVPOLICY_PYTHON names an
# interpreter that has it (default build/python-venv/bin/python, where
# scripts/test.sh installs it); where it has none, the package is built into
# it first (about 2 minutes).
# `check` needs the simulator: KVPOLICY_SIM (default build/tools/kvpolicy-sim,
# the plain build's).
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-build}
source scripts/install-deps.sh
export NO_MKDOCS_2_WARNING=1

venv=build/docs-venv
reqs=scripts/docs-requirements.txt
if [ ! -x "$venv/bin/mkdocs" ] || ! cmp -s "$reqs" "$venv/requirements.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r "$reqs"
    cp "$reqs" "$venv/requirements.txt"
fi
[ "$action" != tools ] || exit 0

if [ "$action" = plots ]; then
    "$venv/bin/python" -c 'import matplotlib' 2>/dev/null || "$venv/bin/pip" install -q matplotlib==3.11.2
    MPLBACKEND=Agg "$venv/bin/python" scripts/docs-plots.py
    exit 0
fi

py=${KVPOLICY_PYTHON:-build/python-venv/bin/python}
if ! { [ -x "$py" ] && "$py" -c 'import kvpolicy' 2>/dev/null; }; then
    echo "docs: no kvpolicy in $py; building the Python package into it (about 2 minutes)" >&2
    [ -x "$py" ] || python3 -m venv "$(dirname "$(dirname "$py")")"
    "$py" -m pip install -q .
fi
KVPOLICY_PYTHON_PATH=$("$py" -c 'import kvpolicy, os; print(os.path.dirname(os.path.dirname(kvpolicy.__file__)))')
export KVPOLICY_PYTHON_PATH

find docs/api/cpp -name '*.md' -delete
python3 scripts/docs-api.py docs/api/cpp

case "$action" in
    build) "$venv/bin/mkdocs" build --strict ;;
    serve) "$venv/bin/mkdocs" serve --strict ;;
    check)
        KVPOLICY_SIM=${KVPOLICY_SIM:-build/tools/kvpolicy-sim} \
            "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/docs
        "$venv/bin/mkdocs" build --strict
        ;;
    *) echo "usage: scripts/docs.sh [build|serve|check|plots]" >&2; exit 2 ;;
esac
