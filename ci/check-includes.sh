#!/usr/bin/env bash
# Enforces the include graph of docs/ARCHITECTURE.md: which top-level folder may include which.
#   rules -> (nothing else); reference -> rules; kernels -> rules;
#   runtime -> rules, kernels; checker -> reference, rules;
#   property_tests -> checker, runtime, reference, rules;
#   cli and bench -> everything.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [rules]="rules"
  [reference]="reference rules"
  [kernels]="kernels rules"
  [runtime]="runtime rules kernels"
  [checker]="checker reference rules"
  [property_tests]="property_tests checker runtime reference rules kernels"
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
[ $bad -eq 0 ] && echo "include graph: ok"
exit $bad
