#!/usr/bin/env bash
# Local attach without a kernel module (FUSE file + loop + ext4), end to end:
# init with ext4, mount, files with checksums, snapshot under a running
# writer, read-only mount of that snapshot, online grow, umount, e2fsck
# clean, mount again with every file intact; errors leave nothing behind.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"

D=$TMP/disk MP=$TMP/mnt SNAP_MP=$TMP/snap
mkdir -p "$MP" "$SNAP_MP"
new_disk "$D" 1G

dev=$(att_mount "$D" "$MP")
[[ $dev == /dev/loop* ]] || fail "mount printed '$dev', expected a loop device"
[[ $(cat /sys/block/${dev#/dev/}/loop/dio) == 1 ]] || fail "$dev is not using direct I/O"
findmnt -n -o FSTYPE "$MP" | grep -qx ext4 || fail "$MP is not an ext4 mount"
att_list | grep -qF "$(realpath "$D")" || fail "list does not show $D"

# A second attach of the same disk is refused with one line, and harmless.
expect_fail att_mount "$D" "$TMP" >/dev/null

# Files with checksums: a few sizes, fsynced.
manifest=$TMP/manifest
: >"$manifest"
for i in 1 2 3 4 5; do
  head -c $((i * 3 * 1048576 + 4097)) /dev/urandom >"$MP/file$i"
  echo "$(sum "$MP/file$i")  file$i" >>"$manifest"
done
sync -f "$MP"

# Snapshot while a writer keeps writing and fsyncing; every file the writer
# finished before the snapshot began must be in the snapshot, intact.
(
  i=0
  while [[ ! -e $TMP/stop ]]; do
    i=$((i + 1))
    head -c $((RANDOM * 16 + 1)) /dev/urandom >"$MP/w$i"
    sync "$MP/w$i"
    echo "$(sum "$MP/w$i")  w$i" >>"$MP/.writer-log"
  done
) &
writer=$!
cleanup "touch '$TMP/stop'; wait $writer 2>/dev/null"
sleep 1
cat "$manifest" "$MP/.writer-log" >"$TMP/before-snapshot"
guid=$(att_snapshot "$D" | grep -o '{[0-9a-f-]*}' | head -1)
[[ -n $guid ]] || fail "snapshot printed no GUID"
sleep 1
touch "$TMP/stop"
wait $writer
[[ $(wc -l <"$TMP/before-snapshot") -gt 5 ]] || fail "the writer wrote nothing before the snapshot"
cat "$MP/.writer-log" >>"$manifest"

# The snapshot, read-only, next to the live disk (a second daemon serves
# it; older ploop-nbd builds without --snapshot cannot).
if "$PLOOP_NBD" --help 2>&1 | grep -q -- --snapshot; then
sdev=$(att_mount -r -u "$guid" "$D" "$SNAP_MP")
[[ $sdev != "$dev" ]] || fail "the snapshot got the live disk's device"
(cd "$SNAP_MP" && sha256sum --quiet -c "$TMP/before-snapshot") || fail "snapshot content differs"
expect_fail touch "$SNAP_MP/new" >/dev/null
att_umount "$SNAP_MP"
no_leaks_dev "$sdev" "$D" "$guid"
# FIFREEZE during the snapshot left ext4 clean: no journal to replay.
sdev=$(att_mount -u "$guid" "$D")
e2fsck -fn "$sdev" >"$TMP/snapfsck.log" 2>&1 || { cat "$TMP/snapfsck.log"; fail "the snapshot's ext4 is not clean"; }
att_umount "$sdev"
no_leaks_dev "$sdev" "$D" "$guid"
else
  echo "ploop-nbd has no --snapshot: read-only snapshot mount not tested"
fi

# Online grow.  ext4 grows online only with CAP_SYS_RESOURCE (the ioctl
# checks it); without it the disk and device grow, the refusal is one line,
# and the filesystem grows offline after umount.  mount-xfs.sh shows df
# growing online where the capability is not needed.
before=$(df -B1 --output=size "$MP" | tail -1)
if (((0x$(awk '/^CapEff/{print $2}' /proc/self/status) >> 24) & 1)); then
  att_resize "$D" 2G
  after=$(df -B1 --output=size "$MP" | tail -1)
  [[ $after -gt $((before + 900 * 1048576)) ]] || fail "df size $before -> $after after resize to 2G"
  offline_grow=false
else
  expect_fail att_resize "$D" 2G | grep -q CAP_SYS_RESOURCE || fail "no reason given for the refused grow"
  offline_grow=true
fi
[[ $(blockdev --getsize64 "$dev") -eq $((2 << 30)) ]] || fail "$dev did not grow to 2 GiB"

# A busy mount point: umount refuses with one line and undoes nothing.
(cd "$MP" && exec sleep 30) &
busy=$!
sleep 0.2
expect_fail att_umount "$D" | grep -qi busy || fail "umount of a busy mount point did not say busy"
findmnt -n "$MP" >/dev/null || fail "a refused umount unmounted $MP"
[[ -f $MP/file1 ]] || fail "files unreachable after a refused umount"
kill $busy
wait $busy 2>/dev/null || true

att_umount "$D"
no_leaks "$D" "$dev"
findmnt -n "$MP" >/dev/null && fail "$MP still mounted"
$offline_grow && att_resize "$D" 2G

# Offline check through a device-only attach.
dev=$(att_mount "$D")
e2fsck -fn "$dev" >"$TMP/fsck.log" 2>&1 || { cat "$TMP/fsck.log"; fail "e2fsck found problems"; }
att_umount "$D"
"$PLOOP" check "$D" >/dev/null || fail "ploop check is not clean after umount"

dev=$(att_mount "$D" "$MP")
(cd "$MP" && sha256sum --quiet -c "$manifest") || fail "files changed across umount/mount"
after=$(df -B1 --output=size "$MP" | tail -1)
[[ $after -gt $((before + 900 * 1048576)) ]] || fail "df size $before -> $after after resize to 2G"
head -c $((700 << 20)) /dev/zero >"$MP/big" || fail "cannot use the grown space"
[[ $(sum "$MP/big") == $(head -c $((700 << 20)) /dev/zero | sha256sum | cut -d' ' -f1) ]] ||
  fail "big file reads back wrong"
att_umount "$MP"
no_leaks "$D" "$dev"

# Offline shrink of the unmounted disk below what was ever written: ext4
# shrinks first (e2fsck + resize2fs), its freed tail is discarded, then the
# image; every file survives and both checks stay clean.
"$PLOOP" resize -s 1700M "$D" >/dev/null
"$PLOOP" check "$D" >/dev/null || fail "ploop check after the shrink"
dev=$(att_mount "$D")
[[ $(blockdev --getsize64 "$dev") -eq $((1700 << 20)) ]] || fail "disk is not 1700M after the shrink"
e2fsck -fn "$dev" >"$TMP/fsck.log" 2>&1 || { cat "$TMP/fsck.log"; fail "e2fsck after the shrink"; }
att_umount "$D"
dev=$(att_mount "$D" "$MP")
(cd "$MP" && sha256sum --quiet -c "$manifest") || fail "files changed by the shrink"
att_umount "$D"

# Bad input: one-line errors, no leftovers.
expect_fail att_umount "$D" >/dev/null
expect_fail att_mount "$TMP/nonexistent" "$MP" >/dev/null
mkdir -p "$TMP/blank"
"$PLOOP" init -t none -s 64M "$TMP/blank/root.hds" >/dev/null
expect_fail att_mount "$TMP/blank" "$MP" | grep -qi "no filesystem" || fail "no 'no filesystem' message"
no_leaks "$TMP/blank"
echo "mount-lifecycle: ok"
