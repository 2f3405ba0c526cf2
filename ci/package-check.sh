#!/usr/bin/env bash
# The C++ package end to end: installs build/ (already built by ci/build.sh; nothing is
# rebuilt) into a temporary prefix, then configures, builds and runs examples/cpp_consumer
# against it (find_package(spmdkit)), and runs the installed `spmd` once. Exits non-zero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/CMakeCache.txt ] || { echo "package-check: build/ is not configured (run ci/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install build --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
echo "package-check: installed $(grep -c Installing "$tmp/install.log") files into a temporary prefix"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S examples/cpp_consumer -B "$tmp/consumer" "${generator[@]}" \
      -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" \
  || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/consumer" -j "$(nproc)" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/consumer/consumer"
echo '{"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4],"dims_mapping":[0]}]}' \
  | "$tmp/prefix/bin/spmd" infer | tee "$tmp/infer.out"
grep -q '"outputs":\[{"dims_mapping":\[0\]' "$tmp/infer.out"
echo "package-check: ok"
