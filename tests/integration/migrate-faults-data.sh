#!/usr/bin/env bash
# Data faults of a live migration: the destination's filesystem full (bulk
# round, a later round) and one bit flipped on the wire (bulk round, frozen
# round). The source runs on, snapshots merged back; the destination
# removes everything it received.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
source "$(dirname "$0")/migrate-lib.bash"
requires mkfs.ext4
MIG_TIMEOUT=4

# The destination's root on a small filesystem of its own.
truncate -s 96M "$TMP/dstfs.img"
mkfs.ext4 -q -F "$TMP/dstfs.img"
mkdir "$TMP/dstfs"
mount -o loop "$TMP/dstfs.img" "$TMP/dstfs"
cleanup "umount -l '$TMP/dstfs'"
DST=$TMP/dstfs/root
mkdir "$DST"

start_writer web
src exec web -- /bin/sh -c 'dd if=/dev/urandom of=/data bs=1M count=24 2>/dev/null; sync /data'

# A later round: the destination's filesystem fills up while round 1 streams.
# The failure may show only at PREPARE's mount (the journal replay's writes
# then fail), with ext4's reserved blocks still free: root here lacks
# CAP_SYS_RESOURCE, so the hint must go by the space others may use.
FILL="fallocate -l \$(( \$(df --output=avail -B1 $TMP/dstfs | tail -n 1) - 4096 )) $TMP/dstfs/filler"
fault_case round1 "$FILL" --min-round 0
rm -f "$TMP/dstfs/filler"
grep -qi "space" "$TMP/err" || fail "round1: the error does not say the disk is full: $(cat "$TMP/err")"
assert_dest_empty web
assert_source_intact web 1

# Bulk round: 100 MiB more data do not fit in 96 MiB.
src exec web -- /bin/sh -c 'dd if=/dev/urandom of=/data2 bs=1M count=80 2>/dev/null; sync /data2'
fault_case round0 ""
grep -qi "space" "$TMP/err" || fail "round0: the error does not say the disk is full: $(cat "$TMP/err")"
assert_dest_empty web
assert_source_intact web 1

# The bit flips: a destination with room.
DST=$TMP/dst
# One bit flipped 1 MiB into the connection (bulk round's cluster data).
start_relay 1048576
fault_case round0 ""
grep -q "flipped" "$TMP/relay.out" || fail "the relay flipped nothing"
grep -qi "checksum\|digest\|corrupt\|mismatch" "$TMP/err" || fail "flip not reported as such: $(cat "$TMP/err")"
assert_dest_empty web
assert_source_intact web 1

# One bit flipped in the frozen round (the hook arms the relay there).
rm -f "$TMP/flip"
start_relay 100 "$TMP/flip"
fault_case final "touch $TMP/flip"
grep -q "flipped" "$TMP/relay.out" || fail "the relay flipped nothing in the frozen round"
assert_dest_empty web
assert_source_intact web 1
