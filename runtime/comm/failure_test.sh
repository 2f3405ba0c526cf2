#!/usr/bin/env bash
# Runs failure_demo under mpirun and checks that the job ends by itself with the expected
# exit status and message: a failing rank must not hang the rest of the job. Ending "by
# itself" is read from the message (the collective timeout or the abort named the rank and
# the step), not from a clock; HANG_S only stops a job that would never end (killed by
# `timeout`: a failure), so a slow, loaded machine cannot fail a correct run.
# Usage: failure_test.sh MPIEXEC DEMO NP MODE HANG_S EXPECT REGEX [NAME=VALUE...]
#   EXPECT: `fail` (non-zero exit) or `pass` (exit 0); REGEX: grep -E on the output.
# The NAME=VALUE pairs go to the environment (SPMD_COLLECTIVE_TIMEOUT_S, SPMD_DEBUG).
# A killed job can leave /dev/shm/vader_segment.* behind: the suite's scripts clean them
# (not this one: other MPI jobs may be running beside it).
set -u
mpiexec=$1 demo=$2 np=$3 mode=$4 bound=$5 expect=$6 regex=$7
shift 7
start=$(date +%s%N)
output=$(env "$@" timeout --kill-after=5 "$bound" \
  "$mpiexec" -np "$np" --oversubscribe --mca pml ob1 --mca btl self,vader \
  "$demo" "$mode" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '%s\n' "$output"
echo "--- failure_test: mode=$mode np=$np exit=$rc after ${elapsed_ms} ms (hang guard ${bound} s)"
bad=0
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: the job hung (killed by timeout)"; bad=1
elif [ "$expect" = fail ] && [ "$rc" -eq 0 ]; then
  echo "FAIL: expected a non-zero exit"; bad=1
elif [ "$expect" = pass ] && [ "$rc" -ne 0 ]; then
  echo "FAIL: expected exit 0"; bad=1
fi
if ! grep -Eq -- "$regex" <<<"$output"; then
  echo "FAIL: the output does not match: $regex"; bad=1
fi
[ "$bad" -eq 0 ] && echo "ok"
exit "$bad"
