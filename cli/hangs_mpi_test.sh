#!/usr/bin/env bash
# `spmd hangs` end to end under mpirun: failure_demo's `skip` mode (rank 2 skips the
# all-reduce of step 3 and sleeps) must fail in bounded time with every rank's flight
# record in SPMD_FLIGHT_DIR, and `spmd hangs` on them must name the skipped call, the ranks
# that entered it and rank 2. Then a directory without dumps and a cut-off dump are typed
# errors (exit 2) naming the directory and the file and line. Last, the same dumps without
# rank 2's (as when a rank is stopped or killed and writes none): rank 2 is still the
# suspect, and the ranks waiting on it are not blamed.
# Usage: hangs_mpi_test.sh MPIEXEC FAILURE_DEMO SPMD
set -u
mpiexec=$1 demo=$2 spmd=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bad=0
mkdir -p "$dir/dumps"
start=$(date +%s)
SPMD_FLIGHT_DIR=$dir/dumps SPMD_COLLECTIVE_TIMEOUT_S=2 timeout --kill-after=5 50 \
  "$mpiexec" -np 4 --oversubscribe --mca pml ob1 --mca btl self,vader "$demo" skip \
  >"$dir/job.log" 2>&1
rc=$?
cat "$dir/job.log"
echo "--- job: exit $rc after $(( $(date +%s) - start )) s"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: expected the job to fail on its own (exit $rc)"; bad=1
fi
ls "$dir/dumps"
for r in 0 1 2 3; do
  [ -s "$dir/dumps/flight_rank$r.txt" ] || { echo "FAIL: no dump from rank $r"; bad=1; }
done
report=$("$spmd" hangs "$dir/dumps")
hrc=$?
printf '%s\n' "$report"
[ "$hrc" -eq 1 ] || { echo "FAIL: spmd hangs exit $hrc, expected 1 (divergence found)"; bad=1; }
want='^first divergence: all_reduce\(float64, count=4, op=sum\) on group \[0,1,2,3\], call 3 of that group: entered by ranks 0,1,3; not entered by rank 2 \(rank 2.s last call: all_reduce\(float64, count=4, op=sum\) on group \[0,1,2,3\] at step 2, completed, phase "step 2"\)'
grep -Eq -- "$want" <<<"$report" || { echo "FAIL: the report does not match: $want"; bad=1; }
grep -Fxq -- "suspect: rank 2 (ranks 0,1,3 wait on it)" <<<"$report" ||
  { echo "FAIL: rank 2 is not named the suspect"; bad=1; }

mkdir -p "$dir/nodump"
cp "$dir"/dumps/flight_rank[013].txt "$dir/nodump/"
report=$("$spmd" hangs "$dir/nodump")
hrc=$?
printf '%s\n' "$report"
[ "$hrc" -eq 1 ] || { echo "FAIL: spmd hangs without rank 2's dump: exit $hrc, expected 1"; bad=1; }
grep -Fxq -- "suspect: rank 2 (no dump; ranks 0,1,3 wait on it)" <<<"$report" ||
  { echo "FAIL: without its dump, rank 2 is not named the suspect"; bad=1; }
if grep -Eq -- "^suspect: rank [013] " <<<"$report"; then
  echo "FAIL: a rank waiting on rank 2 is blamed"; bad=1
fi

mkdir -p "$dir/empty"
out=$("$spmd" hangs "$dir/empty" 2>&1); erc=$?
echo "$out"
{ [ "$erc" -eq 2 ] && grep -q "InvalidArgument: dir: .* holds no flight_rank" <<<"$out"; } ||
  { echo "FAIL: an empty directory should be exit 2 naming it"; bad=1; }
mkdir -p "$dir/cut"
head -n 3 "$dir/dumps/flight_rank0.txt" >"$dir/cut/flight_rank0.txt"
out=$("$spmd" hangs "$dir/cut" 2>&1); erc=$?
echo "$out"
{ [ "$erc" -eq 2 ] && grep -q "InvalidArgument: .*/cut/flight_rank0.txt:3: the dump is cut off" <<<"$out"; } ||
  { echo "FAIL: a cut-off dump should be exit 2 naming the file and line"; bad=1; }
[ "$bad" -eq 0 ] && echo ok
exit "$bad"
