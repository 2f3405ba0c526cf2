#!/usr/bin/env bash
# Prints, for each test the last ctest run in BUILD_DIR failed, its name and the lines of its
# output that say what failed (RapidCheck's seed and shrunk case, gtest's failure; the last lines
# where none match), read from ctest's own logs.
# ci/test.sh calls it at the end of a run whose ctest phase failed, so the failing test shows
# in the last lines of the CI log, where the phase table is, however long the log above is.
# Usage: ci/failed-tests.sh BUILD_DIR [LINES_PER_TEST]
set -uo pipefail
build=${1:?usage: ci/failed-tests.sh BUILD_DIR [LINES_PER_TEST]}
lines=${2:-12}
failed="$build/Testing/Temporary/LastTestsFailed.log"
log="$build/Testing/Temporary/LastTest.log"
[ -f "$failed" ] || { echo "no failed tests recorded in $build"; exit 0; }
echo "failed tests in $build ($(wc -l < "$failed") of them; at most $lines lines of each):"
# LastTestsFailed.log: "NUMBER:NAME" per line. LastTest.log: each test's output between
# "N/M Testing: NAME" and "<end of output>".
count=0
while IFS=: read -r _ name; do
  count=$((count + 1))
  if [ $count -gt 8 ]; then echo "  ... and more (see $failed)"; break; fi
  echo "--- $name"
  [ -f "$log" ] || continue
  awk -v name="$name" '
    $0 ~ ("^[0-9]+/[0-9]+ Testing: ") { inside = (substr($0, index($0, "Testing: ") + 9) == name); if (inside) n = 0; next }
    inside && /^<end of output>/ { inside = 0; next }
    inside { buf[n++] = $0 }
    END {
      # The lines that say what failed (gtest, RapidCheck, the runtime), else the last ones.
      shown = 0
      for (i = 0; i < n && shown < L; i++)
        if (buf[i] ~ /Failure|Falsifiable|seed|FAILED|[Ee]rror|Expected|Which is|Value of|UNSOUND|[Tt]imeout|what\(\)|abort|signal/) {
          print "    " substr(buf[i], 1, 300); shown++
        }
      if (shown == 0) for (i = (n > L ? n - L : 0); i < n; i++) print "    " substr(buf[i], 1, 300)
    }
  ' L="$lines" "$log"
done < "$failed"
