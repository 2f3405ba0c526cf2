#!/usr/bin/env bash
# `spmd infer` and `spmd infer --check` on input that is not what they read: a directory
# is a typed error naming it (exit 2); a malformed golden case is a typed error for that
# case in the table and the cases after it are still checked (exit 2); a 40 MB line of
# nesting gets one error answer naming the line limit, the next line is answered, and the
# process's peak memory stays far below what a parse of that line takes (it took 1.5 GB).
# Usage: infer_input_test.sh SPMD
set -uo pipefail
spmd="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

relu='{"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4,3],"dims_mapping":[0,-1]}]}'
answer='{"inputs":[{"dims_mapping":[0,-1],"partial":{}}],"outputs":[{"dims_mapping":[0,-1],"partial":{}}]}'

# A directory, as FILE of either command.
mkdir -p "$dir/goldens"
for cmd in "infer" "infer --check"; do
  out=$($spmd $cmd "$dir/goldens" 2>&1); code=$?
  echo "$out"
  [ "$code" -eq 2 ] && grep -q "InvalidArgument: $dir/goldens: is a directory" <<<"$out" ||
    fail "spmd $cmd DIR: exit $code, expected 2 and '<path>: is a directory'"
done

# Golden cases: a good one, four that are not golden cases, a good one after them.
good=${relu%\}}',"name":"relu","expect":'"$answer"'}'
{
  echo "$good"
  echo "${relu%\}}"',"name":"expect-a-number","expect":5}'
  echo "${relu%\}}"',"name":"no-outputs","expect":{"inputs":[]}}'
  echo "${relu%\}}"',"name":"no-expect"}'
  echo 'not json'
  echo "$good"
} >"$dir/cases.jsonl"
out=$("$spmd" infer --check "$dir/cases.jsonl" 2>"$dir/err"); code=$?
echo "$out"; cat "$dir/err"
[ "$code" -eq 2 ] || fail "--check with malformed cases: exit $code, expected 2"
grep -Eq "cases\.jsonl +6 +2 +0 +4$" <<<"$out" || fail "--check table: expected 6 cases, 2 passed, 0 failed, 4 invalid"
for want in ':2 expect-a-number: InvalidArgument: expect: expected an object' \
            ':3 no-outputs: InvalidArgument: expect.outputs: is missing' \
            ':4 no-expect: InvalidArgument: expect: is missing' \
            ':5 : InvalidArgument: line: not valid JSON'; do
  grep -qF -- "$want" "$dir/err" || fail "--check did not report '$want'"
done

# 40 MB of nesting on one line, then a request: two answers; peak memory measured by
# python3's getrusage of the child (a parse of the line took 1.5 GB).
python3 -c "import sys; sys.stdout.write('[' * (40 << 20) + '\n')" >"$dir/deep.txt"
echo "$relu" >>"$dir/deep.txt"
peak_kb=$(python3 - "$spmd" "$dir/deep.txt" "$dir/deep.out" <<'PY'
import resource, subprocess, sys
with open(sys.argv[2], "rb") as src, open(sys.argv[3], "wb") as dst:
    subprocess.run([sys.argv[1], "infer"], stdin=src, stdout=dst, check=False)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
)
echo "peak memory of spmd infer on a 40 MB line: ${peak_kb} KB"
expected='{"error":{"message":"line: longer than 1048576 bytes (the limit); skipped to the next newline","type":"InvalidArgument"}}
'"$answer"
[ "$(cat "$dir/deep.out")" = "$expected" ] || { fail "answers to the 40 MB line:"; head -c 400 "$dir/deep.out"; }
[ "${peak_kb:-999999999}" -lt 307200 ] || fail "peak memory ${peak_kb} KB on a 40 MB line (bound: 300 MB)"

# A misspelt key is refused naming it, not ignored.
out=$(echo '{"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4,3],"dims_mappin":[0,-1]}]}' | "$spmd" infer)
grep -qF '"message":"inputs[0].dims_mappin: unknown key' <<<"$out" || fail "a misspelt key: $out"

# A caller that writes one request at a time and waits for each answer gets each (the
# answers are flushed before spmd waits for more input); `timeout` only guards a hang.
out=$(timeout 60 python3 - "$spmd" "$relu" <<'PY'
import subprocess, sys
p = subprocess.Popen([sys.argv[1], "infer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
for _ in range(3):
    p.stdin.write(sys.argv[2] + "\n")
    p.stdin.flush()
    print(p.stdout.readline().strip())
p.stdin.close()
print("exit", p.wait())
PY
)
[ "$out" = "$answer
$answer
$answer
exit 0" ] || fail "answers to one request at a time: $out"

[ "$failures" -eq 0 ] || exit 1
echo "every malformed input refused with a typed error"
