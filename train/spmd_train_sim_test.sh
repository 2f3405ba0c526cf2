#!/usr/bin/env bash
# spmd-train --device sim under mpirun (registered by train/CMakeLists.txt):
#   1. np 4, dp=2,tp=2, ZeRO-3, SP, float64, 3 steps, --verify (the default model): exit 0, the run said it was on
#      a sim device, and "max relative difference" is at most 1e-9;
#   2. np 4, pp=2,dp=2, 1F1B, 2 micro-batches, --verify on sim: exit 0, difference <= 1e-9;
#   3. a checkpoint saved on sim (dp=2,tp=2, ZeRO-1, SP, 2 steps) resumed on sim (dp=4,
#      ZeRO-3, to step 4) equals 4 uninterrupted steps of one process (--verify);
#   4. --device tpu, and --device cuda with no GPU visible: every rank exits 2 naming --device
#      (spmd-train-cuda, exec'd by spmd-train where built, says no usable GPU);
#   5. --data with validation on sim: --verify passes, and every step's loss, gradient norm
#      and validation loss print the same as on --device cpu;
#   6. np 2: dp=2 ZeRO-2, pp=2 with gpipe, tp=2 with SP in float32 (bound 1e-3); np 4: pp=2,dp=2
#      interleaved: --verify on sim passes;
#   7. np 8: dp=2,tp=2,pp=2 1F1B, dp=4,tp=2 ZeRO-3 with SP, dp=2,tp=2,sp=2 with ring attention:
#      --verify on sim passes (every strategy at np 2/4/8 in-process: train/device_proof_test.cc).
set -uo pipefail
mpiexec=$1
train=$2
# shellcheck disable=SC2054 # self,vader is one argument
mpi=("$mpiexec" --oversubscribe --mca pml ob1 --mca btl self,vader)
fail() { echo "FAIL: $*"; exit 1; }

NP=4       # verified's world size
BOUND=1e-9  # and its bound
DTYPE=float64
verified() {  # verified ARGS...: exit 0 on sim at np $NP, and a max relative difference <= $BOUND
  local out rc diff
  out=$("${mpi[@]}" -np "$NP" "$train" --device sim --dtype "$DTYPE" --steps 3 --verify "$@" 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "--device sim $* --verify exited $rc"
  grep -q "^device: sim:0" <<<"$out" || fail "the run did not say it ran on sim:0"
  diff=$(sed -n 's/^max relative difference: //p' <<<"$out")
  [ -n "$diff" ] || fail "no max relative difference printed"
  awk -v d="$diff" -v b="$BOUND" 'BEGIN { exit !(d + 0 <= b + 0) }' || fail "max relative difference $diff > $BOUND"
}
small=(--seq 6 --width 12 --heads 3 --vocab 13)
verified --mesh dp=2,tp=2 --zero 3 --sp  # the acceptance command, the default model
verified --mesh pp=2,dp=2 --schedule 1f1b --micro-batches 2 --layers 4 --zero 1 --batch 5 "${small[@]}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"${mpi[@]}" -np 4 "$train" --device sim --mesh dp=2,tp=2 --zero 1 --sp --dtype float64 --steps 2 --seq 6 \
  --width 12 --heads 3 --vocab 13 --batch 4 --save "$dir/ck" >/dev/null 2>&1 || fail "the save on sim failed"
verified --mesh dp=4 --zero 3 --batch 4 --steps 4 --resume "$dir/ck" "${small[@]}"

refused() {  # refused FLAG ARGS...: exit 2 and a line naming FLAG
  local flag=$1
  shift
  local o
  o=$("${mpi[@]}" -np 2 "$train" "$@" --steps 1 2>&1)
  local r=$?
  [ $r -eq 2 ] || fail "$* exited $r, not 2: $o"
  grep -q -- "$flag" <<<"$o" || fail "$* did not name $flag: $o"
  echo "refused as expected: $*"
  last=$o
}
refused --device --device tpu
# --device cuda with no GPU visible (CUDA_VISIBLE_DEVICES empty, so a GPU machine refuses
# too): where spmd-train-cuda was built next to spmd-train, spmd-train execs it and it finds
# no usable GPU; elsewhere spmd-train says there is no spmd-train-cuda.
CUDA_VISIBLE_DEVICES="" refused --device --device cuda
if [ -x "$(dirname "$train")/spmd-train-cuda" ]; then
  grep -q "Unsupported: --device: cuda: no usable GPU" <<<"$last" || fail "spmd-train-cuda did not refuse: $last"
else
  grep -q "InvalidArgument: --device: cuda: no spmd-train-cuda" <<<"$last" || fail "no spmd-train-cuda, yet: $last"
fi
for i in $(seq 1 40); do echo "the quick brown fox jumps over the lazy dog $i times"; done >"$dir/data.txt"
data=(--data "$dir/data.txt" --val-fraction 0.2 --eval-every 1 --val-batches 2 --batch 4 --vocab 256)
verified --mesh dp=2,tp=2 --zero 2 --sp "${small[@]}" "${data[@]}"
curve() {  # curve DEVICE: the step lines without the timing
  "${mpi[@]}" -np 4 "$train" --device "$1" --mesh dp=2,tp=2 --zero 2 --sp --dtype float64 --steps 3 --seq 6 \
    --width 12 --heads 3 "${data[@]}" 2>&1 | grep '^step' | sed 's/tokens\/s [0-9.]* //'
}
sim_curve=$(curve sim)
cpu_curve=$(curve cpu)
echo "$sim_curve"
grep -q val_loss <<<"$sim_curve" || fail "no validation loss on sim"
[ "$sim_curve" = "$cpu_curve" ] || fail "--data on sim printed another curve than on cpu: $cpu_curve"
verified --mesh pp=2,dp=2 --schedule interleaved --micro-batches 2 --layers 4 --zero 1 --batch 5 "${small[@]}"
NP=2
verified --mesh dp=2 --zero 2 --batch 3 "${small[@]}"
verified --mesh pp=2 --schedule gpipe --micro-batches 2 --layers 2 --batch 4 "${small[@]}"
BOUND=1e-3 DTYPE=float32 verified --mesh tp=2 --sp --batch 4 "${small[@]}"
NP=8
verified --mesh dp=2,tp=2,pp=2 --zero 1 --schedule 1f1b --micro-batches 2 --layers 2 --batch 4 "${small[@]}"
verified --mesh dp=4,tp=2 --zero 3 --sp --batch 4 "${small[@]}"
verified --mesh dp=2,tp=2,sp=2 --attention ring --seq 8 --heads 4 --batch 4 --width 12 --vocab 13
echo "ok"
