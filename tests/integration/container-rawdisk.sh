#!/usr/bin/env bash
# The documented alternative disk backend (create --disk raw: ext4 image on
# a direct-I/O loop device, no daemon): run, persistence, snapshot of a
# running container mounted read-only, no loop device or mount left.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/container-lib.bash"
requires mkfs.ext4

ct create r1 --size 64M --disk raw
[[ -f $CTROOT/r1/disk/image.raw && ! -e $CTROOT/r1/disk/DiskDescriptor.xml ]] || fail "not a raw disk"
ct list | awk '$1 == "r1"' | grep -q raw || fail "list does not say raw"
ct run r1 -- /bin/sh -c 'echo kept > /root/f'
[[ $(ct run r1 -- cat /root/f) == kept ]] || fail "write lost"
ct start r1 -- /bin/sh -c 'echo before > /root/b; while :; do sleep 1; done'
wait_running r1
sleep 0.3
snap=$(ct snapshot r1)
ct exec r1 -- /bin/sh -c 'echo after > /root/a'
mkdir -p "$TMP/s"
ct mount r1 --snapshot "$snap" "$TMP/s"
cleanup "umount '$TMP/s' 2>/dev/null"
[[ $(cat "$TMP/s/root/b") == before && ! -e $TMP/s/root/a ]] || fail "raw snapshot content"
touch "$TMP/s/x" 2>/dev/null && fail "raw snapshot writable"
ct umount r1 "$TMP/s"
ct stop r1 --timeout 0
assert_no_leaks r1
ct destroy r1
assert_no_leaks r1
echo PASS
