#!/usr/bin/env bash
# Crash safety of in-place v1<->v2 conversion: SIGKILL mid-conversion, 12 times;
# check -F restores the BAT backup and every flushed write still reads back.
source "$(dirname "$0")/functions.sh"
source "$TOP/tests/crash/crash-lib.bash"
crash_loop convert 12
