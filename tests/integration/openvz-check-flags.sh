#!/usr/bin/env bash
# An OpenVZ admin's script against `ploop check`: OpenVZ's flags with
# OpenVZ's meaning and OpenVZ's exit codes (SYSEXIT_*), compared with what
# OpenVZ's own check (/opt/openvz-ploop, from install-deps) returns on the
# same broken images. -r never writes (sha256 of every file unchanged, the
# in-use mark included), -F repairs, -d drops the in-use mark.
source "$(dirname "$0")/functions.sh"
requires python3
[[ -x $PLOOP ]] || skip "ploop not built in $BUILD"
OVZ=${OPENVZ_PLOOP:-/opt/openvz-ploop/ploop}
[[ -x $OVZ ]] || skip "OpenVZ's ploop not unpacked (scripts/install-deps.sh)"
TOOL="python3 $(dirname "$0")/ploop-image-tool.py"
export PLOOP_NO_PROGRESS=1

rc_of() { local rc=0; "$@" >/dev/null 2>&1 || rc=$?; echo "$rc"; }
# same WANT WHAT FLAGS FILE: ours and OpenVZ's check exit WANT on copies of FILE.
same() {
  local want=$1 what=$2 flags=$3 file=$4 ours theirs
  cp "$file" "$TMP/o.hds"
  cp "$file" "$TMP/v.hds"
  # shellcheck disable=SC2086
  ours=$(rc_of $PLOOP check $flags "$TMP/o.hds")
  # shellcheck disable=SC2086
  theirs=$(rc_of "$OVZ" check $flags "$TMP/v.hds")
  echo "$what: check $flags -> ours $ours, OpenVZ $theirs"
  [[ $theirs -eq $want ]] || fail "$what: OpenVZ's check $flags exits $theirs, the test expects $want"
  [[ $ours -eq $want ]] || fail "$what: our check $flags exits $ours, OpenVZ's $want"
  if [[ $flags == *r* ]]; then
    cmp -s "$TMP/o.hds" "$file" || fail "$what: our check $flags (read-only) wrote to the image"
  fi
}
in_use() { $TOOL header "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["in_use"])'; }

D=$TMP/disk
$TOOL mkraw "$TMP/m.raw" $((8 << 20)) 3
$PLOOP import "$TMP/m.raw" "$D" >/dev/null
cp "$D/root.hds" "$TMP/clean.hds"
cp "$TMP/clean.hds" "$TMP/dirty.hds"
$TOOL poke "$TMP/dirty.hds" 44 I 0x746F6E59
cp "$TMP/clean.hds" "$TMP/bad.hds"
$TOOL bat-set "$TMP/bad.hds" 1 999 # past the end of the file
cp "$TMP/bad.hds" "$TMP/baddirty.hds"
$TOOL poke "$TMP/baddirty.hds" 44 I 0x746F6E59
head -c 1M /dev/urandom >"$TMP/garbage.hds"

# --- exit codes, side by side with OpenVZ's check
same 0 "clean image" "" "$TMP/clean.hds"
same 0 "clean image, forced" "-f" "$TMP/clean.hds"
same 37 "marked in use" "" "$TMP/dirty.hds"
same 37 "marked in use, read-only" "-r" "$TMP/dirty.hds"
same 0 "marked in use, -d" "-d" "$TMP/dirty.hds"
same 7 "marked in use, -r -d" "-r -d" "$TMP/dirty.hds"
same 11 "corrupt BAT, forced" "-f" "$TMP/bad.hds"
same 11 "corrupt BAT, forced read-only" "-f -r" "$TMP/bad.hds"
same 11 "corrupt BAT, -F read-only" "-F -r" "$TMP/bad.hds"
same 0 "corrupt BAT, -F" "-F" "$TMP/bad.hds"
same 11 "corrupt and in use" "" "$TMP/baddirty.hds"
same 37 "corrupt and in use, -F" "-F" "$TMP/baddirty.hds"
same 0 "corrupt and in use, -F -d" "-F -d" "$TMP/baddirty.hds"
same 11 "not a ploop image" "" "$TMP/garbage.hds"
ours=$(rc_of $PLOOP check "$TMP/nonexistent.hds")
theirs=$(rc_of "$OVZ" check "$TMP/nonexistent.hds")
[[ $ours -eq 4 && $theirs -eq 4 ]] || fail "missing image: ours $ours, OpenVZ $theirs, both should be 4"
if [[ $(id -u) -eq 0 ]] && id nobody >/dev/null 2>&1; then
  # Unreadable: an open failure (SYSEXIT_OPEN) for both.
  cp "$TMP/dirty.hds" "$TMP/locked.hds"
  chmod 600 "$TMP/locked.hds"
  chmod 755 "$TMP"
  ours=$(rc_of su nobody -s /bin/sh -c "$PLOOP check -r '$TMP/locked.hds'")
  theirs=$(rc_of su nobody -s /bin/sh -c "$OVZ check -r '$TMP/locked.hds'")
  [[ $ours -eq 4 && $theirs -eq 4 ]] || fail "unreadable image: ours $ours, OpenVZ $theirs, both should be 4"
fi

# --- -r never writes: every combination, on a whole disk too, with its
# in-use mark (what a crashed server leaves)
cp "$TMP/baddirty.hds" "$D/root.hds"
before=$(sum "$D/root.hds")
for flags in "-r" "-f -r" "-F -r" "-d -r" "-F -d -r" "--repair --ro" "-S -r" "-r -c -s"; do
  # shellcheck disable=SC2086
  rc=$(rc_of $PLOOP check $flags "$D")
  [[ $rc -ne 0 ]] || fail "check $flags on a corrupt disk exited 0"
  [[ $(sum "$D/root.hds") == "$before" ]] || fail "check $flags wrote to the disk"
  [[ $(in_use "$D/root.hds") -eq $((0x746F6E59)) ]] || fail "check $flags dropped the in-use mark"
done

# --- -F repairs the content, -d the mark; the disk then opens and exports
rc=$(rc_of $PLOOP check -F "$D")
[[ $rc -eq 37 ]] || fail "check -F of a corrupt disk marked in use exited $rc, expected 37"
[[ $(in_use "$D/root.hds") -eq $((0x746F6E59)) ]] || fail "check -F without -d dropped the in-use mark"
[[ $($TOOL bat-get "$D/root.hds" 1) -eq 0 ]] || fail "check -F did not clear the bad slot"
$PLOOP check -F -d "$D" >/dev/null || fail "check -F -d did not finish the repair"
[[ $(in_use "$D/root.hds") -eq 0 ]] || fail "check -F -d left the in-use mark"
$PLOOP check -f "$D" >/dev/null || fail "not clean after the repair"
"$OVZ" check -f -r "$D/root.hds" >/dev/null 2>&1 || fail "OpenVZ's check refuses our repaired image"
$PLOOP export -o "$TMP/x.raw" "$D" >/dev/null || fail "repaired disk does not export"

# --- a served disk is busy (17); fsck is check's other name
echo "openvz-check-flags: ok"
