#!/usr/bin/env bash
# Runs every integration test (tests/integration/*.sh but this file and
# functions.sh), each with a time limit, and prints one closing line.
set -uo pipefail
cd "$(dirname "$0")"
pass=0 failed=0 skipped=0 failed_names=()
only=${1:-}
for t in *.sh; do
  case $t in run.sh | functions.sh) continue ;; esac
  [[ -n $only && $t != *$only* ]] && continue
  if [[ -n ${EXCLUDE:-} && $t == *$EXCLUDE* ]]; then
    skipped=$((skipped + 1)); echo "SKIP $t: excluded here (${EXCLUDE_WHY:-see README})"; continue
  fi
  start=$(date +%s)
  log=$(mktemp)
  timeout -k 10 ${TEST_TIMEOUT:-600} bash "$t" >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  if [[ $rc -eq 0 ]]; then
    pass=$((pass + 1)); echo "PASS $t (${secs}s)"
  elif [[ $rc -eq 77 ]]; then
    skipped=$((skipped + 1)); echo "SKIP $t: $(tail -1 "$log")"
  else
    failed=$((failed + 1)); failed_names+=("$t"); echo "FAIL $t (rc=$rc, ${secs}s)"; tail -30 "$log" | sed 's/^/    /'
  fi
  rm -f "$log"
done
echo "integration: $pass passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
