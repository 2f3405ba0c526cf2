#!/usr/bin/env bash
# Configures and builds everything into build/ (the CLI lands at build/bin/spmd).
# Extra arguments go to the CMake configure step, e.g. -DSPMD_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ -f build/CMakeCache.txt ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" build/CMakeCache.txt; then
  generator=()  # keep the generator an existing build directory was made with
fi
cmake -S . -B build "${generator[@]}" -DSPMD_WITH_CUDA="${SPMD_WITH_CUDA:-AUTO}" "$@"
cmake --build build -j "$(nproc)"
