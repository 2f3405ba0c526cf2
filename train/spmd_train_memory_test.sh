#!/usr/bin/env bash
# spmd-train --recompute and --offload under mpirun np 2 (registered by train/CMakeLists.txt):
#   1. --device sim, dp=2, ZeRO-3, --offload params --recompute, float64, --verify: exit 0, a
#      max relative difference <= 1e-9, and the summary prints the activation peak
#      (recompute on), the offload line and the device memory line;
#   2. the same run's step lines (loss, gradient norm) print the same without either flag;
#   3. --recompute on cpu with a pp axis: exit 0 and --verify passes;
#   4. refused on every rank with exit 2 naming --offload: on cpu, with pp, params without
#      ZeRO-3, an unknown kind.
set -uo pipefail
mpiexec=$1
train=$2
mpi=("$mpiexec" --oversubscribe --mca pml ob1 --mca btl self,vader -np 2)
fail() { echo "FAIL: $*"; exit 1; }
small=(--seq 6 --width 12 --heads 3 --vocab 13 --batch 4 --dtype float64 --steps 2)

out=$("${mpi[@]}" "$train" --device sim --mesh dp=2 --zero 3 --offload params --recompute --verify "${small[@]}" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "--offload params --recompute --verify exited $rc"
diff=$(sed -n 's/^max relative difference: //p' <<<"$out")
awk -v d="$diff" 'BEGIN { exit !(d != "" && d + 0 <= 1e-9) }' || fail "max relative difference '$diff'"
grep -q "^activations (rank 0): peak [0-9]* bytes (recompute on)" <<<"$out" || fail "no activation line"
grep -q "^offload (rank 0): on the host between steps: optimizer states [1-9][0-9]* bytes, parameters [1-9][0-9]* bytes" \
  <<<"$out" || fail "no offload line"
grep -q "^device memory (rank 0): peak [1-9][0-9]* bytes, in use between steps 0 bytes" <<<"$out" ||
  fail "no device memory line, or parameters and states left on the device"

steps() { grep '^step' <<<"$1" | sed -E 's/ tokens\/s [0-9.]+//; s/ bytes sent .*//'; }
plain=$("${mpi[@]}" "$train" --device sim --mesh dp=2 --zero 3 "${small[@]}" 2>&1) || fail "the plain run failed"
[ "$(steps "$out")" = "$(steps "$plain")" ] || fail "step lines differ: $(steps "$out") vs $(steps "$plain")"

out=$("${mpi[@]}" "$train" --mesh pp=2 --layers 4 --micro-batches 2 --recompute --verify "${small[@]}" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "pp --recompute --verify exited $rc"

refused() {  # refused ARGS...: exit 2 and rank 0 and rank 1 name --offload
  local o r
  o=$("${mpi[@]}" "$train" --steps 1 "$@" 2>&1)
  r=$?
  [ $r -eq 2 ] || fail "$* exited $r, not 2: $o"
  for rank in 0 1; do
    grep -q -- "rank $rank: .*--offload" <<<"$o" || fail "$*: rank $rank did not name --offload: $o"
  done
  echo "refused as expected: $*"
}
refused --offload optimizer
refused --device sim --mesh pp=2 --offload optimizer
refused --device sim --offload params --zero 2
refused --device sim --offload disk
echo "ok"
