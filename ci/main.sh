#!/usr/bin/env bash
# The main job: install, build, answer every golden rule case with `spmd infer`, then
# prove every rule numerically with the exhaustive sweep (`spmd check`) and print its table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh
build/bin/spmd infer --check golden/rules/*.jsonl
build/bin/spmd check --exhaustive
