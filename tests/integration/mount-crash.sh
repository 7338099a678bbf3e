#!/usr/bin/env bash
# The serving daemon dies (SIGKILL) under a mounted filesystem: I/O on the
# mount fails with an error (the host and the test do not hang), `umount`
# cleans every piece up, `ploop check -F -d` makes the image usable again and
# every file that was fsynced before the crash is intact.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"

D=$TMP/disk MP=$TMP/mnt
mkdir -p "$MP"
new_disk "$D" 512M
dev=$(att_mount "$D" "$MP")
read -r pid state < <(att_daemon "$D")
[[ -n $pid && $state == alive ]] || fail "no live daemon listed for $D"
kill -0 "$pid" || fail "daemon $pid of $D is not running"

manifest=$TMP/manifest
: >"$manifest"
for i in $(seq 1 20); do
  head -c $((i * 100000 + 1)) /dev/urandom >"$MP/f$i"
  sync "$MP/f$i"
  echo "$(sum "$MP/f$i")  f$i" >>"$manifest"
done
# Unsynced data in flight at the moment of the crash.
head -c $((8 << 20)) /dev/urandom >"$MP/unsynced"

kill -9 "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "daemon $pid survived SIGKILL"

# The filesystem now sees I/O errors; nothing may hang.
rc=0
timeout 30 bash -c "head -c 4M /dev/urandom >'$MP/after' && sync '$MP/after'" 2>/dev/null || rc=$?
[[ $rc -ne 124 ]] || fail "a write on the orphaned mount hung"
[[ $rc -ne 0 ]] || fail "a synced write on the orphaned mount succeeded with no daemon"
timeout 30 blockdev --flushbufs "$dev" 2>/dev/null || true
[[ $(att_daemon "$D") == "$pid dead" ]] || fail "list does not say the daemon is gone"

# Snapshots and resizes of a dead attachment are refused with one line.
expect_fail att_snapshot "$D" >/dev/null

timeout 60 "$PLOOP" umount "$D" ||
  fail "umount after the crash failed"
no_leaks "$D" "$dev"
findmnt -n "$MP" >/dev/null && fail "$MP still mounted"

# The image was left marked in use: it must not mount until checked.
expect_fail att_mount "$D" "$MP" >/dev/null
no_leaks "$D"
"$PLOOP" check -F -d "$D" >"$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "ploop check -F -d failed"; }
"$PLOOP" check "$D" >/dev/null || fail "image not clean after repair"

# A crashed attachment whose pieces an admin released by hand, its device
# number since taken by another disk: umounting the stale one must not touch
# the new one.
E=$TMP/other
new_disk "$E" 64M
dev=$(att_mount "$D" "$MP")
read -r pid _ < <(att_daemon "$D")
kill -9 "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
umount "$MP"
losetup -d "$dev"
edev=$(att_mount "$E" "$MP")
echo "stale attachment had $dev, the new one got $edev"
timeout 60 "$PLOOP" umount "$D" ||
  fail "umount of the stale attachment failed"
findmnt -n "$MP" >/dev/null || fail "umount of a stale attachment unmounted another disk"
losetup -n -O BACK-FILE "$edev" | grep -qF "$(fuse_file_of "$(realpath "$E")")" ||
  fail "umount of a stale attachment detached another disk's device"
{ echo ok >"$MP/still-writable" && sync "$MP/still-writable"; } || fail "the other disk stopped working"
att_umount "$E"
no_leaks "$E" "$edev"
"$PLOOP" check -F -d "$D" >/dev/null

dev=$(att_mount "$D")
# Exit 1: the journal was replayed (changes made), which a crash calls for.
rc=0
e2fsck -fy "$dev" >"$TMP/fsck.log" 2>&1 || rc=$?
[[ $rc -le 1 ]] || { cat "$TMP/fsck.log"; fail "e2fsck could not recover the filesystem (exit $rc)"; }
att_umount "$D"
dev=$(att_mount "$D" "$MP")
(cd "$MP" && sha256sum --quiet -c "$manifest") || fail "an fsynced file is damaged after the crash"
att_umount "$D"
no_leaks "$D" "$dev"
# The disk's directory removed under a crashed attachment: umount by its
# old path still releases everything.
G=$TMP/gone
new_disk "$G" 64M
gdir=$(realpath "$G")
gdev=$(att_mount "$G" "$MP")
read -r pid _ < <(att_daemon "$G")
kill -9 "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
rm -rf "$G"
att_umount "$gdir/" || fail "umount by the path of a removed disk failed"
findmnt -n "$MP" >/dev/null && fail "$MP still mounted"
! att_list | grep -qF "$gdir" || fail "the removed disk is still listed"
! losetup -n -O BACK-FILE "$gdev" 2>/dev/null | grep -qF "$(fuse_file_of "$gdir")" || fail "$gdev still bound"
echo "mount-crash: ok"
