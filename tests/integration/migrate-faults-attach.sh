#!/usr/bin/env bash
# Faults of the destination's early attach (ATTACH, after the live rounds
# and before the freeze): its ploop-nbd fails to start, and the receiver is
# killed while it attaches. Either way the source never froze for nothing
# it could not undo: it runs on with its records, its temporary snapshots
# merged back, and the destination keeps nothing (no files, mounts, loop
# devices or daemons), after `receive --recover` where the receiver died.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"
MIG_TIMEOUT=4

start_writer web
src exec web -- /bin/sh -c 'dd if=/dev/urandom of=/data bs=1M count=8 2>/dev/null; sync /data'

# The destination's daemon cannot start: the attach fails with its reason.
cat >"$TMP/bad-nbd" <<'SH'
#!/bin/sh
echo "ploop-nbd: injected start failure" >&2
exit 1
SH
chmod +x "$TMP/bad-nbd"
export PLOOP_NBD=$TMP/bad-nbd  # the receiver's only: the source spawns no daemon
start_receiver
unset PLOOP_NBD
rc=0
migrate web --min-round 0 --max-rounds 3 >"$TMP/out" 2>"$TMP/err" || rc=$?
((rc != 0)) || fail "attach: migrate succeeded with no daemon there: $(cat "$TMP/out")"
((rc != 6)) || fail "attach: in doubt, though COMMIT was never sent: $(cat "$TMP/err")"
[[ $(grep -c . "$TMP/err") -eq 1 ]] || fail "attach: expected one line, got: $(cat "$TMP/err")"
echo "attach: source said: $(cat "$TMP/err")"
RECV_RC=$(wait_receiver)
[[ $RECV_RC -eq 1 ]] || fail "attach: receiver exit $RECV_RC: $(cat "$TMP/recv.err")"
grep -q "injected start failure" "$TMP/err" || fail "attach: the reason did not reach the source: $(cat "$TMP/err")"
assert_dest_empty web
assert_source_intact web 1

# The receiver dies while its attach runs (or just after): what it attached
# stays until the next receiver or --recover removes it.
fault_case attach "kill -9 \$(cat $TMP/recv.pid); sleep 0.3"
[[ $RECV_RC -eq 137 ]] || fail "attach: the receiver was not killed (exit $RECV_RC)"
dst receive --recover
assert_dest_empty web
assert_source_intact web 1

# And with the attach healthy, the migration goes through (the early attach
# was used: its time is reported) and the writer's records all arrived.
start_receiver
migrate web --json >"$TMP/out.json" 2>"$TMP/err" || fail "migrate failed: $(cat "$TMP/err") / $(cat "$TMP/recv.err")"
[[ $(wait_receiver) -eq 0 ]] || fail "receiver failed: $(cat "$TMP/recv.err")"
python3 - "$TMP/out.json" <<'PY' || fail "no early attach in $(cat "$TMP/out.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["dest_pre_attach_ms"] > 0, o
PY
sleep 0.3
acked=$(last_ack)
[[ $(state_of "$DST" web) == running ]] || fail "web does not run on the destination"
m=$(check_log "$DST/web/rootfs/log") || fail "destination log broken"
((m >= acked)) || fail "record $acked was acknowledged before the freeze, the destination has $m"
echo "early attach faults: ok"
