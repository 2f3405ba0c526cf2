#!/usr/bin/env bash
# The whole test suite: install, build, run every test with ctest (unit, golden,
# property tests, the include-graph check); then the same rule, golden, checker and CLI tests
# under ASan+UBSan (ci/sanitize.sh), a smoke run of every fuzz target (ci/fuzz.sh) and the
# installed C++ package built into a consumer project (ci/package-check.sh), and the Python
# package installed with pip and tested with pytest (ci/python-check.sh), and a short audit of
# Paddle's rules (ci/audit-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh
# A killed MPI job can leave shared-memory segments behind (docs/ARCHITECTURE.md "Tests under mpirun").
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
status=0
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900 || status=$?
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
bash ci/sanitize.sh || status=$?
bash ci/fuzz.sh || status=$?
# The C++ package: install build/ into a temporary prefix, build and run examples/cpp_consumer.
bash ci/package-check.sh || status=$?
# The Python package: pip install . into a virtual environment, then pytest python/tests.
bash ci/python-check.sh || status=$?
# The auditor: paddlepaddle from PyPI, a short `spmd audit paddle`, its tests (docs/AUDIT.md).
bash ci/audit-check.sh || status=$?
exit $status
