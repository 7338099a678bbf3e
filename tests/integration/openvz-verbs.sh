#!/usr/bin/env bash
# OpenVZ's verb and flag spellings: fsck (= check), balloon show|status,
# replace, init -n/-B, info of a raw image, resize of an absurd size, and
# OpenVZ's exit numbers (43 no snapshot, 38 usage) on them.
source "$(dirname "$0")/functions.sh"
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
OVZ=${OPENVZ_PLOOP:-/opt/openvz-ploop/ploop}
export PLOOP_NO_PROGRESS=1
TMP=$(mktemp -d)
cleanup "rm -rf '$TMP'"
cd "$TMP"

code_is() { # WANT CMD...: exits WANT with one line on stderr
  local want=$1 rc=0
  shift
  expect_fail "$@" >/dev/null
  "$@" >/dev/null 2>&1 || rc=$?
  [[ $rc -eq $want ]] || fail "'$*' exited $rc, expected $want"
}

mkdir d && $PLOOP init -t none -s 16M d/root.hds >/dev/null
head -c 3M /dev/urandom >p.raw
$PLOOP import p.raw d >/dev/null

# --- fsck is check
[[ $($PLOOP fsck d) == "$($PLOOP check d)" ]] || fail "fsck differs from check"
$PLOOP fsck --help | grep -q '^usage: ploop fsck' || fail "fsck --help"
code_is 4 $PLOOP fsck "$TMP/none"

# --- balloon
$PLOOP balloon show d | grep -qx 'Current size of hidden balloon is 0 bytes' || fail "balloon show"
$PLOOP balloon status d | grep -q 'is NONE' || fail "balloon status"
code_is 38 $PLOOP balloon inflate d
code_is 4 $PLOOP balloon show "$TMP/none"

# --- replace: an identical copy is accepted, a different one refused with nothing changed
cp d/root.hds d/copy.hds
cp d/root.hds d/bad.hds
printf 'x' | dd of=d/bad.hds bs=1 seek=$((2 * 1048576 + 7)) conv=notrunc status=none
before=$(sum d/DiskDescriptor.xml)
code_is 38 $PLOOP replace -l 0 -i d/bad.hds d
[[ $(sum d/DiskDescriptor.xml) == "$before" ]] || fail "a refused replace changed the descriptor"
code_is 43 $PLOOP replace -u '{11111111-2222-3333-4444-555555555555}' -i d/copy.hds d
code_is 38 $PLOOP replace -i d/copy.hds d
code_is 38 $PLOOP replace -l 0 -i p.raw d
$PLOOP replace -l 0 -i d/copy.hds d >/dev/null || fail "replace by an identical copy"
$PLOOP snapshot-list -H -o fname d | grep -q '/copy.hds$' || fail "descriptor does not name copy.hds"
$PLOOP check -f d >/dev/null || fail "check after replace"
rm -f x.raw && $PLOOP export -o x.raw d >/dev/null
cmp -n $((3 * 1048576)) x.raw p.raw || fail "contents after replace"
cp d/copy.hds d/again.hds
$PLOOP replace -o copy.hds -i d/again.hds --keep-name d >/dev/null || fail "replace --keep-name"
[[ ! -e d/again.hds ]] || fail "--keep-name left the new name"
$PLOOP check -f d >/dev/null || fail "check after replace --keep-name"
if [[ -x $OVZ ]]; then "$OVZ" check -f -c -r d/copy.hds >/dev/null 2>&1 || fail "OpenVZ's check after replace"; fi
echo "ok: replace"

# --- import from a pipe (and from a redirected stdin)
code_is 38 sh -c "cat p.raw | $PLOOP import - '$TMP/pipe'"
[[ ! -e pipe ]] || fail "a refused pipe import left a directory"
cat p.raw | $PLOOP import -s 8M - pipe >/dev/null || fail "import - from a pipe"
rm -f y.raw && $PLOOP export -o y.raw pipe >/dev/null
cmp -n $((3 * 1048576)) y.raw p.raw || fail "contents after import from a pipe"
[[ $(stat -c %s y.raw) -eq $((8 << 20)) ]] || fail "size after import -s 8M from a pipe"
$PLOOP check -f pipe >/dev/null || fail "check after import from a pipe"
if [[ -x $OVZ ]]; then "$OVZ" check -f -c -r pipe/root.hds >/dev/null 2>&1 || fail "OpenVZ's check after import -"; fi
$PLOOP import - pipe2 <p.raw >/dev/null || fail "import - from a redirected file"
echo "ok: import -"

# --- exit numbers
code_is 43 $PLOOP snapshot-list -u '{11111111-2222-3333-4444-555555555555}' d
code_is 38 $PLOOP resize -s 18446744073709551104 d
expect_fail $PLOOP resize -s 18446744073709551104 d | grep -q 'bad size' || fail "resize: no 'bad size'"
code_is 38 $PLOOP init -t none -s 16M -n e/root.hds
$PLOOP --help | grep -q '^  6    read error' || fail "--help lacks exit 6"

# --- info of a raw image
mkdir r && $PLOOP init -t none -s 4M r/root.hds >/dev/null && $PLOOP convert -f raw r >/dev/null
$PLOOP info r | grep -q '^format: *raw$' || fail "info of a raw disk: $($PLOOP info r)"
! $PLOOP info r | grep -q 'format version' || fail "info of a raw disk prints a format version"
echo "ok: exit numbers, info"

# --- init -t ext4 -n -B 1024 (root, through a local attach)
if [[ $(id -u) -eq 0 ]] && command -v mkfs.ext4 >/dev/null && command -v dumpe2fs >/dev/null; then
  mkdir f
  if $PLOOP init -s 64M -t ext4 -n -B 1024 f/root.hds >/dev/null 2>"$TMP/init.err"; then
    rm -f f.raw && $PLOOP export -o f.raw f >/dev/null
    bs=$(dumpe2fs -h f.raw 2>/dev/null | awk -F: '/^Block size/ {gsub(/ /, "", $2); print $2}')
    [[ $bs == 1024 ]] || fail "init -B 1024 made block size '$bs'"
    echo "ok: init -n -B"
    mkdir -p mnt
    $PLOOP mount -F -m "$TMP/mnt" f >/dev/null || fail "mount -F"
    cleanup "$PLOOP umount '$TMP/f' >/dev/null 2>&1 || true"
    echo data >mnt/file
    # A served disk's snapshot error: OpenVZ's number as offline, the disk named once.
    s=$($PLOOP snapshot f) || fail "online snapshot"
    code_is 38 $PLOOP snapshot -u "$s" f
    err=$(expect_fail $PLOOP snapshot -u "$s" f)
    [[ $(grep -o "$TMP/f" <<<"$err" | wc -l) -eq 1 ]] || fail "the disk is not named exactly once: $err"
    code_is 43 $PLOOP snapshot-merge -u '{11111111-2222-3333-4444-555555555555}' f
    # snapshot-delete of a served disk: online (the child merged into it)
    echo one >mnt/one
    s1=$($PLOOP snapshot f)
    echo two >mnt/two
    n0=$($PLOOP snapshot-list -H f | wc -l)
    $PLOOP snapshot-delete -u "$s1" f >/dev/null || fail "online snapshot-delete"
    [[ $($PLOOP snapshot-list -H f | wc -l) -eq $((n0 - 1)) ]] || fail "online delete left the snapshot"
    ! $PLOOP snapshot-list -H -o uuid f | grep -qF "$s1" || fail "online delete: $s1 still listed"
    [[ $(cat mnt/one mnt/two) == "one
two" ]] || fail "online delete changed the mounted data"
    code_is 17 $PLOOP snapshot-switch -u "$s" f
    expect_fail $PLOOP snapshot-switch -u "$s" f | grep -q "Unable to perform switch to snapshot operation on running device (/dev/.* mounted on $TMP/mnt)" ||
      fail "snapshot-switch of a mounted disk: not OpenVZ's wording"
    code_is 43 $PLOOP snapshot-delete -u '{11111111-2222-3333-4444-555555555555}' f
    $PLOOP umount f >/dev/null || fail "umount after mount -F"
    $PLOOP check -f f >/dev/null || fail "check after the online verbs"
    if [[ -x $OVZ ]]; then
      for img in f/root.hds*; do "$OVZ" check -f -c -r "$img" >/dev/null 2>&1 || fail "OpenVZ's check of $img"; done
    fi
    code_is 38 $PLOOP mount -F f
    echo "ok: mount -F"
  else
    echo "note: init -t ext4 not possible here: $(cat "$TMP/init.err")"
  fi
fi
# --- init without -t makes ext4, as OpenVZ's ploop does; -n alone implies it
if [[ $(id -u) -eq 0 ]] && command -v mkfs.ext4 >/dev/null; then
  mkdir g && $PLOOP init -s 32M -n g/root.hds >/dev/null || fail "init without -t"
  rm -f g.raw && $PLOOP export -o g.raw g >/dev/null
  [[ $(blkid -p -o value -s TYPE g.raw) == ext4 ]] || fail "init without -t made '$(blkid -p g.raw)'"
  code_is 38 $PLOOP init -s 32M -t none -B 4096 h/root.hds
  [[ ! -e h ]] || fail "a refused init left h behind"
  echo "ok: init defaults to ext4"
fi
# --- a read-only mount of a snapshot of a mounted XFS (same UUID: nouuid)
if [[ $(id -u) -eq 0 ]] && command -v mkfs.xfs >/dev/null; then
  mkdir -p x xm xs
  if $PLOOP init -s 320M -t xfs x/root.hds >/dev/null 2>"$TMP/init.err"; then
    $PLOOP mount -m "$TMP/xm" x >/dev/null || fail "mount xfs"
    cleanup "$PLOOP umount '$TMP/x' >/dev/null 2>&1 || true"
    echo hello >xm/f
    sync
    s=$($PLOOP snapshot x) || fail "online snapshot of a mounted xfs"
    $PLOOP mount -u "$s" -m "$TMP/xs" x >/dev/null || fail "read-only mount of the snapshot of a mounted xfs"
    [[ $(cat xs/f) == hello ]] || fail "snapshot of xfs reads wrong"
    $PLOOP umount -m "$TMP/xs" >/dev/null || fail "umount of the xfs snapshot"
    $PLOOP umount x >/dev/null || fail "umount xfs"
    echo "ok: xfs snapshot mounted beside its origin"
  else
    echo "note: init -t xfs not possible here: $(cat "$TMP/init.err")"
  fi
fi
echo PASS
