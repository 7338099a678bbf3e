#!/usr/bin/env bash
# Crash safety (plain writes): SIGKILL the writer at random moments, 20 times;
# the disk must check free of corruption and every flushed write must read back.
source "$(dirname "$0")/functions.sh"
source "$TOP/tests/crash/crash-lib.bash"
crash_loop plain 20
