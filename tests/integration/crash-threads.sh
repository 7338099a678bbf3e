#!/usr/bin/env bash
# Crash safety with concurrency: four writer threads on interleaved stripes
# that share clusters, a flusher thread, SIGKILL at random moments, 12 times;
# every write completed before a flush that returned must read back.
source "$(dirname "$0")/functions.sh"
source "$TOP/tests/crash/crash-lib.bash"
crash_loop threads 12
