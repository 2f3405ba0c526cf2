#!/usr/bin/env bash
# `spmd plan` on hostile input: a placement that is not UTF-8 and meshes far too large are
# refused with a typed error (exit 2), the --json answer is one JSON line of valid UTF-8
# (the bad bytes written as \xNN), and the largest meshes allowed are planned. How long
# these take is a benchmark (bench/infer_bench.cc, BM_Plan_65536Ranks*), not a timed test.
set -euo pipefail
spmd="$1"
fail() { echo "FAIL: $*"; exit 1; }

# Runs spmd plan with the given arguments; sets out and rc.
run() {
  out=$("$spmd" plan "$@" 2>/dev/null) && rc=0 || rc=$?
}

check_refused() {  # expected field, then the plan arguments
  local field="$1"; shift
  run "$@"
  [ "$rc" = 2 ] || fail "exit $rc for: ${*@Q} -> $out"
  echo "$out" | grep -q "\"type\":\"InvalidArgument\"" || fail "no typed error: $out"
  echo "$out" | grep -q "\"message\":\"$field" || fail "message does not start with $field: $out"
  [ "$(echo "$out" | wc -l)" = 1 ] || fail "not one line: $out"
  if LC_ALL=C grep -q $'[\x80-\xff]' <<<"$out"; then
    # Non-ASCII bytes must be well-formed UTF-8: iconv refuses anything else.
    iconv -f UTF-8 -t UTF-8 <<<"$out" >/dev/null 2>&1 || fail "invalid UTF-8 in: $out"
  fi
}

check_refused '--from' --mesh 2 --shape 4 --from $'[\xff]' --to '[R]' --json
check_refused '--from' --mesh 2 --shape 4 --from $'[S(0)\xc3]' --to '[R]' --json
check_refused '--to' --mesh 2 --shape 4 --from '[R]' --to $'[P(\xe9t\xe9)]' --json
echo "$out" | grep -q '\\\\xE9' || fail "the bad byte is not escaped: $out"
check_refused '--mesh' --mesh 1048576 --shape 4 --from '[R]' --to '[R]' --json
check_refused '--mesh' --mesh 1024x1024 --shape 4,4 --from '[S(0), R]' --to '[R, S(1)]' --json
check_refused '--mesh' --mesh 65537 --shape 4 --from '[S(0)]' --to '[R]' --json
check_refused '--to-mesh' --mesh 2 --to-mesh 2097152 --shape 4 --from '[R]' --to '[R]' --json
# The largest meshes allowed are planned (the lower bound toward a partial target once
# compared every group with every box: 25 s of CPU on the first one).
run --mesh 32768x2 --shape 32768,2 --from '[S(0), S(1)]' --to '[S(0), P(sum)]' --json
[ "$rc" = 0 ] || fail "exit $rc: $out"
echo "$out" | grep -q '"lower_bound_bytes"' || fail "no bound: $out"
run --mesh 2x32768 --shape 65536 --from '[R, S(0)]' --to '[P(sum), R]' --json
[ "$rc" = 0 ] || fail "exit $rc: $out"
echo "$out" | grep -q '"lower_bound_bytes":131068' || fail "unexpected bound: $out"
echo "7 hostile plans refused, 2 plans on 65536 ranks answered"
