#!/usr/bin/env bash
# Offline resize (grow keeps every byte and reads zeros beyond; shrink keeps
# the head, refuses to drop data without --force) and format conversion
# (v1 <-> v2 round trip, ploop1 <-> raw), each checked byte for byte and with
# qemu-img check / compare.
source "$(dirname "$0")/functions.sh"
requires python3
requires qemu-img
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
TOOL="python3 $(dirname "$0")/ploop-image-tool.py"
export PLOOP_NO_PROGRESS=1
D=$TMP/disk
json_field() { $PLOOP info --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }
export_cmp() { # export_cmp MODEL [what]
  $PLOOP export -f -o "$TMP/x.raw" "$D" >/dev/null
  cmp "$TMP/x.raw" "$1" || fail "${2:-disk} differs from its model"
  qemu-img check -f parallels "$D/root.hds" >/dev/null || fail "${2:-disk}: qemu-img check"
}

$TOOL mkraw "$TMP/m.raw" $((32 << 20)) 5
$PLOOP import "$TMP/m.raw" "$D" >/dev/null

# --- grow: old bytes kept, new tail zero, writable
$PLOOP resize -s 64M "$D"
[[ $(json_field "$D" virtual_size) -eq $((64 << 20)) ]] || fail "size after grow"
truncate -s 64M "$TMP/m.raw"
export_cmp "$TMP/m.raw" "grown disk"
$TOOL scribble "$TMP/m.raw" 21 8
$PLOOP import "$TMP/m.raw" "$D" >/dev/null
export_cmp "$TMP/m.raw" "grown disk after writes"
qemu-img compare -f parallels -F raw "$D/root.hds" "$TMP/m.raw" || fail "qemu compare after grow"

# Grow far enough that the BAT needs a second cluster (> 262128 MiB clusters
# worth): data clusters right after the BAT must move, and survive it.
$PLOOP resize -s 300G "$D"
[[ $(json_field "$D" virtual_size) -eq $((300 << 30)) ]] || fail "size after big grow"
$PLOOP export -f -o "$TMP/x.raw" "$D" >/dev/null
cmp -n $((64 << 20)) "$TMP/x.raw" "$TMP/m.raw" || fail "data lost when the BAT grew"
[[ $(du -k "$TMP/x.raw" | cut -f1) -lt $((1 << 20)) ]] || fail "export of a thin 300G disk is not sparse"
rm -f "$TMP/x.raw"
qemu-img check -f parallels "$D/root.hds" >/dev/null || fail "qemu-img check after the BAT grew"
$PLOOP resize -s 64M "$D"
export_cmp "$TMP/m.raw" "disk shrunk back to 64M"

# --- shrink: refuses to drop data without --force, keeps the head with it
before=$(sum "$D/root.hds")
msg=$(expect_fail $PLOOP resize -s 16M "$D")
echo "$msg"
[[ $(sum "$D/root.hds") == "$before" ]] || fail "refused shrink changed the image"
$PLOOP resize --force -s 16M "$D"
[[ $(json_field "$D" virtual_size) -eq $((16 << 20)) ]] || fail "size after shrink"
truncate -s 16M "$TMP/m.raw"
export_cmp "$TMP/m.raw" "shrunk disk"
# Growing again must not resurrect the cut data: the tail reads zeros.
$PLOOP resize -s 32M "$D"
truncate -s 32M "$TMP/m.raw"
export_cmp "$TMP/m.raw" "regrown disk"

# --- resize of a disk with snapshots: every snapshot keeps its own bytes
s1=$($PLOOP snapshot "$D")
cp "$TMP/m.raw" "$TMP/s1.raw"
$PLOOP resize -s 48M "$D"
truncate -s 48M "$TMP/m.raw"
$TOOL scribble "$TMP/m.raw" 33 5
$PLOOP import "$TMP/m.raw" "$D" >/dev/null
$PLOOP export -f -o "$TMP/x.raw" "$D" >/dev/null
cmp "$TMP/x.raw" "$TMP/m.raw" || fail "top after resize with a snapshot"
$PLOOP export -f -u "$s1" -o "$TMP/x.raw" "$D" >/dev/null
cmp -n $((32 << 20)) "$TMP/x.raw" "$TMP/s1.raw" || fail "snapshot data after resize"
$PLOOP snapshot-merge -A "$D"
export_cmp "$TMP/m.raw" "merged after resize"

# --- convert v2 -> v1 -> v2: bytes identical, signature switches, qemu agrees
sig() { $TOOL header "$D/root.hds" | python3 -c 'import json,sys; print(json.load(sys.stdin)["signature"])'; }
[[ $(sig) == WithouFreSpacExt ]] || fail "expected a v2 image"
$PLOOP convert -v 1 "$D"
[[ $(sig) == WithoutFreeSpace ]] || fail "convert -v 1 left signature $(sig)"
[[ $(json_field "$D" format_version) -eq 1 ]] || fail "info after convert -v 1"
export_cmp "$TMP/m.raw" "v1 disk"
qemu-img compare -f parallels -F raw "$D/root.hds" "$TMP/m.raw" || fail "qemu compare v1"
$PLOOP convert -v 2 "$D"
[[ $(sig) == WithouFreSpacExt ]] || fail "convert -v 2 left signature $(sig)"
export_cmp "$TMP/m.raw" "v2 disk after the round trip"
$PLOOP check -f "$D" >/dev/null || fail "check after the round trip"

# v1 BAT entries count sectors, so other cluster sizes convert too (qemu reads them).
$PLOOP import -b 128 "$TMP/m.raw" "$TMP/d64" >/dev/null
$PLOOP convert -v 1 "$TMP/d64"
qemu-img compare -f parallels -F raw "$TMP/d64/root.hds" "$TMP/m.raw" || fail "qemu compare v1 64K"
$PLOOP convert -v 2 "$TMP/d64"
qemu-img compare -f parallels -F raw "$TMP/d64/root.hds" "$TMP/m.raw" || fail "qemu compare v2 64K"

# A v1 image cannot map 2 TiB or more (its BAT entries are 32-bit sector numbers).
$PLOOP resize -s 3T "$TMP/d64"
before=$(sum "$TMP/d64/root.hds")
expect_fail $PLOOP convert -v 1 "$TMP/d64" | grep -qiE 'TiB|too (big|large)|exceed|limit' ||
  fail "convert -v 1 of a 3 TiB disk: wrong message"
[[ $(sum "$TMP/d64/root.hds") == "$before" ]] || fail "refused convert changed the image"

# --- convert ploop1 -> raw -> ploop1
$PLOOP convert -f raw "$D"
grep -q '<Type>Plain</Type>' "$D/DiskDescriptor.xml" || fail "descriptor does not say Plain"
rawfile=$($PLOOP snapshot-list -H -o fname "$D")
cmp -n $((48 << 20)) "$rawfile" "$TMP/m.raw" || fail "raw base differs from the model"
export_raw_cmp() {
  $PLOOP export -f -o "$TMP/x.raw" "$D" >/dev/null
  cmp "$TMP/x.raw" "$TMP/m.raw" || fail "$1"
}
export_raw_cmp "export of a raw-based disk"
$PLOOP convert -f ploop1 "$D"
grep -q '<Type>Compressed</Type>' "$D/DiskDescriptor.xml" || fail "descriptor does not say Compressed"
export_cmp "$TMP/m.raw" "disk converted back to ploop1"
echo "ploop-resize-convert: ok"
