#!/usr/bin/env bash
# spmd-train --attention under mpirun (registered by train/CMakeLists.txt): for each of
# dense, ulysses, ring and zigzag, on the host (--device cpu) and on simulated devices
# (--device sim), np 2 over the mesh sp=2, float64, 2 steps, --verify: exit 0 and a max
# relative difference of at most 1e-9 against one process. Then a bad --attention value,
# and ring on a mesh without an sp axis, exit 2 naming the flag.
set -uo pipefail
mpiexec=$1
train=$2
mpi=("$mpiexec" --oversubscribe --mca pml ob1 --mca btl self,vader)
fail() { echo "FAIL: $*"; exit 1; }

# 8 tokens: a multiple of 2 x sp for zigzag; 4 heads: a multiple of sp for Ulysses.
model=(--seq 8 --width 16 --heads 4 --vocab 13 --batch 2 --layers 2)
for device in cpu sim; do
  for attention in dense ulysses ring zigzag; do
    out=$("${mpi[@]}" -np 2 "$train" --device "$device" --mesh sp=2 --attention "$attention" \
      --dtype float64 --steps 2 --verify "${model[@]}" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || { echo "$out"; fail "--device $device --attention $attention --verify exited $rc"; }
    diff=$(sed -n 's/^max relative difference: //p' <<<"$out")
    [ -n "$diff" ] || { echo "$out"; fail "$device $attention: no max relative difference printed"; }
    awk -v d="$diff" 'BEGIN { exit !(d + 0 <= 1e-9) }' || fail "$device $attention: max relative difference $diff > 1e-9"
    echo "ok: --device $device --attention $attention (max relative difference $diff)"
  done
done

refused() {  # refused ARGS...: every rank exits 2 naming --attention
  local out rc
  out=$("${mpi[@]}" -np 2 "$train" --steps 1 "$@" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || { echo "$out"; fail "$* exited $rc, not 2"; }
  grep -q -- "--attention" <<<"$out" || { echo "$out"; fail "$*: the error does not name --attention"; }
  echo "ok: $* refused"
}
refused --mesh sp=2 --attention flash
refused --mesh dp=2 --attention ring
