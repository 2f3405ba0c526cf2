#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, -DSPMD_FUZZ=ON, clang, ASan+UBSan) into build-fuzz/ and
# runs each over its seed corpus fuzz/corpus/<target>/ for FUZZ_SECONDS seconds (default 10:
# the smoke run of CI; 0: build only; docs/FUZZING.md has the long runs). New inputs go to a scratch folder,
# not into the repository. A crash, a sanitizer report, an input slower than FUZZ_TIMEOUT
# seconds (default 10) or above 2 GiB of memory is a finding: the run fails, and libFuzzer
# leaves the input in build-fuzz/findings/. Usage: ci/fuzz.sh [TARGET...] (default: all five).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-10}"
timeout="${FUZZ_TIMEOUT:-10}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(infer check_claim check_case explain plan)
start=$(date +%s)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ -f build-fuzz/CMakeCache.txt ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" build-fuzz/CMakeCache.txt; then
  generator=()  # keep the generator an existing build directory was made with
fi
cmake -S . -B build-fuzz "${generator[@]}" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" \
  -DSPMD_FUZZ=ON -DSPMD_BUILD_TESTS=OFF -DSPMD_BUILD_BENCHMARKS=OFF -DSPMD_WITH_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
built=$(date +%s)
if [ "$seconds" -le 0 ]; then
  echo "fuzz: built in $((built - start)) s (FUZZ_SECONDS=$seconds: no run)"
  exit 0
fi
# shellcheck source=ci/sanitizer-env.sh
source ci/sanitizer-env.sh
mkdir -p build-fuzz/findings
status=0
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  echo "fuzz: $t for ${seconds} s over fuzz/corpus/$t"
  if ! build-fuzz/bin/fuzz_"$t" "$scratch" "fuzz/corpus/$t" -seed=1 -max_total_time="$seconds" \
       -timeout="$timeout" -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=4096 \
       -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$t-" \
       > "build-fuzz/findings/$t.log" 2>&1; then
    echo "fuzz: $t FOUND a failing input (build-fuzz/findings/$t-*):"
    tail -n 40 "build-fuzz/findings/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "build-fuzz/findings/$t.log" | tr '\n' ' '
    echo
  fi
  rm -rf "$scratch"
done
end=$(date +%s)
echo "fuzz: build $((built - start)) s, runs $((end - built)) s"
exit $status
