#!/usr/bin/env bash
# `spmd infer` answers every line in order; a bad line answers an error object and the
# lines after it are still answered.
set -euo pipefail
spmd="$1"
out=$(printf '%s\n' \
  '{"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4,3],"dims_mapping":[0,-1]}]}' \
  'this is not json' \
  '' \
  '{"op":"no_such_op","mesh_shape":[2],"inputs":[]}' \
  '{"op":"transpose","attrs":{"perm":[1,1]},"mesh_shape":[2],"inputs":[{"shape":[4,3]}]}' \
  '{"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4,3],"dims_mapping":[-1,0]}]}' \
  | "$spmd" infer)
expected='{"inputs":[{"dims_mapping":[0,-1],"partial":{}}],"outputs":[{"dims_mapping":[0,-1],"partial":{}}]}
{"error":{"message":"line: not valid JSON","type":"InvalidArgument"}}
{"error":{"message":"op: unknown op '"'"'no_such_op'"'"'","type":"UnknownOp"}}
{"error":{"message":"attrs.perm: [1, 1] is not a permutation","type":"InvalidArgument"}}
{"inputs":[{"dims_mapping":[-1,0],"partial":{}}],"outputs":[{"dims_mapping":[-1,0],"partial":{}}]}'
if [ "$out" != "$expected" ]; then
  echo "unexpected answers:"; echo "$out"
  exit 1
fi
echo "5 lines answered in order"
