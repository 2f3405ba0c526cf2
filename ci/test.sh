#!/usr/bin/env bash
# The whole test suite: install, build, run every test with ctest (unit, golden,
# property tests, the include-graph check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh
# A killed MPI job can leave shared-memory segments behind (docs/ARCHITECTURE.md "Tests under mpirun").
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
status=0
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900 || status=$?
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
exit $status
