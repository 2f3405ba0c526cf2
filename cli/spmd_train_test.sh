#!/usr/bin/env bash
# spmd-train end to end (modes):
#   diverge    --lr 1e30 under mpirun np 2: every rank stops at the same step naming it
#              ("step N: loss is nan"), the job exits non-zero, no rank hangs
#   launch     two processes started with SPMD_RANK, SPMD_WORLD_SIZE and SPMD_RENDEZVOUS
#              (no mpirun) train as one dp=2 job: the same losses as mpirun -np 2 on the
#              same flags; SPMD_WORLD_SIZE=2 with --mesh dp=4 exits 2 naming --mesh
#   data       --data on a small generated text, mpirun np 2: the training loss falls,
#              the validation loss is in the log and the CSV, --plot writes the SVG; a
#              uint16 .bin file trains with the vocabulary its largest token + 1; files
#              that cannot be trained on exit 2 naming --data
# Usage: spmd_train_test.sh MPIEXEC SPMD_TRAIN MODE
set -u
mpiexec=$1 train=$2 mode=$3
mpi=("$mpiexec" --oversubscribe --mca pml ob1 --mca btl self,vader)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bad=0
fail() { echo "FAIL: $*"; bad=1; }
small=(--layers 1 --width 8 --heads 2 --seq 8 --batch 4)
case "$mode" in
  diverge)
    out=$(timeout --kill-after=5 120 "${mpi[@]}" -np 2 "$train" "${small[@]}" --vocab 16 --lr 1e30 --steps 20 2>&1); rc=$?
    echo "$out"
    { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; } || fail "exit $rc: expected the job to fail on its own"
    line0=$(grep -o "spmd-train: rank 0: InvalidArgument: step [0-9]*: \(loss\|gradient norm\) is \(nan\|inf\|-inf\)" <<<"$out")
    line1=$(grep -o "spmd-train: rank 1: InvalidArgument: step [0-9]*: \(loss\|gradient norm\) is \(nan\|inf\|-inf\)" <<<"$out")
    [ -n "$line0" ] || fail "rank 0 does not name the step"
    [ "${line0#*rank 0}" = "${line1#*rank 1}" ] || fail "the ranks stopped differently: '$line0' / '$line1'"
    step=$(grep -o "step [0-9]*:" <<<"$line0" | grep -o "[0-9]*")
    # Every step before it was trained and printed; none after.
    [ -n "$step" ] && [ "$(grep -c "^step [0-9]* loss" <<<"$out")" -eq "$step" ] || fail "step lines do not end at step $step"
    ;;
  launch)
    flags=("${small[@]}" --vocab 16 --steps 4 --dtype float64)
    ref=$(timeout --kill-after=5 120 "${mpi[@]}" -np 2 "$train" "${flags[@]}" 2>&1) || fail "mpirun run exit $?"
    mkdir "$dir/rv" "$dir/bad"
    for r in 1 0; do
      SPMD_RANK=$r SPMD_WORLD_SIZE=2 SPMD_RENDEZVOUS=$dir/rv SPMD_RENDEZVOUS_TIMEOUT_S=30 \
        timeout --kill-after=5 120 "$train" "${flags[@]}" >"$dir/rv$r.log" 2>&1 &
      pids[$r]=$!
    done
    for r in 0 1; do wait "${pids[$r]}" || fail "rendezvous rank $r exited $?"; done
    echo "--- mpirun"; echo "$ref"; echo "--- rendezvous"; cat "$dir/rv0.log" "$dir/rv1.log"
    losses() { grep -o "^step [0-9]* loss [^ ]*" "$@"; }
    [ "$(losses <<<"$ref" | wc -l)" -eq 4 ] || fail "mpirun did not print 4 steps"
    [ "$(losses <<<"$ref")" = "$(losses "$dir/rv0.log")" ] || fail "the rendezvous job's losses differ from mpirun's"
    grep -q "dp=2 zero=0" "$dir/rv0.log" || fail "the rendezvous job is not dp=2"
    [ ! -s "$dir/rv1.log" ] || ! grep -q "^step" "$dir/rv1.log" || fail "rank 1 printed steps"
    for r in 1 0; do
      SPMD_RANK=$r SPMD_WORLD_SIZE=2 SPMD_RENDEZVOUS=$dir/bad SPMD_RENDEZVOUS_TIMEOUT_S=30 \
        timeout --kill-after=5 60 "$train" "${flags[@]}" --mesh dp=4 >"$dir/bad$r.log" 2>&1 &
      pids[$r]=$!
    done
    for r in 0 1; do
      wait "${pids[$r]}"; rc=$?
      [ "$rc" -eq 2 ] || fail "rank $r with --mesh dp=4 in a world of 2 exited $rc, not 2"
      grep -q "rank $r: InvalidArgument: --mesh: dp=4 has 4 ranks; SPMD_WORLD_SIZE is 2" "$dir/bad$r.log" ||
        fail "rank $r does not name --mesh and the world size"
    done
    cat "$dir/bad0.log" "$dir/bad1.log"
    ;;
  data)
    # A small text with structure to learn: numbered lines of a few words.
    for i in $(seq 1 400); do echo "line $((i % 7)) says the $((i % 3)) cat sat on mat $((i % 5))."; done >"$dir/text.txt"
    out=$(timeout --kill-after=5 200 "${mpi[@]}" -np 2 "$train" --layers 1 --width 16 --heads 2 --seq 16 --batch 8 \
          --lr 1e-2 --steps 30 --eval-every 10 --val-batches 2 --data "$dir/text.txt" \
          --csv "$dir/loss.csv" --plot "$dir/loss.svg" 2>&1) || fail "exit $?"
    echo "$out"
    grep -q "data: $dir/text.txt (bytes): " <<<"$out" || fail "no data line"
    grep -q "vocab=256" <<<"$out" || fail "bytes do not default to vocab 256"
    first=$(grep -o "^step 0 loss [^ ]*" <<<"$out" | awk '{print $4}')
    last=$(grep -o "^step 29 loss [^ ]*" <<<"$out" | awk '{print $4}')
    val=$(grep -o "^step 29 loss .* val_loss [^ ]*" <<<"$out" | awk '{print $NF}')
    echo "first $first last $last val $val"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.5) }' || fail "the loss did not fall by 1.5 ($first -> $last)"
    awk -v v="$val" 'BEGIN { exit !(v > 0 && v < 4.5) }' || fail "validation loss '$val' missing or not below 4.5"
    [ "$(grep -c "val_loss" <<<"$out")" -eq 3 ] || fail "validation loss not at steps 9, 19, 29"
    head -1 "$dir/loss.csv" | grep -q ",val_loss$" || fail "no val_loss column"
    [ "$(awk -F, 'NR > 1 && $7 != ""' "$dir/loss.csv" | wc -l)" -eq 3 ] || fail "the CSV lacks 3 validation losses"
    [ "$(grep -c "<polyline" "$dir/loss.svg")" -eq 2 ] || fail "the SVG lacks the two curves"
    grep -q "uniform: ln(vocab) = 5.55" "$dir/loss.svg" || fail "the SVG lacks the baseline"
    # uint16 tokens (a .bin name): little-endian, tokens up to 299, the vocabulary their largest + 1.
    LC_ALL=C awk 'BEGIN { for (i = 0; i < 3000; ++i) { t = (i * 7) % 300; printf "%c%c", t % 256, int(t / 256) } }' >"$dir/tokens.bin"
    out=$(timeout --kill-after=5 120 "${mpi[@]}" -np 2 "$train" "${small[@]}" --steps 3 --data "$dir/tokens.bin" 2>&1) || fail "uint16: exit $?"
    echo "$out"
    grep -q "data: $dir/tokens.bin (uint16): 3000 tokens, 2700 for training, 300 for validation" <<<"$out" || fail "uint16: no data line"
    grep -q "vocab=300 " <<<"$out" || fail "uint16: the vocabulary is not the largest token + 1"
    # Files that cannot be trained on.
    : >"$dir/empty.txt"
    printf 'abc' >"$dir/odd.bin"
    printf 'abcdefghij' >"$dir/short.txt"
    for c in "empty.txt:is empty" "odd.bin:not a whole number of uint16 tokens" "short.txt:too short for one sequence" \
             "text.txt --vocab 100:not below --vocab 100" "tokens.bin --vocab 299:holds token 299, not below --vocab 299"; do
      file=${c%%:*} want=${c#*:}
      # shellcheck disable=SC2086
      out=$(timeout --kill-after=5 60 "${mpi[@]}" -np 2 "$train" --seq 16 --data "$dir"/$file 2>&1); rc=$?
      [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "$file: exit $rc"
      for r in 0 1; do
        grep -q "spmd-train: rank $r: InvalidArgument: --data: .*$want" <<<"$out" || { echo "$out"; fail "$file: rank $r does not say '$want'"; }
      done
    done
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
[ "$bad" -eq 0 ] && echo ok
exit "$bad"
