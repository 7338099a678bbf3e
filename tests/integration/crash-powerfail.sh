#!/usr/bin/env bash
# Crash safety under a simulated power cut: the writer's file changes are
# journaled, it is SIGKILLed, and a random subset of the sectors it wrote but
# had not synced is lost; the disk must still check clean and every flushed
# write read back. Snapshot mode, so partial writes copy up older data.
source "$(dirname "$0")/functions.sh"
source "$TOP/tests/crash/crash-lib.bash"
POWERFAIL=1 crash_loop snapshot 12
