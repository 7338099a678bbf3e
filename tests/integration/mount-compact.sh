#!/usr/bin/env bash
# Compaction of a mounted disk: 512 MiB written then deleted; FITRIM hands
# the free space to the disk as discards (holes), then the daemon moves the
# tail clusters into the holes: the image file shrinks by >= 90% of what was
# freed, files written after the big one (whose clusters had to move) keep
# their bytes, and ploop check and e2fsck stay clean.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"

D=$TMP/disk MP=$TMP/mnt
mkdir -p "$MP"
new_disk "$D" 1G
dev=$(att_mount "$D" "$MP")
img=$D/root.hds
manifest=$TMP/manifest
: >"$manifest"
keep() { head -c "$2" /dev/urandom >"$MP/$1"; echo "$(sum "$MP/$1")  $1" >>"$manifest"; }

keep before 20000000
head -c $((512 << 20)) /dev/urandom >"$MP/big"
keep after1 30000000
keep after2 7340033
sync -f "$MP"
size_full=$(stat -c %s "$img")
rm "$MP/big"
sync -f "$MP"

out=$(att_compact "$D" 2>&1) || {
  grep -q "unknown control command" <<<"$out" && skip "ploop-nbd has no COMPACT control command yet"
  fail "compact: $out"
}
echo "compact: $out"
size_compact=$(stat -c %s "$img")
freed=$((512 << 20))
shrunk=$((size_full - size_compact))
echo "image: $size_full -> $size_compact bytes (shrunk $shrunk of $freed freed)"
[[ $shrunk -ge $((freed * 9 / 10)) ]] || fail "image shrank by $shrunk bytes, expected >= 90% of $freed"
(cd "$MP" && sha256sum --quiet -c "$manifest") || fail "files changed by compaction"

att_umount "$D"
no_leaks "$D" "$dev"
"$PLOOP" check "$D" >"$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "ploop check after compaction"; }
dev=$(att_mount "$D")
e2fsck -fn "$dev" >"$TMP/fsck.log" 2>&1 || { cat "$TMP/fsck.log"; fail "e2fsck after compaction"; }
att_umount "$D"
dev=$(att_mount "$D" "$MP")
(cd "$MP" && sha256sum --quiet -c "$manifest") || fail "files changed across remount after compaction"
att_umount "$D"
echo "mount-compact: ok"
