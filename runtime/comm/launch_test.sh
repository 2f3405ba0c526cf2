#!/usr/bin/env bash
# Launch and init end to end (runtime/comm/launch.h, launch_demo):
#   mpirun      np 4, mesh dp=2,tp=2: every rank gets the world and its dp group
#   mismatch    np 4 with rank 2 asking for dp=4 (mpirun's MPMD form): every rank prints
#               the same typed error naming ranks 0,1,3 and rank 2; the job exits non-zero
#               on its own (no hang, no timeout)
#   rendezvous  four processes started without mpirun (SPMD_RANK, SPMD_WORLD_SIZE,
#               SPMD_RENDEZVOUS), in the order 3,1,2,0, meet and run; then three of four:
#               every one ends within the rendezvous timeout (3 s) naming how many arrived
# Usage: launch_test.sh MPIEXEC LAUNCH_DEMO MODE
set -u
mpiexec=$1 demo=$2 mode=$3
flags=(--oversubscribe --mca pml ob1 --mca btl self,vader)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }
case "$mode" in
  mpirun)
    out=$(timeout --kill-after=5 40 "$mpiexec" -np 4 "${flags[@]}" "$demo" dp=2,tp=2 2>&1); rc=$?
    echo "$out"
    [ "$rc" -eq 0 ] || fail "exit $rc"
    for r in 0 2; do grep -q "rank $r of 4 (mpirun): mesh dp=2,tp=2: world sum 6, axis dp group \[0,2\] sum 2" <<<"$out" || fail "rank $r"; done
    for r in 1 3; do grep -q "rank $r of 4 (mpirun): mesh dp=2,tp=2: world sum 6, axis dp group \[1,3\] sum 4" <<<"$out" || fail "rank $r"; done
    ;;
  mismatch)
    out=$(timeout --kill-after=5 40 "$mpiexec" "${flags[@]}" -np 2 "$demo" dp=2,tp=2 : -np 1 "$demo" dp=4 \
          : -np 1 "$demo" dp=2,tp=2 2>&1); rc=$?
    echo "$out"
    { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; } || fail "exit $rc: expected the job to fail on its own"
    for r in 0 1 2 3; do
      grep -q "spmd: rank $r: InvalidArgument: mesh: the ranks disagree on the mesh: ranks 0,1,3 ask for 'dp=2,tp=2'; rank 2 asks for 'dp=4'" <<<"$out" ||
        fail "rank $r does not name the ranks that disagree"
    done
    ;;
  rendezvous)
    mkdir "$dir/full" "$dir/short"
    pids=()
    for r in 3 1 2 0; do
      SPMD_RANK=$r SPMD_WORLD_SIZE=4 SPMD_RENDEZVOUS=$dir/full SPMD_RENDEZVOUS_TIMEOUT_S=20 \
        timeout --kill-after=5 40 "$demo" dp=2,tp=2 >"$dir/full$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail "a process of the full world exited $?"; done
    cat "$dir"/full?.log
    for r in 0 2; do grep -q "rank $r of 4 (rendezvous): mesh dp=2,tp=2: world sum 6, axis dp group \[0,2\] sum 2" "$dir/full$r.log" || fail "rank $r"; done
    for r in 1 3; do grep -q "rank $r of 4 (rendezvous): mesh dp=2,tp=2: world sum 6, axis dp group \[1,3\] sum 4" "$dir/full$r.log" || fail "rank $r"; done
    pids=()
    start=$(date +%s)
    for r in 0 1 3; do  # rank 2 never comes
      SPMD_RANK=$r SPMD_WORLD_SIZE=4 SPMD_RENDEZVOUS=$dir/short SPMD_RENDEZVOUS_TIMEOUT_S=3 \
        timeout --kill-after=5 40 "$demo" dp=2,tp=2 >"$dir/short$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do
      wait "$p"; rc=$?
      { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; } || fail "a process waiting for rank 2 exited $rc"
    done
    cat "$dir"/short?.log
    echo "--- three of four ended after $(( $(date +%s) - start )) s"
    for r in 0 1; do
      grep -q "spmd: rank $r: the rendezvous in .* timed out after 3 s waiting for rank 2 to connect: 2 of 4 ranks had connected" "$dir/short$r.log" ||
        fail "rank $r does not name the rank it waited for and how many arrived"
    done
    grep -q "spmd: rank 3: the rendezvous in .* timed out after 3 s waiting for rank 2 to join: 1 of 4 ranks had connected" "$dir/short3.log" ||
      fail "rank 3 does not name the rank it waited for"
    if pgrep -f "ompi-server --no-daemonize -r $dir/" >/dev/null; then fail "ompi-server left running"; fi
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
[ "$bad" -eq 0 ] && echo ok
exit "$bad"
