#!/usr/bin/env bash
# Faults from outside at each phase of a live migration: the receiver
# killed (bulk round, frozen round, after the last round before COMMIT) and
# the link cut (a later round). Each time the source runs on with its
# records, its temporary snapshots merged back; the destination keeps nothing.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"
MIG_TIMEOUT=4

start_writer web
src exec web -- /bin/sh -c 'dd if=/dev/urandom of=/data bs=1M count=24 2>/dev/null; sync /data'

# (the pause lets the kernel close the dead receiver's socket before the source goes on)
KILL="kill -9 \$(cat $TMP/recv.pid); sleep 0.3"
for phase in round0 final ready; do
  fault_case "$phase" "$KILL"
  [[ $RECV_RC -eq 137 ]] || fail "$phase: the receiver was not killed (exit $RECV_RC)"
  # a killed receiver cannot clean up; the next receiver (or --recover) does
  dst receive --recover
  assert_dest_empty web
  assert_source_intact web 1
done

# The link goes down during round 1: both sides time out.
fault_case round1 "ip link set $VETH_A down"
ip -n "$NS_A" link set "$VETH_A" up
[[ $RECV_RC -eq 1 ]] || fail "round1: receiver exit $RECV_RC: $(cat "$TMP/recv.err")"
assert_dest_empty web
assert_source_intact web 1

# A snapshot the user made before stays where it was.
src snapshot web >/dev/null
fault_case round1 "$KILL"
dst receive --recover
assert_dest_empty web
assert_source_intact web 2
