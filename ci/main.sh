#!/usr/bin/env bash
# The main job: install, build, then answer every golden rule case with `spmd infer`
# and print the summary table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh
build/bin/spmd infer --check golden/rules/*.jsonl
