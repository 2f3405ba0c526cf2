#!/usr/bin/env bash
# Enforces the include graph of docs/ARCHITECTURE.md: which top-level folder may include which.
#   rules -> (nothing else; inside it model <- reshard <- engine <- ops);
#   reference -> rules; kernels -> rules;
#   runtime -> rules, kernels; checker -> reference, rules;
#   io (the JSON side) -> rules, checker, runtime; train -> rules, kernels, runtime;
#   property_tests -> everything but cli; cli, bench and fuzz -> everything;
#   examples (programs using the installed package) and python (the extension) -> everything.
# Every top-level folder with sources is listed: a new layer must be added here. Only io/
# may include nlohmann/json.hpp among the libraries (their tests may too). Inside runtime/,
# its folders have their own graph (below), and so do rules/'s.
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
# Inside runtime/ (docs/ARCHITECTURE.md "Inside runtime/"): the communicators (comm/) and
# the flight recorder (diagnostics/: it records the communicator's calls, and the
# communicator's call path feeds it) include each other and nothing else of the runtime;
# DistTensor, the executor and Dispatch (exec/) build on comm/. testing/ holds test support
# (random cases, the simulated NCCL and devices, the MPI test main): only tests include it,
# and no source outside it may leave this graph. Tests (*_test.cc) in comm/ may also use
# exec/ (a staged communicator runs Dispatch).
declare -A runtime_allowed=(
  [comm]="comm diagnostics"
  [diagnostics]="diagnostics comm"
  [exec]="exec comm"
  [testing]="testing comm exec diagnostics"
)
for sub in runtime/*/; do
  sub=${sub%/}; sub=${sub#runtime/}
  if [ -z "${runtime_allowed[$sub]+x}" ]; then
    echo "runtime/$sub/: a runtime folder the include graph does not know"
    bad=1
    continue
  fi
  while IFS=: read -r file line include; do
    target=$(sed -E 's/.*#include *"runtime\/([^/"]+)\/.*/\1/' <<<"$include")
    case "$target" in testing | exec) [[ "$file" == *_test.cc ]] && continue ;; esac
    if ! grep -qw "$target" <<<"${runtime_allowed[$sub]}"; then
      echo "$file:$line: runtime/$sub/ may not include runtime/$target/ ($include)"
      bad=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' '#include *"runtime/' "runtime/$sub" || true)
done
# Headers directly in runtime/ would escape the sub-graph.
if [ -n "$(find runtime -maxdepth 1 \( -name '*.h' -o -name '*.cc' \) | head -1)" ]; then
  echo "runtime/: sources belong in one of its folders ($(find runtime -maxdepth 1 -name '*.h' -o -maxdepth 1 -name '*.cc' | head -3 | tr '\n' ' '))"
  bad=1
fi
# Test support is for tests: outside runtime/testing/, only tests (*_test.cc, *_test_util.h,
# property_tests/) include it.
while IFS=: read -r file line include; do
  case "$file" in
    runtime/testing/* | property_tests/* | *_test.cc | *_test_util.h) continue ;;
  esac
  echo "$file:$line: only tests may include runtime/testing/ ($include)"
  bad=1
done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' '#include *"runtime/testing/' \
           rules reference kernels runtime checker io train cli bench fuzz examples python 2>/dev/null || true)
# Every folder with C++ sources must be a known layer (else it would escape the check).
for dir in */; do
  dir=${dir%/}
  case "$dir" in build | build-*) continue ;; esac  # build directories (build-asan/, build-fuzz/)
  if [ -z "${allowed[$dir]+x}" ] && [ -n "$(find "$dir" -name '*.cc' -o -name '*.h' | head -1)" ]; then
    echo "$dir/: a folder of sources the include graph does not know"
    bad=1
  fi
done
# Inside rules/: model -> (nothing else); reshard (the planner and its prices) -> model;
# engine -> reshard, model (answers are priced); ops -> engine, reshard, model (tests may
# include anything in rules/).
declare -A rules_allowed=(
  [model]="model"
  [reshard]="reshard model"
  [engine]="engine reshard model"
  [ops]="ops engine reshard model"
)
for sub in "${!rules_allowed[@]}"; do
  while IFS=: read -r file line include; do
    case "$file" in *_test.cc | *_test_util.h) continue ;; esac
    target=$(sed -E 's/.*#include *"rules\/([^/"]+)\/.*/\1/' <<<"$include")
    if [ "$target" = "$include" ]; then
      echo "$file:$line: $include is not in a folder of rules/"
      bad=1
    elif ! grep -qw "$target" <<<"${rules_allowed[$sub]}"; then
      echo "$file:$line: rules/$sub/ may not include rules/$target/ ($include)"
      bad=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' '#include *"rules/' "rules/$sub" || true)
done
for dir in rules/*/; do
  dir=$(basename "$dir")
  [ -n "${rules_allowed[$dir]+x}" ] || { echo "rules/$dir/: a rules folder the include graph does not know"; bad=1; }
done
if [ -n "$(find rules -maxdepth 1 \( -name '*.cc' -o -name '*.h' \) | head -1)" ]; then
  echo "rules/: sources belong in rules/model, reshard, engine or ops: $(find rules -maxdepth 1 \( -name '*.cc' -o -name '*.h' \) | tr '\n' ' ')"
  bad=1
fi
[ $bad -eq 0 ] && echo "include graph: ok"
exit $bad
