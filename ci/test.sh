#!/usr/bin/env bash
# The whole test suite: install, build, run every test with ctest (unit, golden,
# property tests, the include-graph check); then the same rule, golden, checker and CLI tests
# under ASan+UBSan (ci/sanitize.sh), a smoke run of every fuzz target (ci/fuzz.sh) and the
# installed C++ package built into a consumer project (ci/package-check.sh), and the Python
# package installed with pip and tested with pytest (ci/python-check.sh), and a short audit of
# Paddle's rules (ci/audit-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase is timed (wall seconds, from bash's SECONDS) and the table is printed at the end,
# whatever failed, so a slow phase shows in every CI log.
phases=()
failed_ctest_dirs=()  # build directories whose ctest phase failed: their failing tests print last
status=0
last_rc=0
# A phase that runs past its limit is killed with everything it started (timeout signals
# its whole process group) and reported as timed out, so one hang cannot spend the run.
phase() {  # phase NAME LIMIT_SECONDS COMMAND...: runs the command, records its time and exit status
  local name=$1 limit=$2 start=$SECONDS rc=0 verdict
  shift 2
  timeout -k 30 "$limit" "$@" || rc=$?
  if [ $rc -eq 0 ]; then verdict=ok
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="TIMED OUT after $limit s (exit $rc)"
  else verdict="FAILED (exit $rc)"
  fi
  phases+=("$(printf '%-22s %6d s  %s' "$name" $((SECONDS - start)) "$verdict")")
  [ $rc -eq 0 ] || status=$rc
  last_rc=$rc
  return 0
}
print_phases() {
  local dir
  for dir in "${failed_ctest_dirs[@]}"; do echo; bash ci/failed-tests.sh "$dir"; done
  echo
  echo "ci/test.sh phases (wall time on $(nproc) cores):"
  local line
  for line in "${phases[@]}"; do echo "  $line"; done
  printf '  %-22s %6d s\n' total "$SECONDS"
}
trap print_phases EXIT
phase install-deps 900 bash ci/install-deps.sh
phase build 2400 bash ci/build.sh
[ $status -eq 0 ] || exit $status
# A killed MPI job can leave shared-memory segments behind (docs/ARCHITECTURE.md "Tests under mpirun").
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
rm -f build/Testing/Temporary/LastTestsFailed.log
phase ctest 2400 ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
[ $last_rc -eq 0 ] || failed_ctest_dirs+=(build)
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
rm -f build-asan/Testing/Temporary/LastTestsFailed.log
phase sanitize 1800 bash ci/sanitize.sh
[ $last_rc -eq 0 ] || failed_ctest_dirs+=(build-asan)
phase fuzz 900 bash ci/fuzz.sh
# The C++ package: install build/ into a temporary prefix, build and run examples/cpp_consumer.
phase package-check 900 bash ci/package-check.sh
# The Python package: pip install . into a virtual environment, then pytest python/tests.
phase python-check 1200 bash ci/python-check.sh
# The auditor: paddlepaddle from PyPI, a short `spmd audit paddle`, its tests (docs/AUDIT.md).
phase audit-check 900 bash ci/audit-check.sh
exit $status
