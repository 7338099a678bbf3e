#!/usr/bin/env bash
# Crash safety (merge writes): SIGKILL the writer at random moments, 12 times;
# the disk must check free of corruption and every flushed write must read back.
source "$(dirname "$0")/functions.sh"
source "$TOP/tests/crash/crash-lib.bash"
crash_loop merge 12
