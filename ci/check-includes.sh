#!/usr/bin/env bash
# Enforces the include graph of docs/ARCHITECTURE.md: which top-level folder may include which.
#   rules -> (nothing else); reference -> rules; kernels -> rules;
#   runtime -> rules, kernels; checker -> reference, rules;
#   io (the JSON side) -> rules, checker, runtime; train -> rules, kernels, runtime;
#   property_tests -> everything but cli; cli, bench and fuzz -> everything;
#   examples (programs using the installed package) and python (the extension) -> everything.
# Every top-level folder with sources is listed: a new layer must be added here. Only io/
# may include nlohmann/json.hpp among the libraries (their tests may too).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [rules]="rules"
  [reference]="reference rules"
  [kernels]="kernels rules"
  [runtime]="runtime rules kernels"
  [checker]="checker reference rules"
  [io]="io rules checker runtime"
  [train]="train runtime rules kernels"
  [property_tests]="property_tests train io checker runtime reference rules kernels"
  [cli]="cli train io checker runtime reference rules kernels"
  [bench]="bench train io checker runtime reference rules kernels"
  [fuzz]="fuzz cli train io checker runtime reference rules kernels"
  [examples]="cli train io checker runtime reference rules kernels"
  [python]="python cli train io checker runtime reference rules kernels"
)
bad=0
for layer in "${!allowed[@]}"; do
  [ -d "$layer" ] || continue
  while IFS=: read -r file line include; do
    target=$(sed -E 's/.*#include *"([^/"]+)\/.*/\1/' <<<"$include")
    [ "$target" = "$include" ] && continue  # not a project include
    [ -d "$target" ] || continue
    if ! grep -qw "$target" <<<"${allowed[$layer]}"; then
      echo "$file:$line: $layer/ may not include $target/ ($include)"
      bad=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' '#include *"' "$layer" || true)
done
# JSON lives in io/: the other libraries' sources (tests aside) do not include nlohmann.
while IFS=: read -r file line include; do
  case "$file" in
    io/* | cli/* | bench/* | property_tests/* | golden/* | *_test.cc) continue ;;
  esac
  echo "$file:$line: only io/ may include nlohmann/json ($include)"
  bad=1
done < <(grep -rn --include='*.h' --include='*.cc' '#include *<nlohmann/' \
           rules reference kernels runtime checker 2>/dev/null || true)
# Every folder with C++ sources must be a known layer (else it would escape the check).
for dir in */; do
  dir=${dir%/}
  case "$dir" in build | build-*) continue ;; esac  # build directories (build-asan/, build-fuzz/)
  if [ -z "${allowed[$dir]+x}" ] && [ -n "$(find "$dir" -name '*.cc' -o -name '*.h' | head -1)" ]; then
    echo "$dir/: a folder of sources the include graph does not know"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "include graph: ok"
exit $bad
