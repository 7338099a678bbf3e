#!/usr/bin/env bash
# Runs every benchmark (scripts/bench/*.sh but this file and common.sh:
# image, mount, nbd, container, criu, migrate) in
# one run; each prints its own side-by-side table and ratios.
set -uo pipefail
cd "$(dirname "$0")" || exit 1
for b in *.sh; do
  [[ $b == run.sh || $b == common.sh ]] && continue
  [[ -n ${1:-} && $b != *$1* ]] && continue
  echo "=== bench: ${b%.sh}"
  bash "$b" || echo "bench ${b%.sh} failed (rc=$?)"
  if [[ ($b == mount.sh || $b == image.sh) && -z ${BENCH_DIR:-} ]]; then
    # The host disk's speed swings run to run; the same jobs on a quiet
    # RAM-backed ext4 show what each tool or path costs itself (both sides
    # move the same bytes).
    echo "=== bench: ${b%.sh} (RAM-backed ext4)"
    BENCH_DIR=ram bash "$b" || echo "bench ${b%.sh} (ram) failed (rc=$?)"
  fi
done
