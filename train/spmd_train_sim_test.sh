#!/usr/bin/env bash
# spmd-train --device sim under mpirun (registered by train/CMakeLists.txt):
#   1. np 4, dp=2,tp=2, ZeRO-3, SP, float64, 3 steps, --verify: exit 0, the run said it was on
#      a sim device, and "max relative difference" is at most 1e-9;
#   2. np 4, pp=2,dp=2, 1F1B, 2 micro-batches, --verify on sim: exit 0, difference <= 1e-9;
#   3. --device tpu: every rank exits 2 naming --device;
#   4. --device sim with --save or --data: refused naming the flag (exit 2).
set -uo pipefail
mpiexec=$1
train=$2
mpi=("$mpiexec" --oversubscribe --mca pml ob1 --mca btl self,vader)
fail() { echo "FAIL: $*"; exit 1; }

verified() {  # verified ARGS...: exit 0 on sim, and a max relative difference <= 1e-9
  local out rc diff
  out=$("${mpi[@]}" -np 4 "$train" --device sim --dtype float64 --steps 3 --seq 6 --width 12 --heads 3 \
        --vocab 13 --verify "$@" 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "--device sim $* --verify exited $rc"
  grep -q "^device: sim:0" <<<"$out" || fail "the run did not say it ran on sim:0"
  diff=$(sed -n 's/^max relative difference: //p' <<<"$out")
  [ -n "$diff" ] || fail "no max relative difference printed"
  awk -v d="$diff" 'BEGIN { exit !(d + 0 <= 1e-9) }' || fail "max relative difference $diff > 1e-9"
}
verified --mesh dp=2,tp=2 --zero 3 --sp --batch 6
verified --mesh pp=2,dp=2 --schedule 1f1b --micro-batches 2 --layers 4 --zero 1 --batch 5

refused() {  # refused FLAG ARGS...: exit 2 and a line naming FLAG
  local flag=$1
  shift
  local o
  o=$("${mpi[@]}" -np 2 "$train" "$@" --steps 1 2>&1)
  local r=$?
  [ $r -eq 2 ] || fail "$* exited $r, not 2: $o"
  grep -q -- "$flag" <<<"$o" || fail "$* did not name $flag: $o"
  echo "refused as expected: $*"
}
refused --device --device tpu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
refused --save --device sim --save "$dir/ck"
printf 'hello world, hello spmd\n%.0s' {1..20} >"$dir/data.txt"
refused --data --device sim --data "$dir/data.txt" --val-fraction 0
echo "ok"
