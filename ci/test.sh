#!/usr/bin/env bash
# The whole test suite: install, build, run every test with ctest (unit, golden,
# property tests, the include-graph check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
