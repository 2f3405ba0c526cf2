#!/usr/bin/env bash
# The auditor of other frameworks' rules (docs/AUDIT.md): paddlepaddle from PyPI into the
# Python package's virtual environment (build/python-venv, made by ci/python-check.sh, made
# here when absent), a short audit of every op both know through `spmd audit paddle` (exit
# non-zero if spmdkit's own answer is ever judged UNSOUND), then the auditor's tests with
# their skip reasons shown. About a minute on 2 cores once paddle is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/python-venv
cases="${SPMD_AUDIT_CASES:-50}"
mkdir -p build
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import spmdkit.audit" 2>/dev/null; then
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/pip" install -q ".[test]"
fi
if ! "$venv/bin/python" -c "import paddle" 2>/dev/null; then
  "$venv/bin/pip" install -q "paddlepaddle==3.3.1"
fi
status=0
if [ -x build/bin/spmd ]; then
  SPMD_PYTHON="$venv/bin/python" build/bin/spmd audit paddle --cases "$cases" || status=$?
else
  "$venv/bin/python" -m spmdkit.audit paddle --cases "$cases" || status=$?
fi
"$venv/bin/python" -m pytest -q -rs python/tests/test_audit.py python/tests/test_paddle_tests.py || status=$?
exit $status
