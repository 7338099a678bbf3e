#!/usr/bin/env bash
# Offline compaction (`ploop compact` / `balloon discard` of a disk nobody
# serves): the ext4 free-block bitmap is read from the image, the top's
# clusters of free blocks are discarded and the image shrinks by >= 90% of
# what was deleted; ploop check, OpenVZ's check and e2fsck stay clean and
# the remaining files keep their bytes across a remount. XFS, a disk with
# no filesystem and an unclean ext4 are refused with one line and the
# image unchanged. SIGINT at random moments leaves a consistent image.
source "$(dirname "$0")/functions.sh"
source "$(dirname "$0")/mount-common.inc"
export PLOOP_NO_PROGRESS=1
OVZ=${OPENVZ_PLOOP:-/opt/openvz-ploop/ploop}

D=$TMP/disk MP=$TMP/mnt
mkdir -p "$MP"
manifest=$TMP/manifest
: >"$manifest"
keep() { head -c "$2" /dev/urandom >"$MP/$1"; echo "$(sum "$MP/$1")  $1" >>"$manifest"; }
code_is() { # WANT CMD...: exits WANT with one line on stderr
  local want=$1 rc=0
  shift
  expect_fail "$@" >/dev/null
  "$@" >/dev/null 2>&1 || rc=$?
  [[ $rc -eq $want ]] || fail "'$*' exited $rc, expected $want"
}
# all_clean WHAT: ploop check, OpenVZ's check of every delta, e2fsck of the
# exported disk, and the kept files byte-identical after a remount.
all_clean() {
  "$PLOOP" check "$D" >"$TMP/check.log" 2>&1 || { cat "$TMP/check.log"; fail "$1: ploop check"; }
  if [[ -x $OVZ ]]; then
    local f out
    for f in "$D"/root.hds*; do
      out=$("$OVZ" check -f -c -r "$f" 2>&1) || fail "$1: OpenVZ's check of ${f##*/}: $out"
    done
  fi
  rm -f "$TMP/x.raw"
  "$PLOOP" export -o "$TMP/x.raw" "$D" >/dev/null || fail "$1: export"
  e2fsck -fn "$TMP/x.raw" >"$TMP/fsck.log" 2>&1 || { cat "$TMP/fsck.log"; fail "$1: e2fsck"; }
  rm -f "$TMP/x.raw"
  att_mount "$D" "$MP" >/dev/null || fail "$1: remount"
  (cd "$MP" && sha256sum --quiet -c "$manifest") || fail "$1: files changed"
  att_umount "$D" >/dev/null
}
# fill_and_delete MIB: a file of MIB MiB written between kept files, then deleted.
fill_and_delete() {
  att_mount "$D" "$MP" >/dev/null || fail "mount"
  keep "before$2" 3000000
  head -c $(($1 << 20)) /dev/urandom >"$MP/big"
  keep "after$2" 5000001
  sync -f "$MP"
  rm "$MP/big"
  att_umount "$D" >/dev/null
}

new_disk "$D" 512M
fill_and_delete 200 0
img=$D/root.hds
size_full=$(stat -c %s "$img")
out=$("$PLOOP" compact "$D") || fail "offline compact"
echo "compact: $out"
grep -q "offline (ext2/3/4)" <<<"$out" || fail "compact did not say it ran offline: $out"
size_compact=$(stat -c %s "$img")
shrunk=$((size_full - size_compact))
echo "image: $size_full -> $size_compact bytes (shrunk $shrunk of $((200 << 20)) deleted)"
[[ $shrunk -ge $(((200 << 20) * 9 / 10)) ]] || fail "image shrank by $shrunk bytes, expected >= 90% of 200 MiB"
all_clean "offline compact"
# Again: nothing left to give back, nothing changes but the in-use mark's round trip.
out=$("$PLOOP" balloon discard "$D") || fail "balloon discard"
grep -q " 0 bytes reclaimed" <<<"$out" || fail "a second compaction reclaimed more: $out"
echo "ok: offline compact (shrank by $shrunk bytes)"

# --- with a snapshot: only the top's clusters go
"$PLOOP" snapshot "$D" >/dev/null || fail "snapshot"
fill_and_delete 60 1
"$PLOOP" compact "$D" >/dev/null || fail "offline compact over a snapshot"
all_clean "offline compact over a snapshot"
echo "ok: offline compact of a top over a snapshot"

# --- refused, nothing changed: no filesystem, XFS, an unclean ext4
unchanged() { # DIR CMD...: fails with one line, exit 38, the files' bytes unchanged
  local dir=$1 before
  shift
  before=$(cat "$dir"/root.hds "$dir"/DiskDescriptor.xml | sha256sum)
  code_is 38 "$@"
  [[ $(cat "$dir"/root.hds "$dir"/DiskDescriptor.xml | sha256sum) == "$before" ]] || fail "'$*' changed $dir"
}
mkdir -p "$TMP/nofs"
"$PLOOP" init -t none -s 64M "$TMP/nofs/root.hds" >/dev/null
unchanged "$TMP/nofs" "$PLOOP" compact "$TMP/nofs"
expect_fail "$PLOOP" compact "$TMP/nofs" | grep -q "ext2/3/4" || fail "no filesystem: message does not say ext2/3/4"
if command -v mkfs.xfs >/dev/null && new_disk "$TMP/xfs" 320M xfs 2>/dev/null; then
  unchanged "$TMP/xfs" "$PLOOP" compact "$TMP/xfs"
  err=$(expect_fail "$PLOOP" compact "$TMP/xfs")
  grep -q "xfs" <<<"$err" && grep -q "mount" <<<"$err" || fail "xfs: message does not say to mount it: $err"
  echo "ok: xfs refused offline ($err)"
fi
if command -v debugfs >/dev/null; then
  rm -f "$TMP/u.raw"
  "$PLOOP" export -o "$TMP/u.raw" "$D" >/dev/null
  debugfs -w -R "ssv state 0" "$TMP/u.raw" >/dev/null 2>&1 || fail "debugfs ssv state"
  "$PLOOP" import "$TMP/u.raw" "$TMP/unclean" >/dev/null || fail "import of the unclean filesystem"
  rm -f "$TMP/u.raw"
  unchanged "$TMP/unclean" "$PLOOP" compact "$TMP/unclean"
  expect_fail "$PLOOP" compact "$TMP/unclean" | grep -q "e2fsck" || fail "unclean: message does not say e2fsck"
  echo "ok: an unclean ext4 refused"
fi

# --- SIGINT at a few moments: exit 0 or 130, the image consistent
for delay in 0.02 0.1 0.3; do
  fill_and_delete 150 "i${delay#0.}"
  "$PLOOP" compact "$D" >"$TMP/int.log" 2>&1 &
  pid=$!
  sleep "$delay"
  kill -INT "$pid" 2>/dev/null || true
  rc=0
  wait "$pid" || rc=$?
  [[ $rc -eq 0 || $rc -eq 130 ]] || { cat "$TMP/int.log"; fail "compact interrupted after ${delay}s exited $rc"; }
  [[ $rc -eq 0 ]] || grep -q "interrupted by SIGINT" "$TMP/int.log" || fail "no 'interrupted' line: $(cat "$TMP/int.log")"
  all_clean "compact interrupted after ${delay}s (exit $rc)"
  echo "ok: SIGINT after ${delay}s: exit $rc: $(grep -o 'offline.*' "$TMP/int.log" || true)"
done
# What an interruption left is finished by the next run.
"$PLOOP" compact "$D" >/dev/null || fail "compact after the interruptions"
all_clean "compact after the interruptions"
echo "ploop-compact-offline: ok"
