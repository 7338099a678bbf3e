#!/usr/bin/env bash
# Simulated power cut (see crash-powerfail.sh) aimed at structural operations:
# rounds rotate through snapshot, merge, resize (BAT relocation) and v1<->v2
# conversion, killed while the operation runs; nothing flushed may be lost.
source "$(dirname "$0")/functions.sh"
source "$TOP/tests/crash/crash-lib.bash"
POWERFAIL=1 crash_loop mixed 12
