#!/usr/bin/env bash
# XFS on the kmod-free attach: made by the attach's mkfs helper, grown
# online while mounted (df shows it at once: xfs_growfs needs no
# CAP_SYS_RESOURCE), shrinking it mounted is refused with a reason,
# xfs_repair -n clean after umount, files intact after a remount.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"
requires mkfs.xfs
requires xfs_repair

D=$TMP/disk MP=$TMP/mnt
mkdir -p "$MP"
new_disk "$D" 512M xfs
dev=$(att_mount "$D" "$MP")
findmnt -n -o FSTYPE "$MP" | grep -qx xfs || fail "$MP is not an xfs mount"
manifest=$TMP/manifest
: >"$manifest"
for i in 1 2 3; do
  head -c $((i * 5000000)) /dev/urandom >"$MP/f$i"
  echo "$(sum "$MP/f$i")  f$i" >>"$manifest"
done

before=$(df -B1 --output=size "$MP" | tail -1)
att_resize "$D" 1G
after=$(df -B1 --output=size "$MP" | tail -1)
echo "df size: $before -> $after"
[[ $after -gt $((before + 450 * 1048576)) ]] || fail "df size $before -> $after after online grow to 1G"
head -c $((600 << 20)) /dev/zero >"$MP/big" || fail "cannot use the grown space"
echo "$(sum "$MP/big")  big" >>"$manifest"
expect_fail att_resize "$D" 768M | grep -q "cannot shrink" || fail "no reason for the refused shrink"

att_umount "$D"
no_leaks "$D" "$dev"
dev=$(att_mount "$D")
xfs_repair -n "$dev" >"$TMP/repair.log" 2>&1 || { cat "$TMP/repair.log"; fail "xfs_repair found problems"; }
att_umount "$D"
dev=$(att_mount "$D" "$MP")
(cd "$MP" && sha256sum --quiet -c "$manifest") || fail "files changed across umount/mount"
att_umount "$MP"
no_leaks "$D" "$dev"
echo "mount-xfs: ok"
