#!/usr/bin/env bash
# The CLI's attach verbs end to end (root, FUSE, loop): init -t ext4, mount,
# list, info while served, online snapshot of a mounted disk (its export is a
# clean ext4 holding exactly the files written before it: e2fsck, debugfs),
# read-only and snapshot mounts, umount, offline grow and shrink of a disk
# holding ext4, and the one-line errors for double mount / nothing attached.
source "$(dirname "$0")/functions.sh"
requires_root
requires mkfs.ext4
requires e2fsck
requires debugfs
requires python3
[[ -e /dev/fuse ]] || skip "no /dev/fuse"
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
export PLOOP_NO_PROGRESS=1
D=$TMP/disk
M=$TMP/mnt
M2=$TMP/mnt2
mkdir -p "$D" "$M" "$M2"
cleanup "$PLOOP umount '$M2' >/dev/null 2>&1; $PLOOP umount '$D' >/dev/null 2>&1"
jq_py() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# --- init -t ext4: the disk holds a filesystem (fsck-clean), nothing stays attached
$PLOOP init -s 256M -t ext4 "$D/root.hds"
$PLOOP info --json "$D" >"$TMP/i.json"
[[ $(jq_py 'd["allocated_clusters"] > 0 and not d["served"] and not d["in_use"]' <"$TMP/i.json") == True ]] ||
  fail "init -t ext4: $(cat "$TMP/i.json")"
$PLOOP list | grep -qF "$D" && fail "init left the disk attached"

# --- mount: device printed, listed, info says served and mounted
dev=$($PLOOP mount -m "$M" "$D")
[[ $dev == /dev/* && -b $dev ]] || fail "mount printed '$dev'"
findmnt -n -o FSTYPE "$M" | grep -qx ext4 || fail "not mounted as ext4 on $M"
$PLOOP list | grep -F "$D" | grep -qF "$M" || fail "list: $($PLOOP list)"
[[ $($PLOOP list --json | jq_py "[a['device'] for a in d if a['disk'] == '$D' and a['alive']]") == "['$dev']" ]] ||
  fail "list --json"
$PLOOP info --json "$D" >"$TMP/i.json"
[[ $(jq_py 'd["served"] and d["in_use"] and d["device"] == "'"$dev"'" and d["mount_point"] == "'"$M"'"' \
  <"$TMP/i.json") == True ]] || fail "info while mounted: $(cat "$TMP/i.json")"
$PLOOP info "$D" | grep -q '^served: *yes, ploop-nbd pid [0-9]' || fail "info text: served"
# The mounted filesystem's usage agrees with df.
df_kb=$(df -k --output=size "$M" | tail -1)
[[ $($PLOOP info --json "$D" | jq_py 'd["filesystem"]["bytes"] // 1024') -eq $df_kb ]] ||
  fail "info filesystem size differs from df ($df_kb KiB)"

head -c 1M /dev/zero >"$TMP/i.raw"
# While served: a second mount, a check and offline-only verbs are refused
# with one line and exit 17 (busy, SYSEXIT_EBUSY).
for cmd in "mount -m $M2" "check -f" "import $M/../i.raw" "convert -v 1" "snapshot-switch -u {5fbaabe3-6958-40ff-92a7-860e329aab41}"; do
  # shellcheck disable=SC2086
  expect_fail $PLOOP $cmd "$D"
  rc=0
  # shellcheck disable=SC2086
  $PLOOP $cmd "$D" >/dev/null 2>&1 || rc=$?
  [[ $rc -eq 17 ]] || fail "'ploop $cmd' on a mounted disk exited $rc, expected 17 (SYSEXIT_EBUSY)"
done

# --- files, an online snapshot, more files
head -c $((20 << 20)) /dev/urandom >"$M/one"
echo "before the snapshot" >"$M/note"
snap=$($PLOOP snapshot "$D")
[[ $snap =~ ^\{[0-9a-f-]{36}\}$ ]] || fail "online snapshot printed '$snap'"
echo "after the snapshot" >"$M/note"
head -c $((8 << 20)) /dev/urandom >"$M/two"
sync
[[ $($PLOOP snapshot-list -H -o uuid "$D" | wc -l) -eq 2 ]] || fail "snapshot-list after online snapshot"

# The snapshot exports (while the top stays mounted) as a clean ext4 with the old files.
$PLOOP export -u "$snap" -o "$TMP/snap.raw" "$D" >/dev/null
e2fsck -f -n "$TMP/snap.raw" >/dev/null 2>&1 || fail "the snapshot's filesystem is not clean"
debugfs -R "dump /one $TMP/one.out" "$TMP/snap.raw" >/dev/null 2>&1
cmp "$TMP/one.out" "$M/one" || fail "file 'one' differs in the snapshot"
[[ $(debugfs -R "cat /note" "$TMP/snap.raw" 2>/dev/null) == "before the snapshot" ]] || fail "note in snapshot"
debugfs -R "stat /two" "$TMP/snap.raw" 2>&1 | grep -q 'File not found' || fail "'two' is in the snapshot"
rm -f "$TMP/snap.raw" "$TMP/one.out"

# --- a snapshot mounts read-only beside the mounted top (when the daemon can)
if $PLOOP_NBD --help 2>&1 | grep -q -- --snapshot; then
  $PLOOP mount -u "$snap" -m "$M2" "$D" >/dev/null
  [[ $(cat "$M2/note") == "before the snapshot" && ! -e $M2/two ]] || fail "snapshot mount content"
  cmp "$M2/one" "$M/one" || fail "snapshot mount: 'one' differs"
  touch "$M2/x" 2>/dev/null && fail "a snapshot mount is writable"
  $PLOOP umount "$M2"
fi

# --- online merge of the snapshot while the disk stays mounted and written to
head -c $((4 << 20)) /dev/urandom >"$M/three" &
writer=$!
rc=0
$PLOOP snapshot-merge "$D" || rc=$?
wait $writer # before any failure: a busy mount point would block the cleanup's umount
[[ $rc -eq 0 ]] || fail "online merge of a mounted disk exited $rc"
[[ $($PLOOP snapshot-list -H -o uuid "$D" | wc -l) -eq 1 ]] || fail "online merge left several images"
[[ $($PLOOP info --json "$D" | jq_py 'd["server"]["depth"]') -eq 1 ]] || fail "daemon still sees 2 deltas"
sync

# --- compact: a deleted 20 MiB file gives its clusters back, the image file shrinks
top=$($PLOOP snapshot-list -H -o current,fname "$D" | awk '$1 == "*" {print $2}')
before=$(stat -c %s "$top")
rm "$M/one"
sync
out=$($PLOOP compact "$D")
echo "$out"
reclaimed=$(sed -n 's/.* \([0-9]*\) bytes reclaimed.*/\1/p' <<<"$out")
after=$(stat -c %s "$top")
[[ $reclaimed -ge $((16 << 20)) && $after -le $((before - (16 << 20))) ]] ||
  fail "compact reclaimed '$reclaimed' bytes, image $before -> $after"

# --- umount: nothing attached, mark cleared, disk clean; second umount is an error
sha_two=$(sum "$M/two")
sha_three=$(sum "$M/three")
$PLOOP umount "$D"
$PLOOP list | grep -qF "$D" && fail "still listed after umount"
findmnt "$M" >/dev/null && fail "still mounted after umount"
[[ $($PLOOP info --json "$D" | jq_py 'd["in_use"] or d["served"]') == False ]] || fail "in use after umount"
$PLOOP check -f "$D" | grep -q clean || fail "check after umount"
msg=$(expect_fail $PLOOP umount "$D")
echo "$msg"
rc=0
$PLOOP umount "$D" 2>/dev/null || rc=$?
[[ $rc -eq 4 ]] || fail "umount of a detached disk exited $rc, expected 4 (SYSEXIT_OPEN)"

# --- offline grow of a disk holding ext4: the filesystem grows too, files kept
$PLOOP resize -s 512M "$D"
$PLOOP mount -m "$M" "$D" >/dev/null
size_kb=$(df -k --output=size "$M" | tail -1)
[[ $size_kb -gt $((400 * 1024)) ]] || fail "filesystem did not grow: ${size_kb} KiB"
[[ $(sum "$M/two") == "$sha_two" && $(sum "$M/three") == "$sha_three" ]] || fail "files after grow"
[[ $(cat "$M/note") == "after the snapshot" ]] || fail "note after grow"
$PLOOP umount "$M"

# --- read-only mount refuses writes
$PLOOP mount -r -m "$M" "$D" >/dev/null
touch "$M/x" 2>/dev/null && fail "a read-only mount is writable"
$PLOOP umount "$D"

# --- offline shrink: the filesystem shrinks first, files kept
$PLOOP resize -s 300M "$D"
[[ $($PLOOP info --json "$D" | jq_py 'd["virtual_size"]') -eq $((300 << 20)) ]] || fail "size after shrink"
$PLOOP mount -m "$M" "$D" >/dev/null
[[ $(sum "$M/two") == "$sha_two" ]] || fail "files after shrink"
$PLOOP umount "$D"
$PLOOP check -f "$D" | grep -q clean || fail "check after shrink"
echo "ploop-mount: ok"
