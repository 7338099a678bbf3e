#!/usr/bin/env bash
# OpenVZ's own `ploop check` (Debian's ploop 1.15, unpacked by install-deps
# into /opt/openvz-ploop) as a peer: every image our verbs write (init,
# import, snapshot, merge, resize with a BAT that grows over data, convert,
# compact) must pass it with no message and exit 0. It refuses holes and
# unwritten extents that are not whole clusters ("ploop image is sparse",
# exit 11). A snapshot stays cheap: its new delta allocates the BAT area of
# a 2 TiB disk without writing it.
source "$(dirname "$0")/functions.sh"
requires python3
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
OVZ=${OPENVZ_PLOOP:-/opt/openvz-ploop/ploop}
[[ -x $OVZ ]] || skip "OpenVZ's ploop not unpacked (scripts/install-deps.sh)"
TOOL="python3 $(dirname "$0")/ploop-image-tool.py"
export PLOOP_NO_PROGRESS=1

# ovz_ok WHAT FILE...: OpenVZ's forced, detailed, read-only check of each
# delta file passes silently (its only chatter on a clean image is none).
ovz_ok() {
  local what=$1 f out rc
  shift
  for f in "$@"; do
    local before
    before=$(sum "$f")
    rc=0
    out=$("$OVZ" check -f -c -r "$f" 2>&1) || rc=$?
    [[ $rc -eq 0 ]] || fail "$what: OpenVZ's check of ${f#"$TMP"/} exits $rc: $out"
    if grep -Eiq 'sparse|uninitialized|hole|error|corrupt|fatal|dirty' <<<"$out"; then
      fail "$what: OpenVZ's check of ${f#"$TMP"/} complains: $out"
    fi
    [[ $(sum "$f") == "$before" ]] || fail "$what: OpenVZ's read-only check changed ${f#"$TMP"/}"
  done
  echo "ok: $what ($# image(s))"
}
deltas() { ls "$1"/root.hds* 2>/dev/null; }

# --- init: one BAT cluster, a 4-cluster BAT, small clusters, format v1
for spec in "1G" "2T" "1G -b 64" "1G -v 1"; do
  d=$TMP/init-${spec// /}
  mkdir -p "$d"
  # shellcheck disable=SC2086
  $PLOOP init -t none -s $spec "$d/root.hds" >/dev/null
  ovz_ok "init -s $spec" "$d/root.hds"
done
# A 2 TiB disk's BAT (8 MiB) is allocated, not written: cluster 0 is the
# only data written, whatever the size.
used=$(($(stat -c %b "$TMP/init-2T/root.hds") * 512))
[[ $used -ge $((8 << 20)) ]] || fail "2T BAT area not allocated ($used bytes)"

# --- import into a new disk, then changes into the same disk (some clusters
# change, some become zero and are punched, then compacted away)
D=$TMP/disk
$TOOL mkraw "$TMP/m.raw" $((24 << 20)) 7
$PLOOP import "$TMP/m.raw" "$D" >/dev/null
ovz_ok "import (new disk)" "$D/root.hds"
$TOOL scribble "$TMP/m.raw" 8 6
dd if=/dev/zero of="$TMP/m.raw" bs=1M seek=2 count=6 conv=notrunc status=none
$PLOOP import "$TMP/m.raw" "$D" >/dev/null
ovz_ok "import (into the disk)" "$D/root.hds"

# --- snapshots, and writes on top of them (clusters copied up from below)
s1=$($PLOOP snapshot "$D")
ovz_ok "snapshot" $(deltas "$D")
$TOOL scribble "$TMP/m.raw" 9 10
$PLOOP import "$TMP/m.raw" "$D" >/dev/null
s2=$($PLOOP snapshot "$D")
$TOOL scribble "$TMP/m.raw" 10 10
$PLOOP import "$TMP/m.raw" "$D" >/dev/null
ovz_ok "writes over snapshots" $(deltas "$D")

# --- merge: one snapshot into its parent, snapshot-delete, everything down
$PLOOP snapshot-merge -u "$s2" "$D"
ovz_ok "snapshot-merge" $(deltas "$D")
s3=$($PLOOP snapshot "$D")
$PLOOP snapshot-delete -u "$s3" "$D"
ovz_ok "snapshot-delete" $(deltas "$D")
$PLOOP snapshot-merge -A "$D"
ovz_ok "snapshot-merge -A" $(deltas "$D")
[[ -n $s1 ]] || fail "no snapshot UUID printed"

# --- resize: grow past what one BAT cluster maps (32 KiB clusters: one BAT
# cluster maps 255 MiB), so the data clusters after the BAT move away and
# the BAT grows over them; write into the far end so the new BAT clusters
# get slots; snapshot the grown disk; shrink back (dropped clusters go)
E=$TMP/small
mkdir -p "$E"
$PLOOP init -t none -s 100M -b 64 "$E/root.hds" >/dev/null
$TOOL mkraw "$TMP/e.raw" $((100 << 20)) 12
$PLOOP import "$TMP/e.raw" "$E" >/dev/null
$PLOOP resize -s 1G "$E"
ovz_ok "resize (BAT grows over data)" "$E/root.hds"
s4=$($PLOOP snapshot "$E")
ovz_ok "snapshot of a grown disk" $(deltas "$E")
$PLOOP snapshot-merge -A "$E"
$TOOL mkraw "$TMP/tail.raw" $((8 << 20)) 11 0
truncate -s 1G "$TMP/e.raw"
dd if="$TMP/tail.raw" of="$TMP/e.raw" bs=1M seek=1000 conv=notrunc status=none
$PLOOP import "$TMP/e.raw" "$E" >/dev/null
ovz_ok "writes through a grown BAT" "$E/root.hds"
$PLOOP resize --force -s 50M "$E"
ovz_ok "resize (shrink)" "$E/root.hds"
[[ -n $s4 ]] || fail "no snapshot UUID printed"

# --- convert: format version both ways, base to raw and back
$PLOOP convert -v 1 "$D"
ovz_ok "convert -v 1" "$D/root.hds"
$PLOOP convert -v 2 "$D"
ovz_ok "convert -v 2" "$D/root.hds"
$PLOOP convert -f raw "$D"
$PLOOP convert -f ploop1 "$D"
ovz_ok "convert -f raw, then -f ploop1" "$D/root.hds"

# --- compact of a mounted disk (small writes through a filesystem, a big
# file deleted, discards, tail clusters moved): needs the local attach
if [[ $(id -u) -eq 0 && -c /dev/fuse && -e /dev/loop-control ]] && command -v mkfs.ext4 >/dev/null &&
  [[ -x $PLOOP_NBD ]]; then
  export PLOOP_NBD
  C=$TMP/ct MP=$TMP/mnt
  mkdir -p "$C" "$MP"
  $PLOOP init -s 1G -t ext4 "$C/root.hds" >/dev/null
  ovz_ok "init -t ext4" "$C/root.hds"
  $PLOOP mount -m "$MP" "$C" >/dev/null
  cleanup "$PLOOP umount '$C' >/dev/null 2>&1"
  head -c $((64 << 20)) /dev/urandom >"$MP/big"
  head -c 3000000 /dev/urandom >"$MP/keep"
  for i in $(seq 1 40); do echo "$i" >"$MP/small.$i"; done
  sync -f "$MP"
  rm "$MP/big"
  $PLOOP compact "$C" >/dev/null
  $PLOOP umount "$C"
  ovz_ok "compact of a mounted disk" $(deltas "$C")
else
  echo "note: compact part not run (needs root, FUSE, loop devices, mkfs.ext4)"
fi
echo "openvz-check: ok"
