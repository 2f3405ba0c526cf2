#!/usr/bin/env bash
# The Python package from this tree: a virtual environment in build/python-venv (git-ignored,
# outside the docs check's scan), `pip install .` (scikit-build-core builds only the C++
# libraries the extension needs, in a temporary directory: no cache to go stale), then the
# pytest suite in python/tests. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/python-venv
mkdir -p build
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/pip" install -q ".[test]"
"$venv/bin/python" -m pytest -q python/tests
