#!/usr/bin/env bash
# spmd-train checkpoints on a real full filesystem, under mpirun -np 2:
#   1. on a tmpfs with room for one checkpoint but not two, `--save DIR --save-every 2`
#      saves step 2, then fails at step 4 with a message on every rank and exit non-zero,
#      leaving step 2 as it was and no temporary behind;
#   2. `--resume DIR` loads step 2 and continues: its losses equal the uninterrupted run's
#      and --verify (float64) holds it to 1e-9 of one process trained from step 0;
#   3. a flipped byte in a shard (the first, a middle and the last file; the unit test
#      train/checkpoint_test.cc flips every one) is refused naming the file, on every rank.
# Mounting a tmpfs needs root (CAP_SYS_ADMIN); without it the test is skipped (exit 77)
# saying so.
# Usage: checkpoint_tmpfs_test.sh MPIEXEC SPMD_TRAIN
set -uo pipefail
mpiexec=$1
train=$2
mpi=("$mpiexec" -np 2 --oversubscribe --mca pml ob1 --mca btl self,vader)
model=(--mesh dp=2 --zero 1 --layers 1 --width 8 --heads 2 --vocab 7 --seq 4 --batch 4 --dtype float64 --steps 4)

work=$(mktemp -d)
small=$work/small
mounted=0
cleanup() {
  if [[ $mounted == 1 ]]; then umount "$small"; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# One checkpoint's size on a tmpfs: its files' sizes, each rounded up to whole 4 KiB pages
# (what tmpfs charges), measured on a save into an ordinary directory.
"${mpi[@]}" "$train" "${model[@]}" --save "$work/probe" --save-every 2 --keep 1 > "$work/probe.log" 2>&1 ||
  { cat "$work/probe.log"; fail "the probe save failed"; }
one_kib=$(find "$work/probe/step-00000004" -type f -printf "%s\n" | awk '{ kib += 4 * int(($1 + 4095) / 4096) } END { print kib }')
size_kib=$(( one_kib * 3 / 2 ))
mkdir -p "$small"
if ! mount_error=$(mount -t tmpfs -o size=${size_kib}k tmpfs "$small" 2>&1); then
  echo "SKIP: cannot mount a ${size_kib} KiB tmpfs (needs root): $mount_error"
  exit 77
fi
mounted=1
echo "a checkpoint takes ${one_kib} KiB; tmpfs of ${size_kib} KiB"

# 1. The second save does not fit.
"${mpi[@]}" "$train" "${model[@]}" --save "$small/ckpt" --save-every 2 > "$work/full.log" 2>&1
code=$?
cat "$work/full.log"
[[ $code != 0 ]] || fail "the save onto a full tmpfs exited 0"
grep -q "^saved $small/ckpt/step-00000002$" "$work/full.log" || fail "step 2 was not saved"
for rank in 0 1; do
  grep -q "^spmd-train: rank $rank: InvalidArgument: checkpoint: .*No space left on device (rank [01], saving step 4; the checkpoints in $small/ckpt are unchanged)" "$work/full.log" ||
    fail "rank $rank printed no message naming the full disk"
done
if grep -q "saved $small/ckpt/step-00000004" "$work/full.log"; then fail "step 4 claimed saved"; fi
[[ "$(ls -A "$small/ckpt")" == "step-00000002" ]] || fail "left in the checkpoint root: $(ls -A "$small/ckpt")"

# 2. Resume from step 2: the same losses as the uninterrupted run, and 1e-9 of one process.
"${mpi[@]}" "$train" "${model[@]}" > "$work/whole.log" 2>&1 || { cat "$work/whole.log"; fail "the uninterrupted run failed"; }
"${mpi[@]}" "$train" "${model[@]}" --resume "$small/ckpt" --verify > "$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; fail "resume failed"; }
cat "$work/resume.log"
grep -q "^resumed from step 2 of $small/ckpt$" "$work/resume.log" || fail "did not resume from step 2"
losses() { grep -E "^step [0-9]+ loss" "$1" | sed -E 's/ tokens\/s.*//'; }
[[ "$(losses "$work/resume.log")" == "$(losses "$work/whole.log" | tail -n 2)" ]] ||
  fail "resumed losses differ: $(losses "$work/resume.log") vs $(losses "$work/whole.log")"
[[ $(losses "$work/resume.log" | wc -l) == 2 ]] || fail "resume did not train exactly steps 2 and 3"

# 3. A flipped byte in a shard is refused naming the file, on every rank.
cp -r "$small/ckpt" "$work/copy"
mapfile -t shards < <(ls "$work/copy/step-00000002"/*.bin | sort)
(( ${#shards[@]} > 10 )) || fail "only ${#shards[@]} shard files"
for file in "${shards[0]}" "${shards[${#shards[@]} / 2]}" "${shards[${#shards[@]} - 1]}"; do
  cp "$file" "$work/good.bin"
  byte=$(od -An -tu1 -j5 -N1 "$file" | tr -d ' ')
  printf "$(printf '\\%03o' $(( byte ^ 4 )))" | dd of="$file" bs=1 seek=5 count=1 conv=notrunc 2>/dev/null
  "${mpi[@]}" "$train" "${model[@]}" --resume "$work/copy" > "$work/flip.log" 2>&1 && fail "loaded $file with a flipped byte"
  for rank in 0 1; do
    grep -q "^spmd-train: rank $rank: InvalidArgument: checkpoint: $file: checksum .* is not the recorded" "$work/flip.log" ||
      { cat "$work/flip.log"; fail "rank $rank did not name $file"; }
  done
  cp "$work/good.bin" "$file"
done
"${mpi[@]}" "$train" "${model[@]}" --resume "$work/copy" > "$work/restored.log" 2>&1 ||
  { cat "$work/restored.log"; fail "the restored copy does not load"; }
echo "checkpoint tmpfs test: ok"
