#!/usr/bin/env bash
# `spmd check --claim` / `--case` on bad or huge input: a typed error naming the field and
# exit 2 (as for any bad input), never an abort.
set -uo pipefail
spmd="$1"
failures=0

# expect MODE JSON CODE REGEX: `spmd check MODE JSON` exits CODE and prints REGEX.
expect() {
  local out code
  out=$("$spmd" check "$1" "$2" 2>&1)
  code=$?
  if [ "$code" != "$3" ] || ! grep -Eq -- "$4" <<<"$out"; then
    echo "FAIL: spmd check $1 '$2': exit $code (expected $3), output:"
    echo "$out"
    echo "  expected to match: $4"
    failures=$((failures + 1))
  fi
}

relu() {  # relu on mesh [2]: input shape $1, input dims_mapping $2, claimed output dims_mapping $3
  echo '{"op":"relu","mesh_shape":[2],"inputs":[{"shape":'"$1"',"dims_mapping":'"$2"'}],"claim_outputs":[{"dims_mapping":'"$3"'}]}'
}

expect --claim "$(relu '[4,6]' '[0,-1]' '[0,-1]')" 0 '^SOUND'
for mode in --claim --case; do
  expect $mode "$(relu '[4,6]' '[0]' '[0,-1]')" 2 'InvalidArgument: inputs\[0\]\.dims_mapping'
  expect $mode "$(relu '[3037000499,3037000499]' '[0,-1]' '[0,-1]')" 2 'InvalidArgument: inputs\[0\]\.shape'
  # Valid but huge: shrunk to sizes with the same layout and answered, or (an op that
  # cannot shrink) refused as too large to simulate.
  expect $mode "$(relu '[4611686018427387904]' '[0]' '[0]')" 0 \
    'input 0  \[4611686018427387904\] -> \[6\]'
  expect $mode "$(relu '[1099511627776,3]' '[0,-1]' '[0,-1]')" 0 'input 0  \[1099511627776,3\] -> \[6,3\]'
  expect $mode '{"op":"reshape","attrs":{"shape":[3298534883328]},"mesh_shape":[2],"inputs":[{"shape":[1099511627776,3],"dims_mapping":[0,-1]}],"claim_outputs":[{"dims_mapping":[0]}]}' \
    2 'Unsupported: inputs\[0\]\.shape'
done
# `--grad-case`: bad input is a typed error naming the field; a case too large for finite
# differences is refused; a valid case runs.
exp_grad() {  # exp on mesh [2]: input shape $1, dims_mapping $2, then more fields $3
  echo '{"op":"exp","mesh_shape":[2],"inputs":[{"shape":'"$1"',"dims_mapping":'"$2"'}]'"$3"'}'
}
expect --grad-case "$(exp_grad '[4,6]' '[0,-1]' ',"cotangents":[{"dims_mapping":[-1,-1],"partial":{"0":"sum"}}]')" 0 '^PASSED'
expect --grad-case "$(exp_grad '[4,6]' '[0]' '')" 2 'InvalidArgument: inputs\[0\]\.dims_mapping'
expect --grad-case "$(exp_grad '[4,6]' '[0,-1]' ',"cotangents":[]')" 2 'InvalidArgument: cotangents:'
expect --grad-case "$(exp_grad '[4,6]' '[0,-1]' ',"cotangents":[{"dims_mapping":[0]}]')" 2 \
  'InvalidArgument: cotangents\[0\]\.dims_mapping'
expect --grad-case "$(exp_grad '[4,6]' '[0,-1]' ',"shard_seed":"x"')" 2 'InvalidArgument: shard_seed'
expect --grad-case "$(exp_grad '[4611686018427387904]' '[0]' '')" 2 'Unsupported: inputs\[0\]\.shape'
# argmax has no VJP (its output is an index): the gradient check refuses it, typed.
expect --grad-case '{"op":"argmax","mesh_shape":[2],"inputs":[{"shape":[4,6],"dims_mapping":[0,-1]}]}' 2 'Unsupported: op: argmax has no VJP'
# A model-sized matmul on 2x2x2 is checked on shrunk sizes with the same layout, and says so:
# the shrunk shapes are pinned (a few elements per shard), which is what keeps the check
# small, rather than a clock.
expect --claim '{"op":"matmul","mesh_shape":[2,2,2],"inputs":[{"shape":[512,48,32,64],"dims_mapping":[0,1,-1,2]},{"shape":[64,96],"dims_mapping":[2,-1]}],"claim_outputs":[{"dims_mapping":[0,1,-1,-1],"partial":{"2":"sum"}}]}' \
  0 'input 0  \[512,48,32,64\] -> \[6,6,3,6\]'
expect --claim '{"op":"matmul","mesh_shape":[2,2,2],"inputs":[{"shape":[512,48,32,64],"dims_mapping":[0,1,-1,2]},{"shape":[64,96],"dims_mapping":[2,-1]}],"claim_outputs":[{"dims_mapping":[0,1,-1,-1],"partial":{"2":"sum"}}]}' \
  0 'input 1  \[64,96\] -> \[6,3\]'
expect --claim '{"op":"matmul","mesh_shape":[2,2,2],"inputs":[{"shape":[512,48,32,64],"dims_mapping":[0,1,-1,2]},{"shape":[64,96],"dims_mapping":[2,-1]}],"claim_outputs":[{"dims_mapping":[0,1,-1,-1]}]}' \
  1 '^UNSOUND'
expect --case '{"op":"matmul","mesh_shape":[2,2,2],"inputs":[{"shape":[512,48,32,64],"dims_mapping":[0,1,-1,2]},{"shape":[64,96],"dims_mapping":[2,-1]}]}' \
  0 '^PASSED'

expect --claim "$(relu '[4,6]' '[0,-1]' '[0]')" 2 'InvalidArgument: claim_outputs\[0\]\.dims_mapping'

if [ "$failures" -ne 0 ]; then exit 1; fi
echo "every bad case refused with a typed error"
