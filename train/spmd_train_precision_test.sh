#!/usr/bin/env bash
# spmd-train --precision under mpirun np 2 (registered by train/CMakeLists.txt):
#   1. bf16-mixed on dp=2 ZeRO-2 and fp16-mixed on tp=2 with SP, --verify: exit 0 and the
#      verify line ends in "ok" (losses and parameters within docs/TRAINING.md's bounds);
#   2. fp16-mixed from a loss scale of 2^40: float16 overflows, the first steps are skipped,
#      each step line says so and the summary counts them;
#   3. bad uses refused on every rank with exit 2 naming the flag: an unknown precision,
#      --dtype float64 with a mixed precision, a loss scale not a power of two, --loss-scale
#      without fp16-mixed, a mixed precision with a pp axis.
set -uo pipefail
mpiexec=$1
train=$2
mpi=("$mpiexec" -np 2 --oversubscribe --mca pml ob1 --mca btl self,vader)
fail() { echo "FAIL: $*"; exit 1; }
small=(--steps 6 --seq 8 --width 16 --heads 2 --vocab 32 --batch 4)

verified() {  # verified ARGS...: exit 0 and "... : ok"
  local out rc
  out=$("${mpi[@]}" "$train" "${small[@]}" --verify "$@" 2>&1)
  rc=$?
  echo "$out" | grep -v '^step'
  [ $rc -eq 0 ] || fail "$* --verify exited $rc"
  grep -q '^mixed precision .*: ok$' <<<"$out" || fail "$*: no passing mixed precision verify line"
}
verified --mesh dp=2 --zero 2 --precision bf16-mixed
verified --mesh tp=2 --sp --precision fp16-mixed

out=$("${mpi[@]}" "$train" "${small[@]}" --mesh dp=2 --precision fp16-mixed --loss-scale 1099511627776 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "the run from a loss scale of 2^40 exited $rc"
grep -q '^step 0 .* skipped (loss scale 1.09951e+12)$' <<<"$out" || fail "step 0 was not skipped at 2^40"
n=$(grep -c ' skipped (loss scale' <<<"$out")
grep -q "^precision fp16-mixed: .*; $n steps skipped, loss scale " <<<"$out" || fail "the summary does not count $n skipped steps"

refused() {  # refused FLAG ARGS...: exit 2 and a line naming FLAG
  local flag=$1
  shift
  local o r
  o=$("${mpi[@]}" "$train" "$@" --steps 1 2>&1)
  r=$?
  [ $r -eq 2 ] || fail "$* exited $r, not 2: $o"
  grep -q -- "$flag" <<<"$o" || fail "$* did not name $flag: $o"
  echo "refused as expected: $*"
}
refused --precision --precision fp8
refused --precision --precision bf16-mixed --dtype float64
refused --loss-scale --precision fp16-mixed --loss-scale 3
refused --loss-scale --precision bf16-mixed --loss-scale 1024
refused --precision --mesh pp=2 --precision bf16-mixed
echo "spmd-train --precision: ok"
