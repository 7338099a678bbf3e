#!/usr/bin/env bash
# `mount -t ploop DIR/DiskDescriptor.xml MP -o OPTS` through scripts/mount.ploop,
# and a plain `umount MP` releasing the whole attachment through
# scripts/umount.ploop (helper=ploop in utab).  Installs the two helpers in
# /sbin for the test when they are not there, and removes them after.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"

for h in mount.ploop umount.ploop; do
  if [[ ! -e /sbin/$h ]]; then
    ln -s "$TOP/scripts/$h" "/sbin/$h"
    cleanup "rm -f /sbin/$h"
  elif [[ $(readlink -f "/sbin/$h") != "$TOP/scripts/$h" ]]; then
    skip "/sbin/$h is another helper"
  fi
done
export PLOOP

D=$TMP/disk MP=$TMP/mnt
mkdir -p "$MP"
new_disk "$D" 256M
mount -t ploop -o noatime "$D/DiskDescriptor.xml" "$MP" || fail "mount -t ploop failed"
findmnt -n -o FSTYPE "$MP" | grep -qx ext4 || fail "$MP is not an ext4 mount"
findmnt -n -o OPTIONS "$MP" | grep -qw noatime || fail "noatime did not reach the filesystem"
dev=$(findmnt -n -o SOURCE "$MP")
echo hello >"$MP/hello"
umount "$MP" || fail "umount of a ploop mount failed"
findmnt -n "$MP" >/dev/null && fail "$MP still mounted"
no_leaks "$D" "$dev"
"$PLOOP" check "$D" >/dev/null || fail "image not clean after umount"

# Read-only, and the file is there.
mount -t ploop -o ro "$D/DiskDescriptor.xml" "$MP"
[[ $(cat "$MP/hello") == hello ]] || fail "file lost across mount -t ploop"
expect_fail touch "$MP/x" >/dev/null
umount "$MP"
no_leaks "$D"

# A snapshot by uuid= (read-only, whatever else is asked).
guid=$("$PLOOP" snapshot "$D" | grep -o '{[0-9a-f-]*}' | head -1)
[[ -n $guid ]] || fail "offline snapshot printed no GUID"
mount -t ploop -o "rw,uuid=$guid" "$D/DiskDescriptor.xml" "$MP"
[[ $(cat "$MP/hello") == hello ]] || fail "snapshot lacks the file"
findmnt -n -o OPTIONS "$MP" | grep -qw ro || fail "snapshot mounted read-write"
umount "$MP"
no_leaks "$D"

# A failing mount reports and leaves nothing.
rc=0
mount -t ploop "$TMP/nonexistent/DiskDescriptor.xml" "$MP" 2>/dev/null || rc=$?
[[ $rc -ne 0 ]] || fail "mount of a missing disk succeeded"
findmnt -n "$MP" >/dev/null && fail "$MP mounted after a failure"
echo "mount-helper: ok"
