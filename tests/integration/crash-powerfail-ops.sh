#!/usr/bin/env bash
# Simulated power cut (see crash-powerfail.sh) aimed at structural operations
# and concurrency: rounds rotate through snapshot, merge, resize (BAT
# relocation), v1<->v2 conversion and four concurrent writers with a flusher;
# structural ones are killed while the operation runs. Nothing flushed may be lost.
source "$(dirname "$0")/functions.sh"
source "$TOP/tests/crash/crash-lib.bash"
POWERFAIL=1 crash_loop mixed 15
