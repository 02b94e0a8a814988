#!/usr/bin/env bash
# Sums the test runner's summaries in a log of `npm test`: "pass N, fail N, skipped N".
# Node 20 prints TAP summaries ("# pass 12"); Node 23 and later print the spec reporter's
# ("ℹ pass 12") when output is not a terminal. Both are counted.
set -euo pipefail
log="${1:?usage: test-counts.sh LOG}"
grep -aE '^(# |ℹ )(pass|fail|skipped) [0-9]+$' "$log" | awk '
  { total[$2] += $3 }
  END { printf "pass %d, fail %d, skipped %d\n", total["pass"], total["fail"], total["skipped"] }'
