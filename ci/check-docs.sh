#!/usr/bin/env bash
# Keeps the docs self-contained and true to the registry. Fails when:
# - README.md or docs/ point outside the repository (a `shared/` path), or any file does;
# - a doc or a code comment cites an issue by number (a reader of the repository cannot
#   see the tracker; say what was meant instead);
# - docs/SEMANTICS.md's op table (section 7) misses an op of rules/engine/op_list.h;
# - a `§N` or `§N.M` anywhere names a section docs/SEMANTICS.md does not have;
# - a file names an upper-case .md file the repository does not have;
# - an attrs column of docs/OPS.md or docs/SEMANTICS.md differs from the declarations
#   (`spmd ops --markdown`), or one of them has no attrs cell for an op.
# Usage: check-docs.sh [ROOT [SPMD]] (ROOT: default the repository this script is in; SPMD:
# the spmd binary, default $SPMD or ROOT/build/bin/spmd).
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
cd "$root"
bad=0
fail() { echo "check-docs: $*"; bad=1; }

# Every text file of the repository, build outputs and git data excluded.
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  find . \( -name .git -o -name 'build*' -o -name .cache -o -name .gpu-carry \) -prune -o -type f \
    \( -name '*.md' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \
       -o -name '*.sh' -o -name '*.py' -o -name '*.txt' -o -name '*.cmake' -o -name '*.jsonl' \) \
    -print0)

# The patterns are spelled so that this script does not match itself.
shared_pattern='(\.\./|/work/)shar[e]d/|shar[e]d/docs/'
issue_pattern='\bi[s]sues? *#?[0-9]+|\bi[s]sue #|the i[s]sue'"'"'s (example|list)|\(i[s]sue[:)]'

if out=$(grep -nEI "$shared_pattern" "${files[@]}"); then
  fail "paths outside the repository (the repository's own docs/ are the reference):"
  echo "$out"
fi
if out=$(grep -niEI "$issue_pattern" "${files[@]}"); then
  fail "issue numbers cited (say what was meant instead):"
  echo "$out"
fi

semantics=docs/SEMANTICS.md
if [ ! -f "$semantics" ]; then
  fail "$semantics is missing"
else
  # The first column of every table row of section 7, split on commas.
  listed=$(awk '/^## 7\./ {in7 = 1; next} /^## / {in7 = 0} in7 && /^\|/ {print}' "$semantics" |
           cut -d'|' -f2 | tr ',' '\n' | sed -E 's/^ +| +$//g' | sort -u)
  for op in $(grep -ohE '^ *X\([a-z0-9_]+\)' rules/engine/*_list.h | sed -E 's/^ *X\((.*)\)/\1/'); do
    grep -qxF "$op" <<<"$listed" || fail "$semantics section 7 has no row for the op '$op'"
  done
  # Section references: §N needs '## N.', §N.M needs '### N.M'.
  while IFS=: read -r file ref; do
    ref=${ref#§}
    major=${ref%%.*}
    if [[ "$ref" == *.* ]]; then
      minor=$(cut -d. -f1-2 <<<"$ref")
      grep -qE "^### ${minor//./\\.} " "$semantics" ||
        fail "$file cites §$ref; $semantics has no section $minor"
    else
      grep -qE "^## ${major}\. " "$semantics" ||
        fail "$file cites §$ref; $semantics has no section $major"
    fi
  done < <(grep -oHE '§[0-9]+(\.[0-9]+)*' "${files[@]}" | sort -u)
fi

# Every doc a file names (an upper-case name ending in .md) is in the repository: at the path given
# (from the root or beside the citing file), or, for a bare name, in docs/, at the root or
# beside the citing file. (Python scripts are skipped: their usage lines name outputs.)
doc_sources=()
for f in "${files[@]}"; do [[ "$f" == *.py ]] || doc_sources+=("$f"); done
while IFS=: read -r file ref; do
  dir=$(dirname "$file")
  if [[ "$ref" == ../* || "$ref" == */../* ]]; then
    fail "$file names $ref, a path that leaves the repository"
  elif [[ "$ref" == */* ]]; then
    [ -f "$ref" ] || [ -f "$dir/$ref" ] || fail "$file names $ref, which is not in the repository"
  else
    [ -f "docs/$ref" ] || [ -f "$ref" ] || [ -f "$dir/$ref" ] ||
      fail "$file names $ref, which is not in the repository"
  fi
done < <(grep -oHE '([A-Za-z0-9_.-]+/)*[A-Z][A-Z0-9_]*\.md\b' "${doc_sources[@]}" | sort -u)

# The attrs columns: in every table whose first column is "op" and which has an "attrs"
# column, each op the first cell names (a row may name several) has its declared attrs cell
# exactly as `spmd ops --markdown` prints it, or `as OP` for an op declaring the same attrs;
# every op has such a row in each doc.
spmd_bin="${2:-${SPMD:-build/bin/spmd}}"
if [ ! -x "$spmd_bin" ]; then
  fail "no spmd binary at '$spmd_bin' to read the declared attrs from (build the spmd target, or pass it: check-docs.sh ROOT SPMD)"
else
  declare -A declared=()
  while IFS=$'\t' read -r op cell; do
    declared[$op]=$cell
  done < <("$spmd_bin" ops --markdown |
           awk -F'|' 'NR > 2 { gsub(/^ +| +$/, "", $2); gsub(/^ +| +$/, "", $4); print $2 "\t" $4 }')
  [ ${#declared[@]} -gt 0 ] || fail "'$spmd_bin ops --markdown' printed no op"
  for doc in docs/OPS.md docs/SEMANTICS.md; do
    declare -A seen=()
    while IFS=$'\t' read -r where op cell; do
      seen[$op]=1
      if [ -z "${declared[$op]+x}" ]; then
        fail "$where: '$op' in an attrs table is no op of rules/engine/op_list.h"
      elif [ "$cell" != "${declared[$op]}" ]; then
        other=""
        [[ "$cell" =~ ^as\ ([a-z0-9_]+)$ ]] && other=${BASH_REMATCH[1]}
        if [ -z "$other" ] || [ "${declared[$other]-}" != "${declared[$op]}" ]; then
          fail "$where: $op's attrs are documented as '$cell'; declared: '${declared[$op]}'"
        fi
      fi
    done < <(awk -F'|' '
      function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
      /^\|/ {
        if (!in_table) {  # the header row
          in_table = 1; col = 0
          if (trim($2) == "op") for (i = 3; i < NF; i++) if (trim($i) == "attrs") col = i
          next
        }
        if (!col || $0 ~ /^\|[-: |]+$/) next
        n = split($2, names, ",")
        for (k = 1; k <= n; k++) {
          name = trim(names[k]); gsub(/`/, "", name)
          print FILENAME ":" FNR "\t" name "\t" trim($col)
        }
        next
      }
      { in_table = 0 }' "$doc")
    for op in "${!declared[@]}"; do
      [ -n "${seen[$op]+x}" ] || fail "$doc has no attrs cell for the op '$op' (a row in a table with an attrs column)"
    done
    unset seen
  done
fi

[ $bad -eq 0 ] && echo "docs: ok (${#files[@]} files)"
exit $bad
